"""Which way GPUDirect RDMA can reach GPU memory on this node, and which way NCCL will take.

NVIDIA documents two paths: the ``nvidia_peermem`` module (peer memory), and DMA-BUF, the path NVIDIA
recommends with the open GPU kernel modules (GPU Operator and CUDA documentation), which needs no
extra module: the open kernel modules (the ``/proc/driver/nvidia/version`` banner says "Open Kernel
Module"), Linux 5.12 or later (dma-buf memory registration in the RDMA core), an NVIDIA driver of
R515 or later (CUDA exports device memory as a dma-buf) and an rdma-core that has
``ibv_reg_dmabuf_mr`` (release 34 and later). A node with either path can use GPUDirect RDMA; a
node with neither cannot. NCCL (2.13 and later) takes DMA-BUF when it is available unless
``NCCL_DMABUF_ENABLE=0``, peermem otherwise; ``NCCL_NET_GDR_LEVEL`` caps how far a GPU may be from
its NIC for either (``LOC`` turns GPUDirect RDMA off), a debugging variable ``ccdiag nccl`` names for
removal. The settings are read as ``ccdiag nccl`` reads them (:func:`ccdiag.nccl.present.settings_present`:
the environment, then ``/etc/nccl.conf``), so both commands agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")
MIN_KERNEL = (5, 12)
MIN_DRIVER = 515
MIN_RDMA_CORE = 34
#: NCCL_NET_GDR_LEVEL values that never use GPUDirect RDMA (NCCL's path levels: LOC = 0)
GDR_OFF = ("LOC", "0")
SOURCE = ("NVIDIA: GPUDirect RDMA over DMA-BUF needs the open GPU kernel modules, Linux 5.12+, driver R515+ "
          "and rdma-core with ibv_reg_dmabuf_mr; otherwise nvidia_peermem")


def kernel_version(release: str | None) -> tuple[int, int] | None:
    m = re.match(r"^\s*([0-9]{1,3})\.([0-9]{1,3})", release or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def driver_major(version: str | None) -> int | None:
    m = re.match(r"^\s*([0-9]{2,4})\b", version or "")
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class GpuDirectPaths:
    """What the node offers GPUDirect RDMA, and what NCCL is told."""

    peermem: str | None  # the peer-memory module loaded, if any
    dmabuf: bool | None  # DMA-BUF usable (None: a fact it needs was not read)
    dmabuf_missing: tuple[str, ...]  # the requirements that are not met
    dmabuf_unread: tuple[str, ...]  # the requirements that could not be read
    facts: dict
    nccl_dmabuf_enable: str | None = None
    nccl_gdr_level: str | None = None
    settings_source: str = "environment"

    @property
    def nccl_path(self) -> str | None:
        """"dmabuf" | "peermem" | None: the path NCCL takes (None: neither, or GPUDirect RDMA off)."""
        if (self.nccl_gdr_level or "").strip().upper() in GDR_OFF:
            return None
        if self.dmabuf and (self.nccl_dmabuf_enable or "1").strip() != "0":
            return "dmabuf"
        return "peermem" if self.peermem else None


def gpudirect_paths(system: Any) -> GpuDirectPaths:
    """The paths of a node from the system probe's observation."""
    from ccdiag.nccl.present import settings_present

    mods = set(getattr(system, "modules", ()) or ())
    peermem = next((m for m in PEERMEM_MODULES if m in mods), None)
    flavor = getattr(system, "nvidia_module_flavor", None)
    kernel = kernel_version(getattr(system, "kernel", None))
    driver = driver_major(getattr(system, "nvidia_driver_version", None))
    rdma = getattr(system, "rdma_core_version", None)
    missing, unread = [], []
    for ok, what, fact in ((None if flavor is None else flavor == "open", "the open GPU kernel modules", flavor),
                           (None if kernel is None else kernel >= MIN_KERNEL, "Linux 5.12 or later",
                            getattr(system, "kernel", None)),
                           (None if driver is None else driver >= MIN_DRIVER, "an NVIDIA driver R515 or later",
                            getattr(system, "nvidia_driver_version", None)),
                           (None if rdma is None else rdma >= MIN_RDMA_CORE,
                            "rdma-core 34 or later (ibv_reg_dmabuf_mr)", rdma)):
        if ok is None:
            unread.append(what)
        elif not ok:
            missing.append(f"{what} (this node: {fact})")
    # rdma-core's release is read from where distributions put libibverbs; when it is not there (a
    # copied tree, an unusual prefix) the kernel answers for it: every distribution shipping Linux
    # 5.12 or later ships rdma-core 34 or later (Ubuntu 22.04: 39, RHEL 9: 37+, SLES 15 SP4: 38,
    # Debian 12: 44), and MLNX_OFED bundles its own newer one
    assumed = []
    if unread == ["rdma-core 34 or later (ibv_reg_dmabuf_mr)"] and kernel is not None and kernel >= MIN_KERNEL:
        unread, assumed = [], ["rdma-core 34 or later (not read; assumed from the kernel release)"]
    dmabuf = False if missing else (None if unread else True)
    env, source = settings_present(getattr(system, "environ", None) or {}, getattr(system, "nccl_conf_text", None))
    facts = {"nvidia_peermem": peermem or "not loaded", "kernel module": flavor, "kernel": getattr(system, "kernel", None),
             "driver": getattr(system, "nvidia_driver_version", None), "rdma-core": rdma}
    facts["assumed"] = assumed
    return GpuDirectPaths(peermem, dmabuf, tuple(missing), tuple(unread), facts,
                          env.get("NCCL_DMABUF_ENABLE"), env.get("NCCL_NET_GDR_LEVEL") or env.get("NCCL_IB_GDR_LEVEL"),
                          source)
