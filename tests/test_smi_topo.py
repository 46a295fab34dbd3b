"""nvidia-smi topo text: every corpus file parsed or refused (with the reason), cut-short text never
yields a wrong cell, render/parse round trip, comparison, and the probe through a replayed host."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest

from ccdiag.host.door import ReplayHost
from ccdiag.core.readings import ReadError
from ccdiag.probes import smi_topo
from ccdiag.probes.smi_topo import (
    P2PMatrix,
    TopoMatrix,
    TopoParseError,
    cells_equal,
    parse_topo_cpu_query,
    parse_topo_matrix,
    parse_topo_p2p,
    render_matrix,
    rows_for_table,
)
from ccdiag.probes.registry import ProbeUnavailable, run_one
from ccdiag.host.snapshot import SnapshotData

CORPUS = pathlib.Path(__file__).resolve().parent / "fixtures" / "corpus"
TOPO_M = CORPUS / "topo-m"
TOPO_P2P = CORPUS / "topo-p2p"


def read(folder: pathlib.Path, name: str) -> str:
    return (folder / name).read_text(encoding="utf-8")


def tool_stdout(folder: pathlib.Path, name: str) -> str:
    """The real corpus text as the tool printed it: the three '#ccdiag-' header lines and a leading
    shell prompt line (added by whoever pasted it) removed, nothing else changed."""
    lines = read(folder, name).splitlines(keepends=True)
    lines = [ln for ln in lines if not ln.startswith("#ccdiag-")]
    if lines and lines[0].lstrip().startswith(("$ ", "root@")):
        lines = lines[1:]
    return "".join(lines)


# ---------------------------------------------------------------------------------------------
# The table: one entry per corpus file. Each entry checks facts stated in INDEX.md / the file's
# notes, or expects a refusal naming a line.


def _a100_10nic(m: TopoMatrix):
    assert len(m.devices) == 18 and len(m.gpus()) == 8 and len(m.nics()) == 10
    assert m.level("GPU0", "NIC0") == "PXB" and m.level("GPU2", "NIC2") == "PXB"
    assert m.level("NIC8", "NIC9") == "PIX" and m.level("GPU0", "GPU7") == "NV12"
    assert m.nic_name("NIC9") == "mlx5_9"
    assert m.cpu_affinity["GPU4"] == "112-127,240-255" and m.numa_affinity["GPU6"] == "5"
    assert m.cpu_affinity["NIC0"] is None and m.numa_affinity["NIC9"] is None  # two empty tab fields
    assert m.extra_columns == ("CPU Affinity", "NUMA Affinity") and m.gpu_numa_id == {}
    assert not m.truncated and m.warnings == ()


def _della(m: TopoMatrix):
    assert m.devices == ("GPU0", "GPU1", "mlx5_0", "mlx5_1")
    assert m.nic_legend == {} and m.nic_name("mlx5_0") == "mlx5_0"
    assert m.nics() == ("mlx5_0", "mlx5_1")
    assert m.level("GPU0", "mlx5_0") == "NODE" and m.level("GPU1", "mlx5_1") == "NODE"
    assert m.level("GPU0", "GPU1") == "SYS" and m.cpu_affinity["GPU1"] == "64-127"
    assert not m.truncated  # mlx5_N labels: no NIC legend is expected


def _dgx_h100_cut(m: TopoMatrix):
    assert m.truncated and len(m.devices) == 20
    assert any("no row for NIC6, NIC7, NIC8, NIC9, NIC10, NIC11" in w for w in m.warnings)
    assert any("Legend" in w for w in m.warnings)
    assert m.level("GPU0", "NIC0") == "PXB" and m.level("NIC1", "NIC2") == "PIX"
    assert ("NIC6", "GPU4") not in m.cells and m.level("NIC6", "GPU4") == "PXB"  # from GPU4's row
    assert m.level("NIC6", "NIC7") is None  # neither row survived: unknown, not guessed
    assert m.cpu_affinity["GPU4"] == "56-111,168-223" and m.gpu_numa_id["GPU0"] is None
    assert m.cpu_affinity["NIC5"] is None  # four empty tab fields
    assert m.nic_legend == {} and m.nic_name("NIC3") == "NIC3"


def _dgx2_elided(m: TopoMatrix):
    # whitespace collapsed, but no cell can be blank (no affinity columns): readable by order
    assert m.devices == ("GPU0", "GPU1", "GPU2", "GPU3", "GPU4", "GPU5", "GPU6", "GPU7",
                         "mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")
    assert m.truncated and any(". . ." in w for w in m.warnings)
    assert any("PCI-only" in w for w in m.warnings)
    assert m.level("GPU0", "mlx5_0") == "PIX" and m.level("GPU3", "mlx5_1") == "PIX"
    assert m.level("mlx5_3", "GPU7") == "PIX" and m.level("GPU0", "GPU4") == "NODE"
    assert m.extra_columns == () and m.cpu_affinity == {}


def _h100_pcie_indented(m: TopoMatrix):
    assert m.devices == ("GPU0", "GPU1") and m.level("GPU0", "GPU1") == "NV12"
    assert m.nvlinks("GPU1", "GPU0") == 12
    assert m.cpu_affinity == {"GPU0": "32-63,96-127", "GPU1": "32-63,96-127"}
    assert m.numa_affinity["GPU1"] == "1" and m.gpu_numa_id["GPU0"] is None
    assert not m.truncated and m.warnings == ()


def _h100_sxm(m: TopoMatrix):
    assert len(m.gpus()) == 8 and len(m.nics()) == 8
    assert m.level("GPU0", "NIC0") == "PIX" and m.level("GPU5", "NIC5") == "PIX"
    assert m.level("GPU0", "NIC4") == "SYS" and m.level("NIC7", "NIC7") == "X"
    assert m.level("GPU3", "mlx5_3") == "PIX"  # a NIC named by its RDMA device
    assert m.nic_name("NIC7") == "mlx5_7" and m.cpu_affinity["NIC0"] is None
    assert m.cpu_affinity["GPU4"] == "48-95,144-191" and m.numa_affinity["GPU4"] == "1"
    assert m.gpu_numa_id["GPU7"] is None  # N/A
    assert not m.truncated and m.warnings == ()


def _kvm(m: TopoMatrix):
    assert m.gpus() == tuple(f"GPU{i}" for i in range(8)) and m.nics() == ()
    assert all(m.level(a, b) == "NV18" for a in m.gpus() for b in m.gpus() if a != b)
    assert set(m.cpu_affinity.values()) == {"0-63"} and set(m.numa_affinity.values()) == {"0"}
    assert not m.truncated


def _h800_mangled(m: TopoMatrix):
    # levels sit on the tab stops and are exact; the affinity text lost characters: not used
    assert m.truncated and m.devices[-4:] == ("NIC0", "NIC1", "NIC2", "NIC3")
    assert m.level("GPU0", "GPU1") == "NV8" and m.level("GPU1", "NIC0") == "PIX"
    assert m.level("GPU7", "NIC3") == "PIX" and m.level("NIC0", "NIC1") is None
    assert m.cpu_affinity == {} and m.numa_affinity == {} and m.extra_columns == ()
    assert "-31,64-95" not in repr(m) and "2-63,96-127" not in repr(m)
    assert any("off the tab stops" in w for w in m.warnings)
    assert any("rows without a column: NIC0, NIC1, NIC2, NIC3" in w for w in m.warnings)
    assert m.nic_name("NIC3") == "mlx5_3"  # trailing spaces dropped


def _hopper_subset(m: TopoMatrix):
    assert m.devices == ("GPU0", "GPU1", "GPU2", "GPU3") and m.level("GPU2", "GPU3") == "NV18"
    assert m.cpu_affinity == {"GPU0": "44-51,148-155", "GPU1": None, "GPU2": None, "GPU3": None}
    assert m.numa_affinity == {"GPU0": "0", "GPU1": "1", "GPU2": "1", "GPU3": "1"}
    assert not m.truncated


def _k40m_soc(m: TopoMatrix):
    assert m.devices == ("GPU0", "GPU1", "GPU2", "GPU3", "mlx4_0") and m.legacy_soc
    assert m.cells[("GPU0", "GPU2")] == "SOC" and m.level("GPU0", "GPU2") == "SYS"
    assert m.raw_level("GPU0", "GPU2") == "SOC"
    assert m.level("GPU2", "mlx4_0") == "PHB" and m.level("mlx4_0", "GPU0") == "SYS"
    assert m.extra_columns == ("CPU Affinity",) and m.cpu_affinity["GPU3"] == "6-11"
    assert m.cpu_affinity["mlx4_0"] is None and m.numa_affinity == {}
    assert any("SOC" in w for w in m.warnings) and "SOC" in m.legend


def _p100(m: TopoMatrix):
    assert m.level("GPU0", "GPU1") == "NV2" and m.nvlinks("GPU0", "GPU1") == 2
    assert m.cpu_affinity["GPU1"] == "12-23" and m.numa_affinity == {"GPU0": "0", "GPU1": "1"}


def _rtx3090(m: TopoMatrix):
    assert m.level("GPU1", "GPU0") == "NV4" and m.cpu_affinity["GPU0"] == "0-5"
    assert m.gpu_numa_id == {"GPU0": None, "GPU1": None}


def _v100_mesh(m: TopoMatrix):
    assert m.nic_legend == {"NIC0": "mlx5_2"} and m.nic_name("NIC0") == "mlx5_2"
    assert m.level("GPU0", "mlx5_2") == "NODE" and m.level("GPU4", "NIC0") == "SYS"
    assert m.level("GPU0", "GPU1") == "NV1" and m.level("GPU0", "GPU3") == "NV2"
    assert m.level("GPU0", "GPU5") == "SYS" and m.nvlinks("GPU0", "GPU5") is None
    assert m.numa_affinity["GPU5"] == "1" and m.gpu_numa_id["GPU5"] is None
    assert m.cpu_affinity["NIC0"] is None and not m.truncated


def _pcie_x8(m: TopoMatrix):
    assert m.level("GPU0", "GPU1") == "PIX" and m.level("GPU0", "GPU2") == "NODE"
    assert m.level("GPU0", "GPU4") == "SYS" and m.level("GPU6", "GPU7") == "PIX"
    assert m.cpu_affinity["GPU4"] == "24-47,72-95" and m.numa_affinity["GPU7"] == "1"


def _fused(m: TopoMatrix):
    assert m.repaired and not m.truncated and m.warnings == ()
    assert all("(a tab lost)" in r or "read as" in r for r in m.repairs)


MATRIX_TABLE = {
    # file: (checker, reason) or ("refuse", line, reason)
    "a100-sxm4-40g-x8-epyc7742-10nic-tabs.txt": (_a100_10nic, "tabs as printed"),
    "a100-x2-della-mlx5-headers-no-nic-legend.txt": (_della, "older mlx5_N labels, no NIC legend"),
    "dgx-h100-talos-driver580-12nic-truncated-after-nic5-trailing-tabs.txt":
        (_dgx_h100_cut, "cut after NIC5: parsed, truncated, missing rows named"),
    "dgx2-topo-mp-elided-single-space-mangled.txt":
        (_dgx2_elided, "MANGLED but unambiguous: no blankable column, elision marks aligned"),
    "h100-pcie-x2-nvlink-bridge-nv12-indented.txt": (_h100_pcie_indented, "indented block, prompt"),
    "h100-sxm-hbm3-x8-nv18-8nic-gpunumaid-spaces.txt": (_h100_sxm, "tabs expanded"),
    "h100-sxm-x8-kvm-vm-nvswitch-passthrough-topo-matrix-no-nic.txt": (_kvm, "topo --matrix"),
    "h800-x8-nv8-4nic-topo-matrix-terminal-truncated-mangled.txt":
        (_h800_mangled, "MANGLED: levels on the tab stops kept, damaged affinity dropped with warnings"),
    "hopper-nv18-x4-visible-subset-brev-vm-blank-cpu-affinity-mixed-numa.txt":
        (_hopper_subset, "blank CPU affinity fields"),
    "k40m-x4-mlx4-soc-legacy-2017.txt": (_k40m_soc, "legacy SOC"),
    "p100-sxm2-x2-nv2-rwth-c16g.txt": (_p100, "tabs"),
    "rtx3090-x2-nvlink-bridge-nv4-lxc-spaces.txt": (_rtx3090, "tabs expanded"),
    "topo-c-cpu-affinity-query-dgx-a100.txt":
        ("refuse", 8, "topo -c output, not a matrix (read by parse_topo_cpu_query instead)"),
    "v100-sxm2-x8-hybrid-cube-mesh-nv1-nv2-1nic-gpunumaid.txt": (_v100_mesh, "legend name != index"),
    "x8-pcie-only-2numa-pix-pairs-node-sys-no-nic-spaces.txt": (_pcie_x8, "tabs expanded"),
    # fused cells, recovered cell for cell in tests/test_smi_topo_fused.py
    "b200-x8-nv18-16nic-fused-pxbnode-syssys-nccl-tests-333.txt": (_fused, "a tab lost in 13 rows"),
    "a100-sxm4-x8-nv12-8nic-fused-phb-affinity-ph0-115.txt": (_fused, "affinity glued to a damaged level"),
    "h100-x8-nv18-12nic-fused-pixnode-x-node-slurmv4.txt": (_fused, "diagonal fused with its neighbour"),
}


def _p2p_ns(m: P2PMatrix):
    assert m.devices == ("GPU0", "GPU1") and m.status("GPU0", "GPU1") == "NS"
    assert m.status("GPU1", "GPU1") == "X" and m.legend["NS"] == "Not supported"
    assert m.mode is None  # no prompt line: the caller says which mode it asked for
    assert not m.truncated


def _p2p_h100(m: P2PMatrix):
    assert m.mode == "r" and len(m.devices) == 8  # from the '$ nvidia-smi topo -p2p r' prompt
    off = [v for (a, b), v in m.cells.items() if a != b]
    assert len(off) == 56 and set(off) == {"OK"}
    assert "CNS" in m.legend and not m.truncated


def _p2p_l4(m: P2PMatrix):
    assert m.mode == "r" and m.status("GPU0", "GPU1") == "CNS" and m.status("GPU1", "GPU0") == "CNS"
    assert m.truncated and m.legend == {}  # legend left out of the excerpt


def _p2p_w(m: P2PMatrix):
    assert len(m.devices) == 8 and m.status("GPU0", "GPU7") == "OK" and m.status("GPU7", "GPU7") == "X"
    assert not m.truncated


P2P_TABLE = {
    "p2p-p-rtx2080ti-x2-ns-not-supported.txt": (_p2p_ns, "NS with a full legend"),
    "p2p-r-h100-x8-all-ok.txt": (_p2p_h100, "row labels with a leading space"),
    "p2p-r-l4-x2-cns-no-legend.txt": (_p2p_l4, "no legend: truncated"),
    "p2p-w-x8-pcie-2numa-all-ok-spaces.txt": (_p2p_w, "tabs expanded"),
}


def test_tables_cover_every_corpus_file():
    assert sorted(p.name for p in TOPO_M.iterdir()) == sorted(MATRIX_TABLE)
    assert sorted(p.name for p in TOPO_P2P.iterdir()) == sorted(P2P_TABLE)


@pytest.mark.parametrize("name", sorted(MATRIX_TABLE))
def test_matrix_corpus(name):
    entry = MATRIX_TABLE[name]
    text = read(TOPO_M, name)
    if entry[0] == "refuse":
        with pytest.raises(TopoParseError) as info:
            parse_topo_matrix(text)
        assert f"line {entry[1]}" in str(info.value) and info.value.line_no == entry[1]
        return
    entry[0](parse_topo_matrix(text))


@pytest.mark.parametrize("name", sorted(P2P_TABLE))
def test_p2p_corpus(name):
    P2P_TABLE[name][0](parse_topo_p2p(read(TOPO_P2P, name)))


def test_p2p_mode_given_by_caller_wins():
    assert parse_topo_p2p(read(TOPO_P2P, "p2p-p-rtx2080ti-x2-ns-not-supported.txt"), mode="p").mode == "p"
    # the caller knows which mode it ran; a pasted prompt line is only a fallback
    assert parse_topo_p2p(read(TOPO_P2P, "p2p-r-h100-x8-all-ok.txt"), mode="w").mode == "w"


def test_topo_c_query_file():
    got = parse_topo_cpu_query(read(TOPO_M, "topo-c-cpu-affinity-query-dgx-a100.txt"))
    assert got == {48: (0, 1), 222: (6, 7)}


def test_parsing_the_tool_stdout_equals_parsing_the_pasted_file():
    name = "h100-sxm-hbm3-x8-nv18-8nic-gpunumaid-spaces.txt"
    assert cells_equal(parse_topo_matrix(read(TOPO_M, name)), parse_topo_matrix(tool_stdout(TOPO_M, name))) == []


# ---------------------------------------------------------------------------------------------
# Refusals on damaged text. Each input is a real corpus file with damage applied here by the test
# (synthesized damage, said so), to show what the parser will not guess.

A100 = "a100-sxm4-40g-x8-epyc7742-10nic-tabs.txt"
H100 = "h100-sxm-hbm3-x8-nv18-8nic-gpunumaid-spaces.txt"
HOPPER = "hopper-nv18-x4-visible-subset-brev-vm-blank-cpu-affinity-mixed-numa.txt"


def _damage(folder, name, line_no, fn) -> str:
    lines = read(folder, name).split("\n")
    lines[line_no - 1] = fn(lines[line_no - 1])
    return "\n".join(lines)


@pytest.mark.parametrize("folder,name,line_no,fn,needle", [
    # a tab cell dropped from GPU3's row (file line 8)
    (TOPO_M, A100, 8, lambda s: s.replace("\tNV12", "", 1), "expected 18 cells for GPU3, found 17"),
    # a level the tool never prints, and nothing like one
    (TOPO_M, A100, 8, lambda s: s.replace("PXB", "banana", 1), "'banana' is not a known value"),
    # self not on the diagonal
    (TOPO_M, A100, 8, lambda s: s.replace(" X ", "PIX", 1), "diagonal cell of GPU3"),
    # a character lost inside the level cells of a tab-expanded row
    (TOPO_M, H100, 7, lambda s: s.replace("NV18    NV18", "NV18   NV18", 1), "off the tab stops"),
    # whitespace collapsed where a CPU affinity is blank: values cannot be placed
    (TOPO_M, HOPPER, 6, lambda s: " ".join(s.split()), "no column positions"),
    # a second row for the same device
    (TOPO_M, A100, 8, lambda s: s.replace("GPU3", "GPU2", 1), "second row for GPU2"),
])
def test_damaged_rows_are_refused_with_their_line(folder, name, line_no, fn, needle):
    text = _damage(folder, name, line_no, fn)
    with pytest.raises(TopoParseError) as info:
        parse_topo_matrix(text)
    assert info.value.line_no == line_no, str(info.value)
    assert str(info.value).startswith(f"line {line_no}: ") and needle in str(info.value)


def test_p2p_unknown_value_is_refused():
    text = _damage(TOPO_P2P, "p2p-r-l4-x2-cns-no-legend.txt", 7, lambda s: s.replace("CNS", "ZZZ"))
    with pytest.raises(TopoParseError, match="line 7: 'ZZZ' is not a known value"):
        parse_topo_p2p(text)


# Oversized pieces of text (SYNTHESIZED): a refusal quotes at most QUOTE_LIMIT characters of any
# one fragment and 2 x QUOTE_LIMIT of the line, so a pasted file without separators never floods
# stderr. Each case names the refusal it must still give. BIG stays under MAX_LINE_CHARS, so these
# reach the refusal of the content; beyond the bounds the refusal names the bound (test below).
BIG = smi_topo.MAX_LINE_CHARS - 100
OVERSIZED = [
    ("one token", parse_topo_matrix, "x" * BIG, "no topology matrix header"),
    ("cell", parse_topo_matrix, "\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV4\t" + "b" * BIG + "\n",
     "is not a known value (cell of GPU1)"),
    ("row label", parse_topo_matrix, "\tGPU0\tGPU1\nGPU0\t X \tNV4\n" + "Z" * BIG + "\tNV4\tX\n",
     "X (self) off the diagonal"),
    ("header label", parse_topo_matrix, "\tGPU0\t" + "G-" * (BIG // 2) + "!\n", "is not a device label"),
    ("column after affinity", parse_topo_matrix, "\tGPU0\tGPU1\tCPU Affinity\t" + "q" * BIG + "\n",
     "after the affinity columns"),
    ("header text", parse_topo_matrix, "        GPU0    GPU1    CPU Affinity  " + "w" * BIG + "\n",
     "unknown column text"),
    ("values after last column", parse_topo_matrix,
     "\tGPU0\tGPU1\nGPU0\tX\tNV4\t\t\t" + "t" * BIG + "\nGPU1\tNV4\tX\n", "values after the last column"),
    ("diagonal", parse_topo_matrix, "\tGPU0\tGPU1\nGPU0\tNV" + "9" * BIG + "\tNV4\nGPU1\tNV4\tX\n",
     "is not a known value (cell of GPU0)"),  # NV and more than 3 digits is no level
    ("p2p tail", parse_topo_p2p, "\tGPU0\tGPU1\nGPU0\tX\tOK\t" + "t" * BIG + "\nGPU1\tOK\tX\n",
     "values after the GPU0 cells"),
]


@pytest.mark.parametrize("what,parse,text,needle", OVERSIZED, ids=[c[0] for c in OVERSIZED])
def test_refusals_quote_only_a_short_fragment(what, parse, text, needle):
    with pytest.raises(TopoParseError) as info:
        parse(text)
    msg = str(info.value)
    assert needle in msg, msg
    assert len(msg) < 4 * smi_topo.QUOTE_LIMIT + 120 and "..." in msg and "\n" not in msg, msg[:500]


def test_affinity_warning_quotes_only_a_short_fragment():
    text = ("\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t" + "0-" * (BIG // 2) + "x\t0\n\nLegend:\n\n  X = Self\n")
    m = parse_topo_matrix(text)
    bad = [w for w in m.warnings if "CPU Affinity of GPU0" in w]
    assert bad and len(bad[0]) < 2 * smi_topo.QUOTE_LIMIT + 60 and "..." in bad[0]
    assert m.cpu_affinity["GPU0"] is None


def test_empty_text_is_refused():
    with pytest.raises(TopoParseError, match="line 1"):
        parse_topo_matrix("")


# ---------------------------------------------------------------------------------------------
# Cut-short text: only TopoParseError, never a wrong value


def _cuts():
    for folder, fn in ((TOPO_M, parse_topo_matrix), (TOPO_P2P, parse_topo_p2p)):
        for path in sorted(folder.iterdir()):
            yield pytest.param(path, fn, id=path.name)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("path,parse", list(_cuts()))
def test_truncations_raise_only_parse_errors_and_never_invent_cells(path, parse):
    text = path.read_text(encoding="utf-8")
    try:
        full = parse(text)
    except TopoParseError:
        full = None
    parsed = 0
    for k in range(0, len(text), 37):
        try:
            m = parse(text[:k])
        except TopoParseError as exc:
            # one damaged line, or every damaged line at once ("2 damaged lines: line 6: ...")
            assert str(exc).startswith("line ") or " damaged lines: line " in str(exc)
            continue
        parsed += 1
        assert full is not None
        for key, value in m.cells.items():
            assert full.cells.get(key) == value, (k, key)
        if isinstance(m, TopoMatrix):
            for attr in ("cpu_affinity", "numa_affinity", "gpu_numa_id", "nic_legend"):
                for key, value in getattr(m, attr).items():
                    assert value is None or getattr(full, attr).get(key) == value, (k, attr, key)
            if len(m.cells) < len(full.cells) or set(m.nic_legend) < set(full.nic_legend):
                assert m.truncated, k
    if full is not None and len(text) > 37 * 10:
        assert parsed > 0  # cut-short output is still read, not thrown away


def test_last_line_without_newline_is_not_trusted():
    # "NV18" cut to "NV1" would still be a valid level: a line without its newline is not used
    text = read(TOPO_M, H100)
    cut = text[:text.index("NIC7    SYS")] + "NIC7    SYS     SYS     SYS     SYS     NODE    NODE    NO"
    m = parse_topo_matrix(cut)
    assert m.truncated and ("NIC7", "GPU0") not in m.cells and m.level("NIC7", "GPU7") == "PIX"
    legend_cut = text.rstrip("\n")[:-1]  # "NIC7: mlx5_7" -> "NIC7: mlx5_"
    m = parse_topo_matrix(legend_cut)
    assert "NIC7" not in m.nic_legend and m.truncated


# ---------------------------------------------------------------------------------------------
# Rendering and comparison


@pytest.mark.parametrize("name", sorted(n for n, e in MATRIX_TABLE.items() if e[0] != "refuse"))
def test_render_round_trip(name):
    m = parse_topo_matrix(read(TOPO_M, name))
    text = render_matrix(m)
    back = parse_topo_matrix(text)
    assert cells_equal(m, back) == []
    assert back.devices == m.devices and back.nic_legend == m.nic_legend
    for attr in ("cpu_affinity", "numa_affinity", "gpu_numa_id"):
        # rows the source lacked come back with blank values: None either way
        assert {k: v for k, v in getattr(back, attr).items() if v is not None} == \
            {k: v for k, v in getattr(m, attr).items() if v is not None}
    assert back.extra_columns == m.extra_columns
    # an unknown pair is rendered blank and read back as truncation; an elision ('. . .') has no
    # place in the tool's layout, so a matrix that was only elided renders complete
    unknown = any(m.level(a, b) is None for a in m.devices for b in m.devices)
    assert back.truncated == unknown
    assert back.legacy_soc == m.legacy_soc
    # what was known stays known, and what was unknown is not made up
    for a in m.devices:
        for b in m.devices:
            assert back.level(a, b) == m.level(a, b)


def test_render_layout_matches_the_tool():
    m = parse_topo_matrix(read(TOPO_M, "v100-sxm2-x8-hybrid-cube-mesh-nv1-nv2-1nic-gpunumaid.txt"))
    lines = render_matrix(m).splitlines()
    assert lines[0] == "\t" + "\t".join([f"GPU{i}" for i in range(8)] + ["NIC0"]) + \
        "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    # the same bytes as the real output's first GPU row and NIC row
    real = read(TOPO_M, "v100-sxm2-x8-hybrid-cube-mesh-nv1-nv2-1nic-gpunumaid.txt").splitlines()
    assert lines[1] == real[4] and lines[9] == real[12]
    assert lines[-3:] == ["NIC Legend:", "", "  NIC0: mlx5_2"]


def test_rows_for_table():
    m = parse_topo_matrix(read(TOPO_M, HOPPER))
    rows = rows_for_table(m)
    assert rows[0] == ["", "GPU0", "GPU1", "GPU2", "GPU3", "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    assert rows[2] == ["GPU1", "NV18", "X", "NV18", "NV18", "", "1", "N/A"]


def test_cells_equal_reports_level_and_affinity_differences():
    m = parse_topo_matrix(read(TOPO_M, H100))
    cells = dict(m.cells)
    cells[("GPU0", "NIC0")] = "SYS"
    cells[("NIC0", "GPU0")] = "SYS"
    other = dataclasses.replace(m, cells=cells, numa_affinity={**m.numa_affinity, "GPU1": "1"})
    diffs = cells_equal(m, other)
    assert "GPU0 - mlx5_0: PIX vs SYS" in diffs
    assert "GPU1 NUMA Affinity: 0 vs 1" in diffs and len(diffs) == 2


def test_cells_equal_matches_nics_by_name_and_ignores_one_sided_affinity():
    v100 = parse_topo_matrix(read(TOPO_M, "v100-sxm2-x8-hybrid-cube-mesh-nv1-nv2-1nic-gpunumaid.txt"))
    ren = {"NIC0": "mlx5_2"}
    relabelled = TopoMatrix(
        devices=tuple(ren.get(d, d) for d in v100.devices),
        cells={(ren.get(a, a), ren.get(b, b)): v for (a, b), v in v100.cells.items()},
    )
    assert cells_equal(v100, relabelled) == []  # no affinity columns on one side: not compared
    wrong = dataclasses.replace(relabelled, devices=tuple("mlx5_0" if d == "mlx5_2" else d
                                                          for d in relabelled.devices))
    diffs = cells_equal(v100, wrong)
    assert "only in the first matrix: mlx5_2" in diffs and "only in the second matrix: mlx5_0" in diffs


def test_cells_equal_reads_soc_as_sys():
    k40 = parse_topo_matrix(read(TOPO_M, "k40m-x4-mlx4-soc-legacy-2017.txt"))
    modern = dataclasses.replace(k40, cells={k: ("SYS" if v == "SOC" else v) for k, v in k40.cells.items()})
    assert cells_equal(k40, modern) == []


# ---------------------------------------------------------------------------------------------
# The probe, through a replayed host


def _cmd(argv, stdout="", rc=0, stderr="", duration=0.2, timed_out=False, error=None) -> dict:
    return {"argv": argv, "rc": rc, "stdout": stdout, "stderr": stderr, "duration_s": duration,
            "timed_out": timed_out, "error": error}


TOPO = ["nvidia-smi", "topo", "-m"]


def _p2p(k):
    return ["nvidia-smi", "topo", "-p2p", k]


def test_collect_parses_recorded_outputs():
    snap = SnapshotData(commands=[
        # stdout below is real corpus text (tool_stdout strips only the corpus header and prompt)
        _cmd(TOPO, tool_stdout(TOPO_M, H100)),
        _cmd(_p2p("r"), tool_stdout(TOPO_P2P, "p2p-r-h100-x8-all-ok.txt")),
        _cmd(_p2p("w"), tool_stdout(TOPO_P2P, "p2p-w-x8-pcie-2numa-all-ok-spaces.txt")),
        # synthesized: a failing command (no real failure text in the corpus)
        _cmd(_p2p("n"), "", rc=3, stderr="synthesized failure message"),
        # p2p a: not recorded at all
    ])
    obs = smi_topo.collect(ReplayHost(snap))
    assert obs.matrix is not None and obs.matrix.level("GPU0", "NIC0") == "PIX"
    assert set(obs.p2p) == {"r", "w"} and obs.p2p["r"].mode == "r" and obs.p2p["w"].mode == "w"
    assert len(obs.commands) == 5 and obs.commands[0] == "`nvidia-smi topo -m`: exit 0 in 0.20s"
    by_source = {e.source: e for e in obs.errors}
    assert set(by_source) == {"nvidia-smi topo -p2p n", "nvidia-smi topo -p2p a"}
    assert by_source["nvidia-smi topo -p2p n"].kind == "command"
    assert "exit 3" in by_source["nvidia-smi topo -p2p n"].message
    assert "synthesized failure message" in by_source["nvidia-smi topo -p2p n"].message
    assert "not recorded" in by_source["nvidia-smi topo -p2p a"].message


def test_collect_timeout_stops_further_commands():
    snap = SnapshotData(commands=[
        # synthesized: a hung topo -m, killed at its 10 s deadline
        _cmd(TOPO, "", rc=None, duration=10.0, timed_out=True),
        _cmd(_p2p("r"), tool_stdout(TOPO_P2P, "p2p-r-h100-x8-all-ok.txt")),
    ])
    obs = smi_topo.collect(ReplayHost(snap))
    assert obs.matrix is None and obs.p2p == {}
    assert obs.errors[0] == ReadError("nvidia-smi topo -m", "timeout",
                                      "`nvidia-smi topo -m`: killed after 10.0s without finishing")
    assert [e.kind for e in obs.errors[1:]] == ["skipped"] * 4
    assert len(obs.commands) == 1


def test_collect_not_found_is_unavailable():
    snap = SnapshotData(commands=[_cmd(TOPO, rc=None, error="not found")])  # synthesized record
    with pytest.raises(ProbeUnavailable, match="nvidia-smi not found"):
        smi_topo.collect(ReplayHost(snap))
    assert run_one(ReplayHost(snap), "smi_topo").status == "unavailable"


def test_collect_parse_error_is_a_read_error():
    snap = SnapshotData(commands=[
        # real corpus text, but topo -c output where a matrix is expected
        _cmd(TOPO, tool_stdout(TOPO_M, "topo-c-cpu-affinity-query-dgx-a100.txt")),
        *[_cmd(_p2p(k), tool_stdout(TOPO_P2P, "p2p-r-l4-x2-cns-no-legend.txt")) for k in "rwna"],
    ])
    obs = smi_topo.collect(ReplayHost(snap))
    assert obs.matrix is None and set(obs.p2p) == {"r", "w", "n", "a"}
    assert obs.p2p["a"].mode == "a"  # the mode collect() asked for
    assert len(obs.errors) == 1 and obs.errors[0].kind == "parse"
    assert obs.errors[0].source == "nvidia-smi topo -m" and obs.errors[0].message.startswith("line ")
    run = run_one(ReplayHost(snap), "smi_topo")
    assert run.status == "partial" and run.data.errors == obs.errors


def test_probe_contract():
    assert smi_topo.NAME == "smi_topo" and smi_topo.TIMEOUT_S == 25


# -- pastes damaged in the ways real ones are (SYNTHESIZED damage on real corpus files) --------------
H100 = "h100-sxm-hbm3-x8-nv18-8nic-gpunumaid-spaces.txt"


def test_a_lost_tab_between_two_cells_is_split_by_the_vocabulary_and_listed():
    clean = parse_topo_matrix(read(TOPO_M, A100))
    # GPU3's row (file line 8): "SYS\tPXB" run together as "SYSPXB"
    text = _damage(TOPO_M, A100, 8, lambda s: s.replace("SYS\tPXB", "SYSPXB", 1))
    m = parse_topo_matrix(text)
    assert m.cells == clean.cells and m.repaired
    assert m.repairs == ("line 8: GPU3: 'SYSPXB' read as SYS, PXB (a tab lost)",)


def test_a_mangled_cell_is_read_from_its_mirror_and_listed():
    clean = parse_topo_matrix(read(TOPO_M, A100))
    text = _damage(TOPO_M, A100, 8, lambda s: s.replace("PXB", "PXQ", 1))
    m = parse_topo_matrix(text)
    assert m.cells == clean.cells
    assert len(m.repairs) == 1 and m.repairs[0].startswith("line 8: GPU3/") and "read as PXB" in m.repairs[0]


DGX2 = "dgx2-topo-mp-elided-single-space-mangled.txt"


def test_space_separated_paste_with_merged_cells_recovers():
    clean = parse_topo_matrix(read(TOPO_M, DGX2))
    lines = read(TOPO_M, DGX2).split("\n")
    row = next(i for i, l in enumerate(lines) if l.startswith("GPU0 X "))
    lines[row] = lines[row].replace("X PIX PXB", "X PIXPXB", 1)
    m = parse_topo_matrix("\n".join(lines))
    assert m.cells == clean.cells
    assert m.repairs == (f"line {row + 1}: GPU0: 'PIXPXB' read as PIX, PXB (a tab lost)",)


def test_a_refusal_names_every_damaged_line_at_once():
    text = read(TOPO_M, A100).split("\n")
    text[7] = text[7].replace("PXB", "banana", 1)
    text[9] = text[9].replace("SYS", "kiwi", 1)
    with pytest.raises(TopoParseError) as info:
        parse_topo_matrix("\n".join(text))
    msg = str(info.value)
    assert msg.startswith("2 damaged lines: line 8:") and "line 10:" in msg and "kiwi" in msg


def test_a_cell_and_its_mirror_both_mangled_is_refused():
    text = read(TOPO_M, A100).split("\n")
    # GPU0/NIC0 (line 5) and NIC0/GPU0 (line 13) both lose a letter: nothing says what they were
    assert text[4].startswith("GPU0") and text[12].startswith("NIC0")
    text[4] = text[4].replace("PXB", "PX", 1)
    text[12] = text[12].replace("PXB", "PX", 1)
    with pytest.raises(TopoParseError, match="its mirror cannot say"):
        parse_topo_matrix("\n".join(text))


def test_affinity_is_placed_by_its_own_positions_when_the_header_titles_shifted():
    """SYNTHESIZED damage: the header of a tab-expanded paste loses two spaces before its
    affinity titles; the rows still hold their values on their own tab stops."""
    clean = parse_topo_matrix(read(TOPO_M, H100))
    lines = read(TOPO_M, H100).split("\n")
    h = next(i for i, l in enumerate(lines) if "CPU Affinity" in l)
    lines[h] = lines[h].replace("  CPU Affinity", "CPU Affinity", 1)
    m = parse_topo_matrix("\n".join(lines))
    assert m.cells == clean.cells
    assert m.cpu_affinity == clean.cpu_affinity and m.cpu_affinity["GPU0"]
    assert m.numa_affinity == clean.numa_affinity
    assert any("placed by their own positions" in w for w in m.warnings)


# Beyond the bounds (SYNTHESIZED): refused before any parsing, naming the limit, in one short line.
BEYOND = [
    ("text", parse_topo_matrix, ("GPU0\n" * (smi_topo.MAX_TEXT_BYTES // 5 + 1)), "MAX_TEXT_BYTES"),
    ("line", parse_topo_matrix, "\tGPU0\tGPU1\nGPU0\t X \t" + "b" * 1_000_000 + "\n", "MAX_LINE_CHARS"),
    ("p2p line", parse_topo_p2p, "x" * (smi_topo.MAX_LINE_CHARS + 1), "MAX_LINE_CHARS"),
    ("labels", parse_topo_matrix, "\t" + "\t".join(f"GPU{i}" for i in range(smi_topo.MAX_DEVICES + 1)) + "\n",
     "MAX_DEVICES"),
    ("cpu query", parse_topo_cpu_query, "The GPUs that have an affinity with CPU 0 are:\n" + "9" * 5000 + "\n",
     "digits"),
]


@pytest.mark.parametrize("what,parse,text,needle", BEYOND, ids=[c[0] for c in BEYOND])
def test_beyond_the_bounds_the_refusal_names_the_limit(what, parse, text, needle):
    with pytest.raises(TopoParseError) as info:
        parse(text)
    msg = str(info.value)
    assert needle in msg and "\n" not in msg and len(msg) < 4 * smi_topo.QUOTE_LIMIT + 160, msg[:500]
