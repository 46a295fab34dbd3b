"""What NCCL reports while a job runs (the ``ncclras`` client's output, the Inspector plugin's records)
and logs of several ranks read as one job, through ``ccdiag nccl --log``.

Data: the RAS outputs are the samples NCCL's RAS guide prints (tests/fixtures/nccl-ras/SOURCES.md); the
Inspector record is the one in the plugin's README; multi-rank Inspector records and per-rank log files
are SYNTHESIZED here from those keys and from the real lines of tests/fixtures/nccl-logs, as each test says.
"""

from __future__ import annotations

import json
import pathlib
import time

import pytest

from ccdiag.nccl import inspector, rasread
from ccdiag.nccl.diagnose import diagnose
from ccdiag.nccl.logread import read_nccl_logs
from cli_runner import run

HERE = pathlib.Path(__file__).resolve().parent
RAS = HERE / "fixtures" / "nccl-ras"
INSPECTOR = HERE / "fixtures" / "nccl-inspector"
LOGS = HERE / "fixtures" / "nccl-logs"


@pytest.mark.parametrize("name,family,needle", [
    ("guide-dead-process.txt", "ras-dead", "process 3487984 on node 172.16.64.213 (GPU 5)"),
    ("guide-unresponsive-process.txt", "ras-incomplete", "Process 3487984 on node 172.16.64.213"),
    ("guide-mismatch-operation-counts.txt", "ras-mismatch", "the ranks at operation 6649 are behind"),
    ("guide-healthy-job.txt", "ras-ok", "32 processes on 4 nodes"),
    ("guide-monitor-peer-dead.txt", "ras-dead", "process 1524345 on node 172.16.64.245"),
    ("guide-json-missing-rank.json", "ras-incomplete", "The missing rank: 1"),
])
def test_ras_outputs_name_the_dead_missing_or_lagging_ranks(name, family, needle):
    text = (RAS / name).read_text()
    assert rasread.looks_like_ras(text)
    found = rasread.read_ras(text)
    assert found[0].family == family and needle in found[0].text, [f.render() for f in found]


def _record(rank: int, busbw: float, sn: int, host: str = "node-a") -> dict:
    return {"header": {"id": "0xabc", "comm_name": "DP", "rank": rank, "n_ranks": 8, "nnodes": 2},
            "metadata": {"hostname": f"{host}", "pid": 1000 + rank},
            "coll_perf": {"coll": "AllReduce", "coll_sn": sn, "coll_msg_size_bytes": 1 << 30,
                          "coll_exec_time_us": int(1e6 / busbw), "coll_algobw_gbs": busbw / 1.75, "coll_busbw_gbs": busbw}}


def test_inspector_records_name_a_slow_rank_and_a_late_one():
    """SYNTHESIZED records in the plugin's format: rank 5 runs the same AllReduce at 60% of the others,
    rank 3 at 150% (the others wait for it)."""
    bw = {r: 400.0 for r in range(8)}
    bw[5], bw[3] = 240.0, 600.0
    text = "\n".join(json.dumps(_record(r, bw[r], sn)) for sn in range(20) for r in range(8))
    found = inspector.judge(inspector.records([text]))
    slow = next(f for f in found if f.family == "inspector-slow")
    late = next(f for f in found if f.family == "inspector-late")
    assert "rank 5 (node-a pid 1005) 240.0 GB/s" in slow.text and "rank 3" not in slow.text
    assert "rank 3 (node-a pid 1003) 600.0 GB/s" in late.text


def test_the_readme_record_reads_and_one_rank_alone_judges_nothing():
    text = (INSPECTOR / "readme-record.json").read_text()
    assert inspector.looks_like_inspector(text)
    found = inspector.judge(inspector.records([text]))
    assert [f.family for f in found] == ["inspector-ok"] and "1 collective records" in found[0].text


def _split_by_host(tmp_path, name: str) -> list[pathlib.Path]:
    """SYNTHESIZED per-rank files: the real lines of one fixture written into one file per host, as
    NCCL_DEBUG_FILE=nccl.%h.%p would have them."""
    by_host: dict[str, list[str]] = {}
    for line in (LOGS / name).read_text().splitlines():
        if line.startswith("#") or ":" not in line:
            continue
        by_host.setdefault(line.split(":", 1)[0].split()[-1], []).append(line)
    out = []
    for host, lines in by_host.items():
        p = tmp_path / f"nccl.{host}.log"
        p.write_text("\n".join(lines) + "\n")
        out.append(p)
    return out


def test_per_rank_files_read_as_one_job_name_versions_that_differ(tmp_path):
    """Two hosts of a real log in two files; one host's version line changed HERE to an older release."""
    files = _split_by_host(tmp_path, "nccl-1232-rank-prefix-bootstrap-enp10s0.log")
    assert len(files) == 2
    files[1].write_text("NCCL version 2.18.3+cuda12.1\n" + files[1].read_text())
    files[0].write_text("NCCL version 2.21.5+cuda12.4\n" + files[0].read_text())
    log = read_nccl_logs([str(tmp_path)])
    assert log.sources == sorted(str(f) for f in files) and set(log.versions) == {"2.18.3", "2.21.5"}
    found = diagnose(log)
    assert any(f.title == "NCCL versions differ between ranks" and f.severity == "fail" for f in found)


def test_a_setting_that_differs_between_hosts_is_named():
    """Real lines (nccl-1232) with one host's NCCL_SOCKET_IFNAME changed HERE."""
    from ccdiag.nccl.logread import parse_nccl_log

    lines = [l for l in (LOGS / "nccl-1232-rank-prefix-bootstrap-enp10s0.log").read_text().splitlines()
             if not l.startswith("#")]
    env = [l for l in lines if "NCCL_SOCKET_IFNAME set by environment" in l]
    assert env
    changed = env[0].replace("en,eth,em,bond", "ib0").replace("node0", "node9")
    found = diagnose(parse_nccl_log("\n".join(lines + [changed])))
    assert any(f.title == "setting differs between ranks" and "NCCL_SOCKET_IFNAME" in f.text for f in found)


def test_reading_past_the_deadline_stops():
    with pytest.raises(TimeoutError):
        read_nccl_logs([str(LOGS / "nccl-1232-rank-prefix-bootstrap-enp10s0.log")], deadline=time.monotonic() - 1)


def test_the_cli_reads_a_log_directory_an_ras_output_and_inspector_records_together(tmp_path):
    for f in _split_by_host(tmp_path, "nccl-1235-oom-on-rank-3-connection-closed-on-rank-0.log"):
        assert f.exists()
    code, out, err = run("nccl", "--log", str(tmp_path), "--log", str(RAS / "guide-dead-process.txt"),
                         "--log", str(INSPECTOR / "readme-record.json"), "--json")
    assert code == 0, err
    doc = json.loads(out)["nccl_log"]
    families = [f["family"] for f in doc["findings"]]
    assert families[0] == "cuda-oom" and "ras-dead" in families and "inspector-ok" in families
    assert doc["differences"][0].startswith("GPU out of memory")


def test_the_cli_text_says_what_it_means_and_what_to_do():
    code, out, _ = run("nccl", "--log", str(LOGS / "nccl-342-shm-posix-fallocate-no-prefix.log"))
    assert code == 0
    assert "[FAIL] /dev/shm too small or full" in out and "what it means:" in out and "what to do:" in out
