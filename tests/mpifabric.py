"""Namespace hosts on a leaf/spine fabric of bridges, for `bench locate`'s tests.

Why: ``tests/mpinet.py`` puts every host on one bridge, which has no uplink to break. Here each
leaf is a bridge of its own with its hosts, and every leaf bridge is joined to one spine bridge by a
veth pair, its uplink: traffic between hosts of two leaves crosses both leaves' uplinks and the
spine, as on a two-tier fabric, and an uplink can be slowed with ``tc`` like a host's link. All
hosts stay in one subnet (the bridges make one layer-2 segment, a tree without loops), so
:class:`mpinet.NetnsCluster`'s launching, naming, faults and clean-up all apply unchanged.
"""

from __future__ import annotations

from mpinet import NetnsCluster, _run, sweep_stale


class LeafSpineCluster(NetnsCluster):
    """``leaves`` x ``per_leaf`` namespaced hosts; host ``i`` is on leaf ``i // per_leaf``."""

    def __init__(self, leaves: int, per_leaf: int):
        super().__init__(leaves * per_leaf)
        self.leaves, self.per_leaf = leaves, per_leaf
        self.leaf_bridges = [f"{self.prefix}l{k}"[:15] for k in range(leaves)]
        self.uplinks = [(f"{self.prefix}u{k}a"[:15], f"{self.prefix}u{k}b"[:15]) for k in range(leaves)]
        self._made_leaf = []
        self._made_up = []

    def leaf_of(self, i: int) -> int:
        return i // self.per_leaf

    def topology_conf(self) -> str:
        """The fabric as a Slurm topology.conf (tree): one switch per leaf, the spine above them."""
        lines = [f"SwitchName=leaf{k} Nodes={','.join(self.hosts[k * self.per_leaf:(k + 1) * self.per_leaf])}"
                 for k in range(self.leaves)]
        lines.append(f"SwitchName=spine Switches=leaf[0-{self.leaves - 1}]")
        return "\n".join(lines) + "\n"

    def up(self) -> "LeafSpineCluster":
        sweep_stale()
        try:
            # the spine is the base class's bridge (it holds the address the launcher uses)
            _run("ip", "link", "add", self.bridge, "type", "bridge")
            self._made_bridge = True
            _run("ip", "link", "set", self.bridge, "up")
            _run("ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
            for br, (ua, ub) in zip(self.leaf_bridges, self.uplinks):
                _run("ip", "link", "add", br, "type", "bridge")
                self._made_leaf.append(br)
                _run("ip", "link", "set", br, "up")
                _run("ip", "link", "add", ua, "type", "veth", "peer", "name", ub)
                self._made_up.append(ua)
                _run("ip", "link", "set", ua, "master", br, "up")
                _run("ip", "link", "set", ub, "master", self.bridge, "up")
            for i, (host, veth, addr) in enumerate(zip(self.hosts, self.veths, self.addrs)):
                _run("ip", "netns", "add", host)
                self._made_ns.append(host)
                _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", host)
                _run("ip", "link", "set", veth, "master", self.leaf_bridges[self.leaf_of(i)], "up")
                _run("ip", "-n", host, "addr", "add", f"{addr}/24", "dev", "eth0")
                _run("ip", "-n", host, "link", "set", "eth0", "up")
                _run("ip", "-n", host, "link", "set", "lo", "up")
            self._finish_up()
        except BaseException:
            self.close()
            raise
        return self

    def _finish_up(self) -> None:
        import os

        with open("/etc/hosts", "a") as fh:
            for host, addr in zip(self.hosts, self.addrs):
                fh.write(f"{addr} {host} {self._marker}\n")
        with open(self.rsh, "w") as fh:
            fh.write('#!/bin/bash\nh=$1; shift\n'
                     'exec ip netns exec "$h" unshare --uts bash -c "hostname $h; $*"\n')
        os.chmod(self.rsh, 0o755)

    def slow_uplink(self, leaf: int, rate: str = "50mbit") -> None:
        """Both directions of ``leaf``'s uplink through a token bucket of ``rate``."""
        for dev in self.uplinks[leaf]:
            _run("tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", "32kbit",
                 "latency", "50ms")

    def close(self) -> None:
        super().close()
        for ua in self._made_up:
            _run("ip", "link", "del", ua, check=False)
        for br in self._made_leaf:
            _run("ip", "link", "del", br, check=False)
        self._made_up, self._made_leaf = [], []
