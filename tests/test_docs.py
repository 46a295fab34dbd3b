"""The reference pages are generated from what they describe and must not drift from it."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO


def test_reference_pages_are_up_to_date():
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_docs.py"), "--check"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_metric_is_in_the_reference():
    import json

    page = (REPO / "docs" / "metrics.md").read_text()
    for m in json.loads((REPO / "exporters" / "metrics.json").read_text())["metrics"]:
        assert f"`{m['name']}`" in page
