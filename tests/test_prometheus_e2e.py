"""The real Prometheus server scrapes ``ccdiag daemon`` replaying a sample, and the values come back
through its HTTP API. Loopback only; every process started here is stopped here."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

import exporter_cases as C

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _query(port: int, expr: str) -> list:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as resp:
        doc = json.load(resp)
    assert doc["status"] == "success", doc
    return doc["data"]["result"]


def test_prometheus_scrapes_the_daemon_and_answers_queries(tmp_path):
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.skip("prometheus not installed")
    if not C.DEGRADED.exists():
        pytest.skip("bundled samples missing")
    daemon = subprocess.Popen([sys.executable, "-m", "ccdiag", "daemon", "--listen", "127.0.0.1:0",
                               "--interval", "5", "--replay", str(C.DEGRADED)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    prom = None
    try:
        line = daemon.stderr.readline()
        assert "serving http://127.0.0.1:" in line, line
        target = line.split("http://", 1)[1].split("/", 1)[0]
        port = _free_port()
        (tmp_path / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: ccdiag\n    static_configs:\n"
            f"      - targets: ['{target}']\n")
        prom = subprocess.Popen([prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
                                 f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        result = []
        end = time.monotonic() + 90
        while time.monotonic() < end:
            try:
                result = _query(port, 'ccdiag_check_severity{check="gpu.lost",gpu="6"}')
            except OSError:
                result = []
            if result:
                break
            time.sleep(0.5)
        assert result, "Prometheus never stored a ccdiag series"
        assert float(result[0]["value"][1]) == 4.0
        assert result[0]["metric"]["job"] == "ccdiag"
        up = _query(port, 'up{job="ccdiag"}')
        assert up and up[0]["value"][1] == "1"
        # alert-rule style query over the joinable labels
        failing = _query(port, 'max by (gpu) (ccdiag_check_severity{gpu!=""}) == 4')
        assert {r["metric"]["gpu"] for r in failing} >= {"6"}
        assert _query(port, "scrape_samples_scraped{job='ccdiag'}")[0]["value"][1] != "0"
    finally:
        if prom is not None:
            _stop(prom)
        _stop(daemon)
