"""What the kernel and the NIC count about a host's traffic, read before and after each transfer.

Why: TCP hides loss. At a data centre's latency a path that drops 1 % of its packets still
delivers nearly its full rate (TCP retransmits what was lost within a few microseconds), so a
bandwidth figure alone passes it, while RoCE, or the same path under a collective's fan-in, falls
apart. The kernel counts what TCP resent (``/proc/net/snmp``: ``Tcp: RetransSegs`` of ``OutSegs``;
``/proc/net/netstat``: ``TcpExt: TCPLostRetransmit``, ``TCPTimeouts``), each interface what it
dropped (``/sys/class/net/<if>/statistics``), and an RDMA NIC what it lost or was told to slow down
for (``/sys/class/infiniband/<dev>/ports/<n>/hw_counters``: ``out_of_sequence``,
``packet_seq_err``, ``local_ack_timeout_err``, ``out_of_buffer``; CNPs; ``counters/port_xmit_wait``
for PFC pauses). Read on each host before and after the transfers of one pair (in a round of disjoint
pairs a host sends to one peer only), the difference is that pair's, so loss is named on its host
and direction. The bytes each interface moved also say which interface a pair's traffic really took.

Reading is apart from parsing: :func:`parse_proc_table` and :func:`delta` are pure; the readers take
a root (``/`` live, a fixture tree in tests). Inside a network namespace ``/proc/net`` and
``/sys/class/net`` are the namespace's own, which is what a host's rank should see.
"""

from __future__ import annotations

import os

#: (table, field) of /proc/net/snmp and /proc/net/netstat -> our name
TCP_FIELDS = {
    ("Tcp", "OutSegs"): "out_segs",
    ("Tcp", "InSegs"): "in_segs",
    ("Tcp", "RetransSegs"): "retrans_segs",
    ("Tcp", "InErrs"): "in_errs",
    ("TcpExt", "TCPLostRetransmit"): "lost_retransmit",
    ("TcpExt", "TCPTimeouts"): "timeouts",
    ("TcpExt", "TCPSynRetrans"): "syn_retrans",
    # segments the receiver reported back as duplicates (D-SACK): resent, but never lost
    ("TcpExt", "TCPDSACKRecvSegs"): "dsack_recv_segs",
    ("TcpExt", "TCPLossProbes"): "loss_probes",
    ("TcpExt", "TCPSpuriousRTOs"): "spurious_rtos",
}
#: /sys/class/net/<if>/statistics/<name>
IFACE_FIELDS = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_dropped", "tx_dropped", "rx_errors",
                "tx_errors", "rx_missed_errors", "rx_crc_errors", "rx_length_errors", "rx_over_errors")
#: RDMA hw_counters that mean a packet was lost or a receive had no buffer (mlx5's names)
RDMA_LOSS = ("out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "out_of_buffer", "implied_nak_seq_err",
             "rnr_nak_retry_err")
#: RDMA hw_counters of congestion control (not loss: the fabric asked a sender to slow down)
RDMA_CONGESTION = ("np_cnp_sent", "rp_cnp_handled", "np_ecn_marked_roce_packets")
#: IB port counters: ``port_xmit_wait`` counts ticks a port had data but no credit (PFC pause on
#: RoCE, credit starvation on InfiniBand)
IB_PORT_FIELDS = ("port_xmit_wait", "port_rcv_errors", "port_xmit_discards", "symbol_error", "link_downed")

SNMP = "proc/net/snmp"
NETSTAT = "proc/net/netstat"
SYS_NET = "sys/class/net"
SYS_IB = "sys/class/infiniband"
#: at most this many interfaces and RDMA ports read (a host with thousands of container veths)
MAX_DEVICES = 64


def parse_proc_table(text: str) -> dict[str, dict[str, int]]:
    """``/proc/net/snmp`` or ``/proc/net/netstat``: pairs of lines ``Table: name name ...`` and
    ``Table: value value ...`` -> {table: {name: value}}. Values are matched to the header line of
    the same table before them; a header without its values (a truncated read), or values of
    another length, is left out; a value that is not an integer is left out."""
    out: dict[str, dict[str, int]] = {}
    heads: dict[str, list[str]] = {}
    for line in text.splitlines():
        tokens = line.split()
        if len(tokens) < 2 or not tokens[0].endswith(":"):
            continue
        table = tokens[0][:-1]
        numeric = tokens[1].lstrip("-").isdigit()
        if not numeric:
            heads[table] = tokens[1:]
            continue
        names = heads.pop(table, None)
        if names is None or len(names) != len(tokens) - 1:
            continue
        row = out.setdefault(table, {})
        for name, value in zip(names, tokens[1:]):
            try:
                row[name] = int(value)
            except ValueError:
                continue
    return out


def tcp_counters(snmp_text: str, netstat_text: str = "") -> dict[str, int]:
    """Our names for the TCP fields of the two tables (:data:`TCP_FIELDS`)."""
    tables = {**parse_proc_table(netstat_text), **parse_proc_table(snmp_text)}
    return {ours: tables[t][f] for (t, f), ours in TCP_FIELDS.items() if f in tables.get(t, {})}


def _read(root: str, rel: str) -> str | None:
    try:
        with open(os.path.join(root, rel), encoding="ascii", errors="replace") as fh:
            return fh.read(1 << 16)
    except OSError:
        return None


def _int_file(root: str, rel: str) -> int | None:
    text = _read(root, rel)
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


def _ls(root: str, rel: str) -> list[str]:
    try:
        return sorted(os.listdir(os.path.join(root, rel)))[:MAX_DEVICES]
    except OSError:
        return []


def read_local(root: str = "/", ifaces: list[str] | None = None) -> dict:
    """This host's counters now: ``tcp`` (our names), ``ifaces`` (name -> statistics; only
    ``ifaces`` when given), ``rdma`` (``dev/port`` -> hw_counters and port counters of interest).
    What cannot be read is absent, never zero."""
    out: dict = {"tcp": tcp_counters(_read(root, SNMP) or "", _read(root, NETSTAT) or ""), "ifaces": {}, "rdma": {}}
    for name in ifaces if ifaces is not None else _ls(root, SYS_NET):
        stats = {k: v for k in IFACE_FIELDS if (v := _int_file(root, f"{SYS_NET}/{name}/statistics/{k}")) is not None}
        if stats:
            out["ifaces"][name] = stats
    for dev in _ls(root, SYS_IB):
        for port in _ls(root, f"{SYS_IB}/{dev}/ports"):
            base = f"{SYS_IB}/{dev}/ports/{port}"
            vals = {k: v for k in RDMA_LOSS + RDMA_CONGESTION if (v := _int_file(root, f"{base}/hw_counters/{k}")) is not None}
            vals.update({k: v for k in IB_PORT_FIELDS if (v := _int_file(root, f"{base}/counters/{k}")) is not None})
            if vals:
                out["rdma"][f"{dev}/{port}"] = vals
    return out


def _diff(after: dict, before: dict) -> dict:
    """after - before per key both have; a counter that went down (reset, wrapped) is left out."""
    return {k: after[k] - before[k] for k in after if k in before and after[k] >= before[k]}


def delta(after: dict, before: dict) -> dict:
    """What the counters of :func:`read_local` moved between two readings."""
    return {"tcp": _diff(after.get("tcp") or {}, before.get("tcp") or {}),
            "ifaces": {n: _diff(v, (before.get("ifaces") or {}).get(n) or {}) for n, v in (after.get("ifaces") or {}).items()
                       if n in (before.get("ifaces") or {})},
            "rdma": {p: _diff(v, (before.get("rdma") or {}).get(p) or {}) for p, v in (after.get("rdma") or {}).items()
                     if p in (before.get("rdma") or {})}}


def busiest_iface(moved: dict, min_bytes: int = 1 << 20) -> str | None:
    """The interface that moved the most bytes (rx + tx) in ``moved`` (a :func:`delta`), when it
    moved at least ``min_bytes``: the one a pair's traffic really took."""
    best, most = None, min_bytes - 1
    for name, d in (moved.get("ifaces") or {}).items():
        n = d.get("rx_bytes", 0) + d.get("tx_bytes", 0)
        if n > most:
            best, most = name, n
    return best


def add(total: dict, moved: dict) -> dict:
    """Sum two :func:`delta` results (the pair's first measurement and its retest)."""
    out: dict = {"tcp": dict(total.get("tcp") or {}), "ifaces": {}, "rdma": {}}
    for k, v in (moved.get("tcp") or {}).items():
        out["tcp"][k] = out["tcp"].get(k, 0) + v
    for part in ("ifaces", "rdma"):
        for name in set(total.get(part) or {}) | set(moved.get(part) or {}):
            a, b = (total.get(part) or {}).get(name) or {}, (moved.get(part) or {}).get(name) or {}
            out[part][name] = {k: a.get(k, 0) + b.get(k, 0) for k in set(a) | set(b)}
    return out
