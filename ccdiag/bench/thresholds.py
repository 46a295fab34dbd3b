"""How close to a path's expected bandwidth a healthy node comes, by kind of path.

A measurement is judged as a *fraction of the bottleneck link's capability*. Good tools never reach
100 %: protocol headers, DMA descriptor overheads and copy-engine limits take their share, and the
share differs by kind of link. Each default below is the lower end of what good tools reach on
healthy hardware (``typical``), a warning threshold at or below the loosest pass threshold that
production fleets use, and a failure threshold at the fraction that a link trained at half its width
or a path across the CPU socket gives. Figures and sources (public, as cited):

* PCIe host<->device copies, pinned, copy engine: 79-88 % (nvbandwidth issue #11: A100 Gen4 25-26 of
  31.5 GB/s; H200 Gen5 55.4 of 63 GB/s in stas00/ml-engineering network/README). Production pass
  thresholds 67-76 % (Azure HPC health checks: 21 GB/s of 31.5 on NDv4, 48 of 63 on NDv5).
* PCIe bidirectional host->device: per direction can drop to 40-50 %, platform dependent
  (nvbandwidth issues #11 and #53).
* NVLink peer copies (copy engine): 83-88 % one way and both ways (NVIDIA/nccl#1264: 371-377 of
  450 GB/s on H100; stas00: 396 of 450 on H200). Production pass 74 % (Azure NDv5: 335 GB/s).
* GPU peer copies staged through host memory (no peer access): 35-45 % of one PCIe link, the
  copy crossing two links in turn (p2pBandwidthLatencyTest with P2P disabled: 25-26 of 63 GB/s on
  H100 PCIe, 5.7 of 15.75 on RTX 2080 Ti).
* GPUDirect RDMA write, large messages: 90-95 % (Azure health checks: 380 Gb/s of 400 on NDR,
  180-185 of 200 on HDR).
* NCCL ring bus bandwidth against the bottleneck link: 77-82 % (nccl-tests issues #149 and #212:
  A100 230 of 300, H100 ~370 of 450).
* Device memory (``hbm``): a large device-to-device copy, reads and writes counted together,
  against the catalogue's HBM figure: 81-83 % on an H100 PCIe (1,622-1,661 of 2,000 GB/s in
  p2pBandwidthLatencyTest's diagonal, which counts both, HPE DL380a Gen11 guide). Below 70 % warns,
  below half (memory clocks held down, a degraded stack) fails.
* Dense GEMM (``gemm``), FP16 inputs on the tensor cores, against the SKU's published dense peak:
  78-87 % on NVIDIA parts with the best of many shapes (stas00/ml-engineering, Maximum Achievable
  Matmul FLOPS: A100 SXM 86.9 %, H100 SXM 80.3 %, B200 77.6 %). ccdiag times one fixed square
  shape and PCIe boards run at a lower power limit, so the warning sits lower (55 %); below 35 % (a
  GPU held at a fraction of its clocks or power) fails.
* NVLS (NVLink SHARP), CollNet and tree bus bandwidths are *not* judged against a link rate: with
  in-network reduction the busbw formula no longer describes bytes on a wire and can exceed the
  link's unidirectional rate (nccl-tests issues #153 and #212; NVIDIA/nccl#1374: 215 GB/s busbw on
  a 200 GB/s H800).

Every default can be overridden in the policy file (``bench_<kind>_warn_fraction`` /
``bench_<kind>_fail_fraction``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ccdiag.core.findings import FAIL, PASS, UNKNOWN, WARN

if TYPE_CHECKING:
    from ccdiag.inputs.policy import Policy


@dataclass(frozen=True)
class Fractions:
    """Thresholds of one kind of path, as fractions of the bottleneck link's capability."""

    kind: str
    typical_low: float
    typical_high: float
    warn_below: float
    fail_below: float
    source: str

    def status(self, ratio: float | None) -> str:
        if ratio is None:
            return UNKNOWN
        if ratio < self.fail_below:
            return FAIL
        if ratio < self.warn_below:
            return WARN
        return PASS

    def typical_desc(self) -> str:
        return f"{self.typical_low:.0%}-{self.typical_high:.0%}"


#: kind -> defaults. Kinds: ``pcie`` (host<->device and PCIe peer copies, one way), ``pcie_bidir``
#: (each direction of a bidirectional host<->device copy), ``nvlink`` (NVLink peer copies),
#: ``rdma`` (RDMA write over one port), ``busbw`` (NCCL/MPI ring allreduce bus bandwidth), ``hbm``
#: (device memory against the catalogue), ``gemm`` (dense GEMM against the SKU's published peak).
DEFAULTS: dict[str, Fractions] = {
    "pcie": Fractions("pcie", 0.79, 0.88, 0.67, 0.50,
                      "nvbandwidth#11 and stas00/ml-engineering (typical); Azure HPC health checks NDv4/NDv5 (pass)"),
    "pcie_bidir": Fractions("pcie_bidir", 0.40, 0.88, 0.35, 0.20,
                            "nvbandwidth#11, #53: bidirectional host copies are platform dependent"),
    "nvlink": Fractions("nvlink", 0.83, 0.88, 0.74, 0.50,
                        "NVIDIA/nccl#1264 and stas00/ml-engineering (typical); Azure NDv5 335 GB/s (pass)"),
    "nvlink_bidir": Fractions("nvlink_bidir", 0.70, 0.87, 0.65, 0.45,
                              "each direction of a bidirectional NVLink peer copy: 71-87 % on healthy HGX A100 "
                              "(424-520 of 600 GB/s, NVIDIA/nccl-tests#100), 83 % on HGX H100 (742-749 of 900, "
                              "NVIDIA/nccl#1264)"),
    "staged": Fractions("staged", 0.35, 0.45, 0.25, 0.15,
                        "p2pBandwidthLatencyTest with P2P disabled, copies staged through host memory: 25-26 GB/s "
                        "on H100 PCIe Gen5 x16 (40 %, HPE DL380a Gen11 guide), 5.7 GB/s on RTX 2080 Ti Gen3 x16 (36 %, "
                        "AutoDL 2080Ti x2 test)"),
    "rdma": Fractions("rdma", 0.90, 0.95, 0.90, 0.75,
                      "Azure HPC health checks, ib_write_bw GPUDirect loopback (380/400 NDR, 180/200 HDR)"),
    "busbw": Fractions("busbw", 0.77, 0.82, 0.70, 0.50,
                       "nccl-tests#149 (A100 230/300), #212 (H100 ~370/450), ring algorithm only"),
    "hbm": Fractions("hbm", 0.80, 0.84, 0.70, 0.50,
                     "device-local copy, reads and writes counted: 1,622-1,661 of 2,000 GB/s on H100 PCIe "
                     "(p2pBandwidthLatencyTest diagonal, HPE DL380a Gen11 guide)"),
    "gemm": Fractions("gemm", 0.78, 0.87, 0.55, 0.35,
                      "stas00/ml-engineering Maximum Achievable Matmul FLOPS (A100 SXM 86.9 %, H100 SXM 80.3 %, "
                      "B200 77.6 % of the dense peak); one fixed shape here, so the warning sits lower"),
}


def policy_key(kind: str, which: str) -> str:
    """The policy file key of one threshold: ``bench_nvlink_warn_fraction``."""
    return f"bench_{kind}_{which}_fraction"


def fractions(kind: str, policy: Policy | None = None) -> Fractions:
    """The thresholds of ``kind``, with the policy's overrides applied (and named in the source)."""
    base = DEFAULTS[kind]
    if policy is None:
        return base
    warn = getattr(policy, policy_key(kind, "warn"), None)
    fail = getattr(policy, policy_key(kind, "fail"), None)
    if warn is None and fail is None:
        return base
    src = f"policy {getattr(policy, 'source', None) or '<policy>'}"
    return Fractions(kind, base.typical_low, base.typical_high,
                     base.warn_below if warn is None else float(warn),
                     base.fail_below if fail is None else float(fail), src)


#: within one node, GPUs of one model should copy device-local memory at the same rate: a GPU
#: below this fraction of its peers' median warns, below the second fails (HBM is not a link in the
#: topology, so the expectation comes from the node's other GPUs)
PEER_WARN_BELOW = 0.85
PEER_FAIL_BELOW = 0.70
