"""What one GPU shows about itself: ``hbm`` (its device memory, a large device-to-device copy) and
``gemm`` (its tensor cores, a dense FP16 GEMM for a few seconds), each judged against the vendor's
published figure for the board in the hardware catalogue.

Why: a GPU that is present, healthy to NVML and reachable at full link rate can still be slow (its
clocks held down by a power cap or a thermal slowdown, a memory stack degraded), and no link of the
topology says what its memory or its arithmetic should deliver. The catalogue does
(``ccdiag/data/hardware.json``: ``hbm`` and ``dense_tensor_tflops``, each with its vendor source);
a model it does not know is measured and left UNKNOWN, saying so.

The same CuPy child process as the copies measures them (:mod:`.cuda_worker`, tasks ``hbm`` and
``gemm``); :mod:`.gpu_copy` hands their lines here.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from ccdiag.bench import expected as exp
from ccdiag.bench.judge import judge
from ccdiag.bench.result import Measurement
from ccdiag.core.findings import FAIL, PASS, UNKNOWN, WARN, Component, Evidence, Finding

if TYPE_CHECKING:
    from ccdiag.bench.registry import BenchContext
    from ccdiag.topology.model import Topology

#: the engine that measures them: the CuPy copy engine's worker (:mod:`.gpu_copy` registers both)
ENGINE = "cupy-ce"

#: what each benchmark measures, for the findings' words
WHAT = {"hbm": ("device memory", "published HBM bandwidth", "GB/s"),
        "gemm": ("dense FP16 GEMM", "published dense FP16 tensor peak", "TFLOPS")}

REMEDY = {
    "hbm": ("Watch the memory clock and the clocks-event reasons while it copies (`nvidia-smi -q -d "
            "CLOCK,PERFORMANCE`), and the ECC and row-remapping state (`nvidia-smi -q -d ECC,ROW_REMAPPER`); "
            "compare with the node's other GPUs of the same model. A GPU that stays slow after a reset goes "
            "to its vendor."),
    "gemm": ("Watch the SM clock, the power draw against its limit and the clocks-event reasons while it runs "
             "(`nvidia-smi -q -d CLOCK,POWER,PERFORMANCE`: SW power cap, HW slowdown, thermal slowdown); check the "
             "power limit (`nvidia-smi -q -d POWER`), the cooling and the inlet temperature. A GPU below its "
             "peers at the same clocks and power goes to its vendor."),
}


def _positive(values: Any) -> tuple[float, ...]:
    if not isinstance(values, (list, tuple)):
        return ()
    return tuple(float(x) for x in values if isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0)


def measurement(line: dict, ctx: BenchContext) -> Measurement:
    """One worker line of ``hbm`` or ``gemm``, judged against the catalogue's figure for the GPU."""
    bench, src = str(line.get("bench")), str(line.get("src"))
    if bench == "gemm":
        samples = _positive(line.get("samples_tflops"))
        m = Measurement(bench, src, src, op="gemm", engine=ENGINE, size_bytes=line.get("size_bytes"),
                        note=line.get("note"), tflops=statistics.median(samples) if samples else None,
                        samples_tflops=samples)
        m.extra["gemm_n"] = line.get("gemm_n")
        m.expected = exp.gemm(ctx.topology, src)
    else:
        samples = _positive(line.get("samples_gbyte_s"))
        m = Measurement(bench, src, src, op="copy", engine=ENGINE, size_bytes=line.get("size_bytes"),
                        note=line.get("note"), gbyte_s=statistics.median(samples) if samples else None,
                        samples_gbyte_s=samples)
        m.expected = exp.hbm(ctx.topology, src)
    if m.expected is None and m.value is not None:
        name = _model_name(ctx.topology, src)
        m.note = ((m.note + "; ") if m.note else "") + (
            f"the hardware catalogue has no {WHAT[bench][1]} for {name or 'this GPU'}: nothing to hold it to")
    judge(m, ctx.policy)
    if m.value is None:
        m.error = "no timed round completed"
    return m


def _model_name(topology: Topology | None, gpu: str) -> str | None:
    try:
        return topology.gpu(gpu).name if topology is not None else None
    except KeyError:
        return None


def _figure(m: Measurement) -> str:
    unit = WHAT[m.bench][2]
    cap = (m.expected.tflops if m.bench == "gemm" else m.expected.gbyte_s) if m.expected else None
    text = f"{m.value:,.1f} {unit}" if m.value is not None else "no figure"
    if m.ratio is not None and cap:
        text += f" = {m.ratio:.0%} of {cap:,.1f}"
    return text


def findings(name: str, ms: list[Measurement], topology: Topology | None) -> list[Finding]:
    """One finding per slow GPU (warn or fail) naming it; one pass for the healthy rest; UNKNOWN for
    figures the catalogue has nothing to hold to."""
    what, against, _ = WHAT[name]
    out: list[Finding] = []
    measured = [m for m in ms if m.value is not None]
    for m in measured:
        if m.status not in (WARN, FAIL):
            continue
        e = m.expected
        out.append(Finding(
            f"bench.{name}.slow_gpu", m.status, Component("gpu", m.src),
            f"{m.src} {what}: {_figure(m)} ({against}; healthy boards reach {m.typical})",
            evidence=(Evidence(f"{name} {m.src}", _figure(m), m.engine or ENGINE),
                      Evidence("expected", e.bottleneck_desc if e else None, e.source if e else "catalogue"),
                      Evidence("spread of the timed rounds", f"{m.spread:.0%}" if m.spread is not None else None,
                               m.engine or ENGINE)),
            expected=m.typical, expected_source=m.threshold_source, remedy=REMEDY[name]))
    good = [m for m in measured if m.status == PASS]
    if good:
        lo, hi = min(m.ratio for m in good if m.ratio is not None), max(m.ratio for m in good if m.ratio is not None)
        out.append(Finding(
            f"bench.{name}", PASS, Component("node", name),
            f"{name}: {len(good)} GPU(s) {what} at {lo:.0%}-{hi:.0%} of the {against}",
            evidence=tuple(Evidence(f"{name} {m.src}", _figure(m), m.engine or ENGINE) for m in good[:8]),
            expected=good[0].typical, expected_source=good[0].threshold_source))
    unjudged = [m for m in measured if m.expected is None]
    if unjudged:
        models = sorted({_model_name(topology, m.src) or "unknown model" for m in unjudged})
        out.append(Finding(
            f"bench.{name}.unjudged", UNKNOWN, Component("node", name),
            f"{len(unjudged)} GPU(s) measured but not judged: the hardware catalogue has no {against} for "
            f"{', '.join(models)}",
            evidence=tuple(Evidence(f"{name} {m.src}", _figure(m), m.engine or ENGINE) for m in unjudged[:8]),
            remedy=("Add the model's published figure, with its vendor source, to ccdiag/data/hardware.json; "
                    "meanwhile compare the figure with the node's other GPUs of the same model.")))
    return out
