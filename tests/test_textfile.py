"""node_exporter textfile output, read back through the real node_exporter binary."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

import exporter_cases as C
from ccdiag.exporters.textfile import render_textfile, write_textfile
from test_metrics import value


def test_write_textfile_is_atomic_valid_and_timestamp_free(tmp_path):
    path = write_textfile(str(tmp_path), C.result(), completed_at=1234.0)
    assert path == str(tmp_path / "ccdiag.prom")
    assert sorted(os.listdir(tmp_path)) == ["ccdiag.prom"]  # no temporary file left behind
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    text = open(path).read()
    assert value(text, "ccdiag_last_collection_timestamp_seconds") == 1234.0
    assert value(text, "ccdiag_gpu_up", gpu=1) == 0
    # daemon-only series are not in a textfile; no sample carries a client-side timestamp
    for name in ("ccdiag_collection_age_seconds", "ccdiag_collection_interval_seconds",
                 "ccdiag_collection_cycles_total"):
        assert name not in text
    assert all(s.timestamp is None for fam in text_string_to_metric_families(text) for s in fam.samples)
    promtool = shutil.which("promtool")
    if promtool:
        proc = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=60)
        assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()


def test_rewrite_replaces_the_file(tmp_path):
    write_textfile(str(tmp_path), C.result(), completed_at=1.0)
    write_textfile(str(tmp_path), C.result(), completed_at=2.0)
    assert value((tmp_path / "ccdiag.prom").read_text(), "ccdiag_last_collection_timestamp_seconds") == 2.0
    assert sorted(os.listdir(tmp_path)) == ["ccdiag.prom"]


def test_bad_directory_or_name_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_textfile(str(tmp_path / "missing"), C.result())
    with pytest.raises(ValueError):
        write_textfile(str(tmp_path), C.result(), filename="ccdiag.txt")
    with pytest.raises(ValueError):
        write_textfile(str(tmp_path), C.result(), filename="../x.prom")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.prometheus
def test_real_node_exporter_serves_the_textfile(tmp_path):
    binary = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if binary is None:
        pytest.skip("node_exporter not installed")
    result = C.sample_result(C.HEALTHY) if C.HEALTHY.exists() else C.result()
    write_textfile(str(tmp_path), result)
    port = _free_port()
    proc = subprocess.Popen([binary, f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
                             "--collector.textfile", f"--collector.textfile.directory={tmp_path}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        text = None
        end = time.monotonic() + 20
        while time.monotonic() < end and text is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
                    text = resp.read().decode()
            except OSError:
                time.sleep(0.1)
        assert text is not None, "node_exporter did not answer"
        assert value(text, "node_textfile_scrape_error") == 0
        assert value(text, "ccdiag_probe_success", probe="pcie") == 1
        want = render_textfile(result).decode()
        assert value(text, "ccdiag_verdict_severity") == value(want, "ccdiag_verdict_severity")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
