"""Expectations a node is held to, beyond what its own topology implies.

Without a policy file every expectation comes from the node itself (each link against its own
capability, each GPU against its model). With one (``ccdiag policy init`` on a node known to be
healthy, then ``ccdiag check --policy FILE`` elsewhere) the fleet's standard applies: GPU count and
model, minimum PCIe generation and width, IB rate, XIDs to ignore, thresholds.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields


@dataclass(frozen=True)
class Policy:
    expected_gpu_count: int | None = None
    gpu_model: str | None = None  # substring of the NVML name, e.g. "H100 80GB HBM3"
    min_pcie_gen: int | None = None
    min_pcie_width: int | None = None
    ib_rate_gbps: float | None = None  # every active IB port at least this
    expected_ib_ports: int | None = None
    ignore_xids: tuple[int, ...] = ()
    xid_window_s: float = 24 * 3600.0  # XIDs older than this (by kernel timestamp) are history, not health
    temperature_warn_c: float = 85.0
    min_shm_bytes: int = 1 << 30  # NCCL needs shared memory; Docker's 64 MiB default is the classic trap
    min_memlock_bytes: int | None = None  # None: require unlimited for RDMA
    require_persistence_mode: bool = True
    require_peermem: bool | None = None  # None: required only when GPUs and RDMA ports are both present
    nvlink_error_rate_warn: int = 1  # counter increase over the window that warns
    ib_error_rate_warn: int = 1
    source: str | None = None  # where the policy came from (file path), for evidence

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


DEFAULT_POLICY = Policy()
