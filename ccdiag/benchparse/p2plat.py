"""The CUDA sample ``p2pBandwidthLatencyTest`` output read into typed matrices.

Why: it is the first thing people run when two GPUs seem slow to each other, and its output is what
lands in tickets. Its ``CANNOT Access Peer`` lines and the P2P=Enabled vs Disabled matrices answer
"is P2P really on, and over what link" for each pair.

Format (``NVIDIA/cuda-samples`` ``Samples/5_Domain_Specific/p2pBandwidthLatencyTest``; seen in
``tests/fixtures/corpus/nvbandwidth``): ``Device: N, NAME, pciBusID: b4, pciDeviceID: 0,
pciDomainID:0``; ``Device=0 CAN Access Peer Device=1`` or ``CANNOT``; ``P2P Connectivity Matrix`` (a
``D\\D`` header and 0/1 rows); four bandwidth matrices in GB/s: ``Unidirectional P2P=Disabled Bandwidth
Matrix (GB/s)``, ``Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)`` (older samples
omit ``(P2P Writes)``; ``-p2p_read`` prints ``(P2P Reads)``), and the ``Bidirectional`` pair; then
``P2P=Disabled Latency Matrix (us)`` and ``P2P=Enabled Latency (P2P Writes) Matrix (us)``, each with a
``GPU`` and a ``CPU`` sub-matrix. Pastes are often indented (markdown); leading space is ignored.
Rows are ``<row index> <value per column>``; a matrix must be square and complete, or it is refused
naming the line where it broke.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ccdiag.benchparse import _text
from ccdiag.benchparse.errors import MAX_LABELS, BenchParseError

_TITLE = "[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]"
_DEVICE = re.compile(r"^Device: ([0-9]{1,5}), (.{1,200}?), pciBusID: ([0-9a-fA-F]{1,8}), "
                     r"pciDeviceID: ([0-9a-fA-F]{1,8}), pciDomainID: ?([0-9a-fA-F]{1,8})\s*$")
_PEER = re.compile(r"^Device=([0-9]{1,5}) (CAN|CANNOT) Access Peer Device=([0-9]{1,5})\s*$")
_BW = re.compile(r"^(Unidirectional|Bidirectional) P2P=(Enabled|Disabled) Bandwidth (?:\(([^()]{1,40})\) )?"
                 r"Matrix \(GB/s\)\s*$")
_LAT = re.compile(r"^P2P=(Enabled|Disabled) Latency (?:\(([^()]{1,40})\) )?Matrix \(us\)\s*$")


Matrix = tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class P2PDevice:
    index: int
    name: str
    pci_bus_id: str
    pci_device_id: str
    pci_domain_id: str


@dataclass(frozen=True)
class P2PLatResult:
    """Matrices are indexed ``[row][column]`` by CUDA device index as printed (row = the GPU that
    copies, in the sample's words the source). ``peer_access[(a, b)]`` is True for ``CAN``.
    ``p2p_mode`` is the parenthesised mode of the enabled matrices (``"P2P Writes"`` / ``"P2P Reads"``),
    None on older samples that do not print it.
    """

    devices: tuple[P2PDevice, ...] = ()
    peer_access: dict[tuple[int, int], bool] = field(default_factory=dict)
    connectivity: tuple[tuple[int, ...], ...] | None = None
    unidir_p2p_disabled_gbyte_s: Matrix | None = None
    unidir_p2p_enabled_gbyte_s: Matrix | None = None
    bidir_p2p_disabled_gbyte_s: Matrix | None = None
    bidir_p2p_enabled_gbyte_s: Matrix | None = None
    gpu_latency_p2p_disabled_us: Matrix | None = None
    cpu_latency_p2p_disabled_us: Matrix | None = None
    gpu_latency_p2p_enabled_us: Matrix | None = None
    cpu_latency_p2p_enabled_us: Matrix | None = None
    p2p_mode: str | None = None
    format_ids: tuple[str, ...] = ()

    def pairs_without_peer_access(self) -> tuple[tuple[int, int], ...]:
        return tuple(sorted(k for k, ok in self.peer_access.items() if not ok))


def parse_p2plat(text: str) -> P2PLatResult:
    """``p2pBandwidthLatencyTest`` output; refuses (:class:`BenchParseError`) anything else."""
    numbered = _text.lines(text)
    devices: list[P2PDevice] = []
    peer: dict[tuple[int, int], bool] = {}
    mats: dict[str, Matrix] = {}
    connectivity: tuple[tuple[int, ...], ...] | None = None
    mode: str | None = None
    seen = titled = False
    i = 0
    total = len(numbered)
    while i < total:
        n, line = numbered[i]
        s = line.strip()
        i += 1
        if s == _TITLE:
            seen = titled = True
            continue
        m = _DEVICE.match(s)
        if m:
            if len(devices) >= MAX_LABELS:
                raise BenchParseError(f"more than MAX_LABELS={MAX_LABELS} devices", n, line, limit="MAX_LABELS")
            devices.append(P2PDevice(int(m.group(1)), m.group(2), m.group(3), m.group(4), m.group(5)))
            continue
        m = _PEER.match(s)
        if m:
            if len(peer) >= MAX_LABELS * 4:
                raise BenchParseError("too many peer-access lines", n, line, limit="MAX_LABELS")
            peer[(int(m.group(1)), int(m.group(3)))] = m.group(2) == "CAN"
            continue
        if s == "P2P Connectivity Matrix":
            seen = True
            values, i = _read_matrix(numbered, i, ("D\\D",), n, line)
            connectivity = tuple(tuple(int(v) for v in row) for row in values)
            continue
        m = _BW.match(s)
        if m:
            seen = True
            key = ("unidir" if m.group(1) == "Unidirectional" else "bidir") + "_p2p_" + m.group(2).lower() + "_gbyte_s"
            if m.group(3):
                mode = m.group(3)
            mats[key], i = _read_matrix(numbered, i, ("D\\D",), n, line)
            continue
        m = _LAT.match(s)
        if m:
            seen = True
            state = m.group(1).lower()
            if m.group(2):
                mode = m.group(2)
            mats[f"gpu_latency_p2p_{state}_us"], i = _read_matrix(numbered, i, ("GPU",), n, line)
            # the CPU sub-matrix follows after a blank line; a cut paste may lack it
            j = i
            while j < total and not numbered[j][1].strip():
                j += 1
            if j < total and numbered[j][1].split()[:1] == ["CPU"]:
                mats[f"cpu_latency_p2p_{state}_us"], i = _read_matrix(numbered, j, ("CPU",), n, line)
            continue
    if not seen:
        n, line = _text.first_line(numbered)
        raise BenchParseError("not p2pBandwidthLatencyTest output (no title, connectivity or P2P matrix line)",
                              n, line)
    if not peer and connectivity:
        # no CAN/CANNOT lines (a cut paste): the connectivity matrix says the same, 1 for peer access
        peer = {(a, b): bool(v) for a, row in enumerate(connectivity) for b, v in enumerate(row) if a != b}
    ids = ["p2pBandwidthLatencyTest.p2p_read" if mode == "P2P Reads" else "p2pBandwidthLatencyTest.v10"]
    if not titled and not devices:
        ids.append("p2pBandwidthLatencyTest.excerpt")
    return P2PLatResult(
        devices=tuple(devices), peer_access=peer, connectivity=connectivity,
        unidir_p2p_disabled_gbyte_s=mats.get("unidir_p2p_disabled_gbyte_s"),
        unidir_p2p_enabled_gbyte_s=mats.get("unidir_p2p_enabled_gbyte_s"),
        bidir_p2p_disabled_gbyte_s=mats.get("bidir_p2p_disabled_gbyte_s"),
        bidir_p2p_enabled_gbyte_s=mats.get("bidir_p2p_enabled_gbyte_s"),
        gpu_latency_p2p_disabled_us=mats.get("gpu_latency_p2p_disabled_us"),
        cpu_latency_p2p_disabled_us=mats.get("cpu_latency_p2p_disabled_us"),
        gpu_latency_p2p_enabled_us=mats.get("gpu_latency_p2p_enabled_us"),
        cpu_latency_p2p_enabled_us=mats.get("cpu_latency_p2p_enabled_us"), p2p_mode=mode, format_ids=tuple(ids))


def _read_matrix(numbered: list[tuple[int, str]], i: int, corner: tuple[str, ...], title_n: int,
                 title: str) -> tuple[Matrix, int]:
    """The square matrix starting at ``numbered[i]`` (its header line, after blank lines), and the index
    after its last row."""
    total = len(numbered)
    while i < total and not numbered[i][1].strip():
        i += 1
    if i >= total:
        raise BenchParseError("input ends after a matrix title", title_n, title)
    n, line = numbered[i]
    toks = line.split()
    if not toks or toks[0] not in corner:
        raise BenchParseError(f"expected the matrix header ('{corner[0]} 0 1 ...') after line {title_n}", n, line)
    columns = toks[1:]
    if not columns or len(columns) > MAX_LABELS:
        raise BenchParseError(f"matrix header with {len(columns)} columns (1..MAX_LABELS={MAX_LABELS})", n, line,
                              limit="MAX_LABELS" if columns else None)
    for k, c in enumerate(columns):
        if c != str(k):
            raise BenchParseError(f"matrix header column {k + 1} is not device {k}", n, line)
    i += 1
    rows = []
    for r in range(len(columns)):
        if i >= total:
            last_n, last = numbered[-1]
            raise BenchParseError(f"input ends after {r} of {len(columns)} matrix rows", last_n, last)
        n, line = numbered[i]
        toks = line.split()
        if len(toks) != len(columns) + 1 or toks[0] != str(r):
            raise BenchParseError(f"expected row {r} of the matrix with {len(columns)} values", n, line)
        rows.append(tuple(_text.to_float(t, "matrix value", n, line) for t in toks[1:]))
        i += 1
    return tuple(rows), i
