"""Real ``nvidia-smi topo -m`` pastes whose cells were fused in copying, recovered cell for cell.

Each fixture under tests/fixtures/corpus/topo-m names its source. The expected matrices below were
worked out by hand: each fused token split where its row is short of exactly those cells, and every
split value checked against its mirror cell in the intact rows (the tests assert that the expected
matrices are symmetric, which is what makes the mirror a witness).
"""

from __future__ import annotations

import pathlib

import pytest

from ccdiag.probes.smi_topo import TopoParseError, parse_topo_matrix

TOPO_M = pathlib.Path(__file__).resolve().parent / "fixtures" / "corpus" / "topo-m"

B200 = "b200-x8-nv18-16nic-fused-pxbnode-syssys-nccl-tests-333.txt"  # NVIDIA/nccl-tests#333
A100 = "a100-sxm4-x8-nv12-8nic-fused-phb-affinity-ph0-115.txt"  # public repository file, see its header
H100 = "h100-x8-nv18-12nic-fused-pixnode-x-node-slurmv4.txt"  # devopsrustem/slurmv4 3/14.sh

# GPU2 'PXBNODE' -> PXB (NIC8, mirror NIC8/GPU2 = PXB), NODE (NIC9, mirror NIC9/GPU2 = NODE);
# GPU4-7 and NIC10-15 'SYSSYS' -> SYS, SYS (mirrors NIC8/NIC9 rows: SYS); NIC8 ' X NODE' -> X (the
# diagonal), NODE (NIC8/NIC9, mirror NIC9/NIC8 = NODE)
B200_EXPECTED = """
    GPU0  X NV18 NV18 NV18 NV18 NV18 NV18 NV18 NODE NODE NODE NODE PXB NODE NODE NODE NODE NODE SYS SYS SYS SYS SYS SYS
    GPU1  NV18 X NV18 NV18 NV18 NV18 NV18 NV18 NODE NODE NODE NODE NODE NODE NODE PXB NODE NODE SYS SYS SYS SYS SYS SYS
    GPU2  NV18 NV18 X NV18 NV18 NV18 NV18 NV18 NODE NODE NODE NODE NODE NODE NODE NODE PXB NODE SYS SYS SYS SYS SYS SYS
    GPU3  NV18 NV18 NV18 X NV18 NV18 NV18 NV18 NODE NODE NODE NODE NODE NODE NODE NODE NODE PXB SYS SYS SYS SYS SYS SYS
    GPU4  NV18 NV18 NV18 NV18 X NV18 NV18 NV18 SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS PXB NODE NODE NODE NODE NODE
    GPU5  NV18 NV18 NV18 NV18 NV18 X NV18 NV18 SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS NODE NODE NODE PXB NODE NODE
    GPU6  NV18 NV18 NV18 NV18 NV18 NV18 X NV18 SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS NODE NODE NODE NODE PXB NODE
    GPU7  NV18 NV18 NV18 NV18 NV18 NV18 NV18 X SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS NODE NODE NODE NODE NODE PXB
    NIC0  NODE NODE NODE NODE SYS SYS SYS SYS X PIX PIX PIX NODE NODE NODE NODE NODE NODE SYS SYS SYS SYS SYS SYS
    NIC1  NODE NODE NODE NODE SYS SYS SYS SYS PIX X PIX PIX NODE NODE NODE NODE NODE NODE SYS SYS SYS SYS SYS SYS
    NIC2  NODE NODE NODE NODE SYS SYS SYS SYS PIX PIX X PIX NODE NODE NODE NODE NODE NODE SYS SYS SYS SYS SYS SYS
    NIC3  NODE NODE NODE NODE SYS SYS SYS SYS PIX PIX PIX X NODE NODE NODE NODE NODE NODE SYS SYS SYS SYS SYS SYS
    NIC4  PXB NODE NODE NODE SYS SYS SYS SYS NODE NODE NODE NODE X NODE NODE NODE NODE NODE SYS SYS SYS SYS SYS SYS
    NIC5  NODE NODE NODE NODE SYS SYS SYS SYS NODE NODE NODE NODE NODE X PIX NODE NODE NODE SYS SYS SYS SYS SYS SYS
    NIC6  NODE NODE NODE NODE SYS SYS SYS SYS NODE NODE NODE NODE NODE PIX X NODE NODE NODE SYS SYS SYS SYS SYS SYS
    NIC7  NODE PXB NODE NODE SYS SYS SYS SYS NODE NODE NODE NODE NODE NODE NODE X NODE NODE SYS SYS SYS SYS SYS SYS
    NIC8  NODE NODE PXB NODE SYS SYS SYS SYS NODE NODE NODE NODE NODE NODE NODE NODE X NODE SYS SYS SYS SYS SYS SYS
    NIC9  NODE NODE NODE PXB SYS SYS SYS SYS NODE NODE NODE NODE NODE NODE NODE NODE NODE X SYS SYS SYS SYS SYS SYS
    NIC10 SYS SYS SYS SYS PXB NODE NODE NODE SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS X NODE NODE NODE NODE NODE
    NIC11 SYS SYS SYS SYS NODE NODE NODE NODE SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS NODE X PIX NODE NODE NODE
    NIC12 SYS SYS SYS SYS NODE NODE NODE NODE SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS NODE PIX X NODE NODE NODE
    NIC13 SYS SYS SYS SYS NODE PXB NODE NODE SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS NODE NODE NODE X NODE NODE
    NIC14 SYS SYS SYS SYS NODE NODE PXB NODE SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS NODE NODE NODE NODE X NODE
    NIC15 SYS SYS SYS SYS NODE NODE NODE PXB SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS NODE NODE NODE NODE NODE X
"""

# every GPU row: 'PH0-115' -> 'PH' (GPUk/NIC7, mirror NIC7/GPUk = PHB) then CPU affinity 0-115
A100_EXPECTED = """
    GPU0  X NV12 NV12 NV12 NV12 NV12 NV12 NV12 PHB PHB PHB PHB PHB PHB PHB PHB
    GPU1  NV12 X NV12 NV12 NV12 NV12 NV12 NV12 PHB PHB PHB PHB PHB PHB PHB PHB
    GPU2  NV12 NV12 X NV12 NV12 NV12 NV12 NV12 PHB PHB PHB PHB PHB PHB PHB PHB
    GPU3  NV12 NV12 NV12 X NV12 NV12 NV12 NV12 PHB PHB PHB PHB PHB PHB PHB PHB
    GPU4  NV12 NV12 NV12 NV12 X NV12 NV12 NV12 PHB PHB PHB PHB PHB PHB PHB PHB
    GPU5  NV12 NV12 NV12 NV12 NV12 X NV12 NV12 PHB PHB PHB PHB PHB PHB PHB PHB
    GPU6  NV12 NV12 NV12 NV12 NV12 NV12 X NV12 PHB PHB PHB PHB PHB PHB PHB PHB
    GPU7  NV12 NV12 NV12 NV12 NV12 NV12 NV12 X PHB PHB PHB PHB PHB PHB PHB PHB
    NIC0  PHB PHB PHB PHB PHB PHB PHB PHB X PHB PHB PHB PHB PHB PHB PHB
    NIC1  PHB PHB PHB PHB PHB PHB PHB PHB PHB X PHB PHB PHB PHB PHB PHB
    NIC2  PHB PHB PHB PHB PHB PHB PHB PHB PHB PHB X PHB PHB PHB PHB PHB
    NIC3  PHB PHB PHB PHB PHB PHB PHB PHB PHB PHB PHB X PHB PHB PHB PHB
    NIC4  PHB PHB PHB PHB PHB PHB PHB PHB PHB PHB PHB PHB X PHB PHB PHB
    NIC5  PHB PHB PHB PHB PHB PHB PHB PHB PHB PHB PHB PHB PHB X PHB PHB
    NIC6  PHB PHB PHB PHB PHB PHB PHB PHB PHB PHB PHB PHB PHB PHB X PHB
    NIC7  PHB PHB PHB PHB PHB PHB PHB PHB PHB PHB PHB PHB PHB PHB PHB X
"""

# GPU5 'PIXNODE' -> PIX (NIC7, mirror NIC7/GPU5 = PIX), NODE (NIC8, mirror NIC8/GPU5 = NODE);
# NIC7 ' X NODE' -> X (the diagonal), NODE (NIC7/NIC8, mirror NIC8/NIC7 = NODE)
H100_EXPECTED = """
    GPU0  X NV18 NV18 NV18 NV18 NV18 NV18 NV18 PIX NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE
    GPU1  NV18 X NV18 NV18 NV18 NV18 NV18 NV18 NODE PIX NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE
    GPU2  NV18 NV18 X NV18 NV18 NV18 NV18 NV18 NODE NODE PIX NODE NODE NODE NODE NODE NODE NODE NODE NODE
    GPU3  NV18 NV18 NV18 X NV18 NV18 NV18 NV18 NODE NODE NODE NODE NODE PIX NODE NODE NODE NODE NODE NODE
    GPU4  NV18 NV18 NV18 NV18 X NV18 NV18 NV18 NODE NODE NODE NODE NODE NODE PIX NODE NODE NODE NODE NODE
    GPU5  NV18 NV18 NV18 NV18 NV18 X NV18 NV18 NODE NODE NODE NODE NODE NODE NODE PIX NODE NODE NODE NODE
    GPU6  NV18 NV18 NV18 NV18 NV18 NV18 X NV18 NODE NODE NODE NODE NODE NODE NODE NODE PIX NODE NODE NODE
    GPU7  NV18 NV18 NV18 NV18 NV18 NV18 NV18 X NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE PIX
    NIC0  PIX NODE NODE NODE NODE NODE NODE NODE X NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE
    NIC1  NODE PIX NODE NODE NODE NODE NODE NODE NODE X NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE
    NIC2  NODE NODE PIX NODE NODE NODE NODE NODE NODE NODE X NODE NODE NODE NODE NODE NODE NODE NODE NODE
    NIC3  NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE X PIX NODE NODE NODE NODE NODE NODE NODE
    NIC4  NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE PIX X NODE NODE NODE NODE NODE NODE NODE
    NIC5  NODE NODE NODE PIX NODE NODE NODE NODE NODE NODE NODE NODE NODE X NODE NODE NODE NODE NODE NODE
    NIC6  NODE NODE NODE NODE PIX NODE NODE NODE NODE NODE NODE NODE NODE NODE X NODE NODE NODE NODE NODE
    NIC7  NODE NODE NODE NODE NODE PIX NODE NODE NODE NODE NODE NODE NODE NODE NODE X NODE NODE NODE NODE
    NIC8  NODE NODE NODE NODE NODE NODE PIX NODE NODE NODE NODE NODE NODE NODE NODE NODE X NODE NODE NODE
    NIC9  NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE X PIX NODE
    NIC10 NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE PIX X NODE
    NIC11 NODE NODE NODE NODE NODE NODE NODE PIX NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE NODE X
"""


def _matrix(table: str) -> tuple[tuple[str, ...], dict[tuple[str, str], str]]:
    rows = [line.split() for line in table.strip().splitlines()]
    labels = tuple(r[0] for r in rows)
    assert all(len(r) == len(labels) + 1 for r in rows)
    return labels, {(r[0], labels[k]): v for r in rows for k, v in enumerate(r[1:])}


@pytest.mark.parametrize("table", [B200_EXPECTED, A100_EXPECTED, H100_EXPECTED])
def test_the_expected_matrices_are_symmetric_so_each_mirror_witnesses_its_cell(table):
    labels, cells = _matrix(table)
    assert all(cells[(a, b)] == cells[(b, a)] for a in labels for b in labels)
    assert all(cells[(a, a)] == "X" for a in labels)


@pytest.mark.parametrize("name,table,n_repairs", [(B200, B200_EXPECTED, 12), (A100, A100_EXPECTED, 16),
                                                   (H100, H100_EXPECTED, 2)])
def test_fused_paste_is_recovered_cell_for_cell(name, table, n_repairs):
    m = parse_topo_matrix((TOPO_M / name).read_text(encoding="utf-8"))
    labels, cells = _matrix(table)
    assert m.devices == labels
    assert m.cells == cells
    assert len(m.repairs) == n_repairs and not m.truncated and m.warnings == ()


def test_b200_repairs_are_listed_line_by_line():
    m = parse_topo_matrix((TOPO_M / B200).read_text(encoding="utf-8"))
    assert m.repairs[0] == "line 8: GPU2: 'PXBNODE' read as PXB, NODE (a tab lost)"
    assert "line 10: GPU4: 'SYSSYS' read as SYS, SYS (a tab lost)" in m.repairs
    assert "line 22: NIC8: 'X NODE' read as X, NODE (a tab lost)" in m.repairs
    assert m.cpu_affinity["GPU2"] == "0-55,112-167" and m.numa_affinity["GPU4"] == "1"
    assert m.nic_name("NIC15") == "mlx5_15"


def test_a100_affinity_glued_to_a_damaged_level_is_cut_and_the_level_read_from_its_mirror():
    m = parse_topo_matrix((TOPO_M / A100).read_text(encoding="utf-8"))
    assert m.cpu_affinity == {f"GPU{k}": "0-115" for k in range(8)} | {f"NIC{k}": None for k in range(8)}
    assert m.numa_affinity["GPU3"] == "0-3" and m.gpu_numa_id["GPU3"] is None
    assert "line 6: GPU0: 'PH0-115' read as 'PH' (characters lost) then affinity 0-115 (a tab lost)" in m.repairs
    assert "line 6: GPU0/NIC7 'PH' read as PHB (from NIC7/GPU0)" in m.repairs


def test_h100_diagonal_fused_with_its_neighbour_is_split():
    m = parse_topo_matrix((TOPO_M / H100).read_text(encoding="utf-8"))
    assert m.repairs == ("line 11: GPU5: 'PIXNODE' read as PIX, NODE (a tab lost)",
                         "line 21: NIC7: 'X NODE' read as X, NODE (a tab lost)")
    assert m.level("GPU5", "NIC7") == "PIX" and m.level("NIC7", "NIC8") == "NODE"


def test_a_split_that_disagrees_with_its_mirror_is_refused():
    """SYNTHESIZED damage on the real H100 paste: GPU5's fused pair reversed ('NODEPIX') still splits
    by the vocabulary alone, but NIC7/GPU5 (PIX) and NIC8/GPU5 (NODE) say otherwise."""
    text = (TOPO_M / H100).read_text(encoding="utf-8").replace("\tPIXNODE\t", "\tNODEPIX\t", 1)
    with pytest.raises(TopoParseError, match="disagrees with its mirror: GPU5/NIC7 is 'NODE' but NIC7/GPU5 is 'PIX'"):
        parse_topo_matrix(text)


def test_a_glued_affinity_whose_level_has_no_mirror_is_refused():
    """SYNTHESIZED cut on the real A100 paste: without NIC7's row nothing says what 'PH' was."""
    lines = (TOPO_M / A100).read_text(encoding="utf-8").split("\n")
    text = "\n".join(ln for ln in lines if not ln.startswith("NIC7\t"))
    with pytest.raises(TopoParseError, match="'PH' is not a known value .*its mirror cannot say"):
        parse_topo_matrix(text)


def test_topo_from_smi_lists_every_repair_of_the_b200_paste():
    from cli_runner import run

    code, out, err = run("topo", "--from-smi", str(TOPO_M / B200))
    assert code == 0, err
    assert "REPAIRED: 12 cell(s) of the paste were damaged and recovered:" in out
    assert "line 22: NIC8: 'X NODE' read as X, NODE (a tab lost)" in out
    assert out.count("(a tab lost)") == 12
