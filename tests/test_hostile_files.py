"""Files users name on the command line are read bounded and never waited on: a FIFO, /dev/zero,
a directory, an oversized file; the daemon's listener takes a burst and sends without delay; a
driver that did not load is reported with a fresh error each time (no traceback that grows)."""

from __future__ import annotations

import os
import http.client
import socket

import pytest

from cli_runner import run
from ccdiag.core.userfiles import UserFileError, read_user_bytes

from conftest import REPO

HEALTHY = REPO / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz"


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return str(path)


@pytest.mark.parametrize("args", [
    ["check", "--replay", "{fifo}"],
    ["check", "--replay", str(HEALTHY), "--policy", "{fifo}"],
    ["check", "--replay", str(HEALTHY), "--env-file", "{fifo}"],
    ["topo", "--from-smi", "{fifo}"],
    ["daemon", "--once", "--config", "{fifo}"],
    ["check", "--replay", "/dev/zero"],
    ["check", "--replay", str(HEALTHY), "--policy", "/dev/zero"],
    ["daemon", "--once", "--config", "/dev/zero"],
])
def test_a_pipe_or_device_is_refused_at_once_with_exit_2(fifo, args):
    code, out, err = run(*[a.replace("{fifo}", fifo) for a in args])
    assert code == 2, err
    assert "not a regular file" in err and len(err.strip().splitlines()) == 1


def test_an_oversized_file_names_the_limit(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"x" * 2048)
    with pytest.raises(UserFileError, match="2048 bytes is more than a policy may be \\(1024 bytes\\)"):
        read_user_bytes(str(big), "policy", 1024)
    with pytest.raises(UserFileError, match="is a directory"):
        read_user_bytes(str(tmp_path), "policy")


def test_the_listener_queues_a_burst_and_sets_tcp_nodelay():
    from ccdiag.exporters.daemon import Daemon, DaemonConfig
    from ccdiag.host.door import ReplayHost

    d = Daemon(DaemonConfig(listen="127.0.0.1:0"), host=ReplayHost(str(HEALTHY)))
    d.start()
    try:
        assert d.server.request_queue_size >= 128
        host, port = d.server.server_address[:2]
        conn = http.client.HTTPConnection(host, port, timeout=10)
        conn.request("GET", "/-/healthy")
        conn.getresponse().read()  # the connection stays open (keep-alive)
        socks = [c.transport.get_extra_info("socket") for c in list(d.server._conns) if c.transport]
        assert socks and all(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0 for s in socks)
        conn.close()
    finally:
        d.stop()


def test_a_driver_that_did_not_load_gives_a_fresh_error_each_time():
    from ccdiag.host.nvmlcall import NvmlCallError, NvmlFacade

    class NoDriver:
        def nvmlInit(self):
            err = Exception("NVML Shared Library Not Found")
            err.value = 12
            raise err

    f = NvmlFacade(binding=NoDriver(), call_timeout=2.0)
    errors = []
    for _ in range(3):
        with pytest.raises(NvmlCallError) as info:
            f.call("nvmlDeviceGetCount")
        errors.append(info.value)
    assert errors[1] is not errors[2] and errors[2].error_class == "driver_missing"
    depth = 0
    tb = errors[2].__traceback__
    while tb is not None:
        depth += 1
        tb = tb.tb_next
    assert depth < 10  # does not accumulate the frames of earlier raises
