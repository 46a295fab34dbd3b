"""Several "hosts" on one machine for the MPI tests and benchmarks: network namespaces on a bridge.

Why: the link that makes a multi-node job slow is between nodes, so the cluster code has to be
exercised with ranks on different network stacks, a real ``mpirun`` and a link that can be slowed
(``tc ... tbf``). Each namespace gets its own UTS namespace too (``unshare --uts`` in the remote
agent), so ``gethostname()`` in a rank says which "host" it runs on, as on a real cluster.

Every name carries a unique prefix (``ccdt`` + pid + a counter) and every address is in
``10.77.<k>.0/24`` (a second network, when asked for: ``10.78.<k>.0/24``) with ``<k>`` chosen from
the pid, so concurrent runs on one machine never share
a namespace, a link or a subnet; only addresses of the hosts made here receive traffic. Faults:
``tc tbf`` (a slow host or link), an MTU apart (a host's interface, a host's bridge port), nftables
in a host's namespace (random loss with ``numgen random``, drops by packet size), SIGSTOP/SIGCONT
pulses on a rank (:func:`pulse`).
:meth:`NetnsCluster.close` removes everything (namespaces, bridges, veths, ``/etc/hosts`` lines,
processes it started) and is safe to call twice or after a half-finished set-up.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HOSTS_FILE = "/etc/hosts"
_COUNTER = itertools.count()


def netns_skip_reason() -> str | None:
    """Why the namespace tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    for tool in ("ip", "tc", "unshare", "mpirun"):
        if shutil.which(tool) is None:
            return f"needs `{tool}` on PATH (scripts/install-test-deps.sh installs openmpi-bin, iproute2)"
    try:
        import mpi4py  # noqa: F401
        import numpy  # noqa: F401
    except ImportError as exc:
        return f"needs {exc.name} (pip install '.[mpi]')"
    return None


def _b36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if not n:
            return out


_OURS = re.compile(r"^ccdt([0-9a-z]+)x[0-9a-z]+")


def _stale(name: str) -> bool:
    """A name this module made in a test process that no longer runs (a run killed before its
    clean-up, say at CI's time limit)."""
    m = _OURS.match(name)
    return bool(m) and not os.path.exists(f"/proc/{int(m.group(1), 36)}")


def sweep_stale() -> None:
    """Remove the namespaces, links and /etc/hosts lines of test runs that died uncleaned."""
    ns = _run("ip", "netns", "list", check=False).stdout.split()
    for name in ns:
        if _stale(name):
            _run("ip", "netns", "del", name, check=False)
    for line in _run("ip", "-o", "link", "show", check=False).stdout.splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            name = parts[1].strip().split("@")[0]
            if _stale(name):
                _run("ip", "link", "del", name, check=False)
    try:
        with open(HOSTS_FILE) as fh:
            lines = fh.readlines()
        kept = [ln for ln in lines if not ("# ccdiag-test " in ln and _stale(ln.rsplit(" ", 1)[-1].strip()))]
        if len(kept) != len(lines):
            with open(HOSTS_FILE, "w") as fh:  # in place: /etc/hosts may be a bind mount
                fh.writelines(kept)
    except OSError:
        pass


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=check, capture_output=True, text=True, timeout=30)


class NetnsCluster:
    """``n`` namespaced hosts on one bridge; ``hosts[i]`` is a host name that resolves to its address.

    ``nets=2`` gives every host a second interface, ``eth1`` in ``10.78.<k>.0/24`` on a bridge of its
    own: the management-plus-data-network node, where one network can be slow while the other is
    fine. MPI (and the host names) stay on ``eth0``; the second network is reached by address."""

    def __init__(self, n: int, prefix: str | None = None, nets: int = 1):
        self.n = n
        self.prefix = prefix or f"ccdt{_b36(os.getpid())}x{_b36(next(_COUNTER))}"
        k = 10 + (os.getpid() * 7 + next(_COUNTER)) % 240
        self.subnet = f"10.77.{k}"
        self.bridge = f"{self.prefix}br"[:15]
        self.hosts = [f"{self.prefix}h{i}" for i in range(n)]
        self.veths = [f"{self.prefix}v{i}"[:15] for i in range(n)]
        self.addrs = [f"{self.subnet}.{11 + i}" for i in range(n)]
        self.nets = nets
        self.subnet2 = f"10.78.{k}"
        self.bridge2 = f"{self.prefix}b2"[:15]
        self.veths2 = [f"{self.prefix}w{i}"[:15] for i in range(n)] if nets > 1 else []
        self.addrs2 = [f"{self.subnet2}.{11 + i}" for i in range(n)] if nets > 1 else []
        self.dir = tempfile.mkdtemp(prefix=self.prefix)
        self.rsh = os.path.join(self.dir, "rsh")
        self.procs: list[subprocess.Popen] = []
        self._marker = f"# ccdiag-test {self.prefix}"
        self._made_ns: list[str] = []
        self._made_bridge = False
        self._made_bridge2 = False

    # -- set-up / tear-down -------------------------------------------------------------------
    def up(self) -> "NetnsCluster":
        sweep_stale()
        try:
            _run("ip", "link", "add", self.bridge, "type", "bridge")
            self._made_bridge = True
            _run("ip", "link", "set", self.bridge, "up")
            _run("ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
            for host, veth, addr in zip(self.hosts, self.veths, self.addrs):
                _run("ip", "netns", "add", host)
                self._made_ns.append(host)
                _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", host)
                _run("ip", "link", "set", veth, "master", self.bridge, "up")
                _run("ip", "-n", host, "addr", "add", f"{addr}/24", "dev", "eth0")
                _run("ip", "-n", host, "link", "set", "eth0", "up")
                _run("ip", "-n", host, "link", "set", "lo", "up")
            if self.nets > 1:
                _run("ip", "link", "add", self.bridge2, "type", "bridge")
                self._made_bridge2 = True
                _run("ip", "link", "set", self.bridge2, "up")
                _run("ip", "addr", "add", f"{self.subnet2}.1/24", "dev", self.bridge2)
                for host, veth, addr in zip(self.hosts, self.veths2, self.addrs2):
                    _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth1", "netns", host)
                    _run("ip", "link", "set", veth, "master", self.bridge2, "up")
                    _run("ip", "-n", host, "addr", "add", f"{addr}/24", "dev", "eth1")
                    _run("ip", "-n", host, "link", "set", "eth1", "up")
            with open(HOSTS_FILE, "a") as fh:
                for host, addr in zip(self.hosts, self.addrs):
                    fh.write(f"{addr} {host} {self._marker}\n")
            with open(self.rsh, "w") as fh:
                # the remote agent OpenMPI calls as `rsh HOST CMD...`: enter HOST's network and UTS
                # namespaces and name the UTS namespace after the host
                fh.write('#!/bin/bash\nh=$1; shift\n'
                         'exec ip netns exec "$h" unshare --uts bash -c "hostname $h; $*"\n')
            os.chmod(self.rsh, 0o755)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        self._kill_ns_pids()
        for host in self._made_ns:
            _run("ip", "netns", "del", host, check=False)
        self._made_ns = []
        for veth in self.veths + self.veths2:
            _run("ip", "link", "del", veth, check=False)
        if self._made_bridge:
            _run("ip", "link", "del", self.bridge, check=False)
            self._made_bridge = False
        if self._made_bridge2:
            _run("ip", "link", "del", self.bridge2, check=False)
            self._made_bridge2 = False
        try:
            with open(HOSTS_FILE) as fh:
                lines = fh.readlines()
            kept = [ln for ln in lines if self._marker not in ln]
            if len(kept) != len(lines):
                # /etc/hosts may be a bind mount: rewrite in place, never replace the file
                with open(HOSTS_FILE, "w") as fh:
                    fh.writelines(kept)
        except OSError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def _kill_ns_pids(self) -> None:
        """Processes still running inside our namespaces (a rank mpirun left behind)."""
        for host in self._made_ns:
            r = _run("ip", "netns", "pids", host, check=False)
            for pid in r.stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass

    def __enter__(self):
        return self.up()

    def __exit__(self, *exc):
        self.close()

    # -- faults ---------------------------------------------------------------------------------
    def slow_host(self, i: int, rate: str = "50mbit", net: int = 0, burst: str = "32kbit") -> None:
        """Everything sent *to* host ``i`` (over its ``eth<net>``) passes a token bucket of ``rate``
        (replacing a line rate set before, so a host can be capped first and slowed after)."""
        dev = self.veths2[i] if net == 1 else self.veths[i]
        _run("tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate,
             "burst", burst, "latency", "50ms")

    def line_rate(self, rate: str = "1gbit") -> None:
        """Every host's every interface sends at ``rate``, like NICs with a line rate. Why: TCP over
        a bare veth runs at memory speed, so on a loaded 2-core machine its figures follow the CPU
        scheduler, not the link; at a line rate a transfer measures the link, as on a cluster. The
        shaper sits on each host's own interface (its egress), as a NIC's rate does: the host's
        stack waits for it and nothing is dropped. (On the bridge's side, toward the host, a shaper
        drops what overflows its queue: TCP's slow start resent up to 0.9 % of a healthy pair's
        segments there, which is loss.)"""
        for net in range(self.nets):
            for host in self.hosts:
                _run("ip", "netns", "exec", host, "tc", "qdisc", "replace", "dev", f"eth{net}", "root", "tbf",
                     "rate", rate, "burst", "4mbit", "latency", "200ms")

    def slow_link(self, src: int, dst: int, rate: str = "50mbit", line: str = "10gbit") -> bool:
        """Only traffic from host ``src`` to host ``dst`` is slowed (htb + u32 filter), the rest of
        what ``dst`` receives runs at ``line`` (replacing a line rate set before); False when this
        kernel lacks the filter."""
        dev = self.veths[dst]
        try:
            _run("tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "10")
            _run("tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate", line)
            _run("tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:20", "htb", "rate", rate,
                 "ceil", rate)
            _run("tc", "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
                 "match", "ip", "src", f"{self.addrs[src]}/32", "flowid", "1:20")
        except subprocess.CalledProcessError:
            _run("tc", "qdisc", "del", "dev", dev, "root", check=False)
            return False
        return True

    def iface_down(self, i: int) -> None:
        _run("ip", "-n", self.hosts[i], "link", "set", "eth0", "down")

    def jumbo(self, mtu: int = 9000) -> None:
        """Every host's eth0, its bridge port and the bridge at ``mtu`` (a jumbo-frame fabric)."""
        _run("ip", "link", "set", self.bridge, "mtu", str(mtu))
        for host, veth in zip(self.hosts, self.veths):
            _run("ip", "link", "set", veth, "mtu", str(mtu))
            _run("ip", "-n", host, "link", "set", "eth0", "mtu", str(mtu))

    def port_mtu(self, i: int, mtu: int) -> None:
        """Host ``i``'s bridge port (its switch port) at ``mtu``, its own eth0 left as it is: the
        classic black hole: frames larger than the port's MTU vanish in both directions (the bridge
        drops them on the way out of the port, the veth on the way in), small ones pass, and both
        hosts still advertise the larger MSS, so TCP never learns."""
        _run("ip", "link", "set", self.veths[i], "mtu", str(mtu))

    def set_mtu(self, i: int, mtu: int) -> None:
        """Host ``i``'s own eth0 at ``mtu`` (one host configured apart from the rest)."""
        _run("ip", "-n", self.hosts[i], "link", "set", "eth0", "mtu", str(mtu))

    def nft(self, i: int, rules: str) -> None:
        """Load an nftables ruleset into host ``i``'s namespace (a table of our own, replaced whole)."""
        subprocess.run(["ip", "netns", "exec", self.hosts[i], "nft", "-f", "-"],
                       input=f"table inet ccdt\ndelete table inet ccdt\ntable inet ccdt {{\n{rules}\n}}\n",
                       check=True, capture_output=True, text=True, timeout=30)

    def lose_into(self, i: int, per_mille: int) -> None:
        """Drop ``per_mille`` of every 1000 packets host ``i`` receives from the test subnet, at random
        (nftables ``numgen random``): loss TCP hides from a bandwidth figure."""
        self.nft(i, "chain input { type filter hook input priority 0; policy accept;\n"
                    f"ip saddr {self.subnet}.0/24 numgen random mod 1000 < {per_mille} drop\n}}")

    def drop_larger_than(self, i: int, size_bytes: int) -> None:
        """Host ``i`` drops every IP packet from the test subnet longer than ``size_bytes`` (a path that
        black-holes large frames, by size alone)."""
        self.nft(i, "chain input { type filter hook input priority 0; policy accept;\n"
                    f"ip saddr {self.subnet}.0/24 ip length > {size_bytes} drop\n}}")


    # -- launching --------------------------------------------------------------------------------
    def mpirun_argv(self, np_: int | None = None, slots: int = 1, hosts: list[int] | None = None,
                    hostfile: str | None = None, oob_net: int = 0) -> list[str]:
        """mpirun with the namespace agent; ranks on ``hosts`` (default all) or from ``hostfile``.
        ``oob_net=1`` keeps the launcher's own channel on the second network (``eth1``), so a fault
        on eth0 hits the ranks' traffic and not the launcher's (as with a management network)."""
        idx = list(range(self.n)) if hosts is None else hosts
        where = ["--hostfile", hostfile] if hostfile else ["-H", ",".join(f"{self.hosts[i]}:{slots}" for i in idx)]
        oob = f"{self.subnet2 if oob_net else self.subnet}.0/24"
        return ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "plm_rsh_agent", self.rsh,
                "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "eth0",
                "--mca", "oob_tcp_if_include", oob, *where,
                "-np", str(np_ or len(idx) * slots)]

    def start(self, argv: list[str], env: dict | None = None) -> subprocess.Popen:
        """Start ``argv`` (usually :meth:`mpirun_argv` + a program) in its own process group, with
        stdout/stderr in files: an orted stranded on a host whose interface is down keeps pipes
        open long after mpirun has exited, files do not."""
        k = len(self.procs)
        out = open(os.path.join(self.dir, f"out{k}"), "w+")
        err = open(os.path.join(self.dir, f"err{k}"), "w+")
        p = subprocess.Popen(argv, stdout=out, stderr=err, text=True, start_new_session=True,
                             env={**os.environ, **(env or {})})
        p.out_file, p.err_file = out, err  # type: ignore[attr-defined]
        self.procs.append(p)
        return p

    def finish(self, p: subprocess.Popen, timeout_s: float) -> tuple[int | None, str, str]:
        """Wait for ``p`` until ``timeout_s``; kill it (and whatever it left in the namespaces)
        if it is still running; returns (returncode or None when killed, stdout, stderr)."""
        try:
            rc = p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=10)
            rc = None
        self._kill_ns_pids()
        texts = []
        for fh in (p.out_file, p.err_file):  # type: ignore[attr-defined]
            fh.flush()
            fh.seek(0)
            texts.append(fh.read())
        return rc, texts[0], texts[1]

    def run(self, argv: list[str], timeout_s: float, env: dict | None = None):
        """Run to the end or ``timeout_s``; returns (returncode or None, stdout, stderr, seconds)."""
        t0 = time.monotonic()
        p = self.start(argv, env)
        rc, out, err = self.finish(p, timeout_s)
        return rc, out, err, time.monotonic() - t0

    def rank_pids(self, host: int, pattern: str) -> list[int]:
        """PIDs in host ``host``'s namespace whose command line contains ``pattern``."""
        r = _run("ip", "netns", "pids", self.hosts[host], check=False)
        found = []
        for pid in r.stdout.split():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if pattern in cmd:
                found.append(int(pid))
        return found



def pulse(pids: list[int], stop_s: float, run_s: float, until: "threading.Event") -> None:
    """Stop and continue ``pids`` (SIGSTOP for ``stop_s``, SIGCONT for ``run_s``) until ``until`` is
    set, leaving them running: a rank held off the CPU a known fraction of the time, whatever the
    machine's load."""
    try:
        while not until.is_set():
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGSTOP)
                except ProcessLookupError:
                    return
            until.wait(stop_s)
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            until.wait(run_s)
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


def python_argv(*args: str) -> list[str]:
    """Run ccdiag's CLI with this interpreter (the venv's) inside the ranks."""
    return [sys.executable, "-m", "ccdiag", *args]
