"""The native verbs engine of ``ib_write``, run as a child process:
``python -m ccdiag.bench.rdma_worker < request.json``.

Per port: two RC queue pairs on the same port connected to each other (a loopback through the
port, the way the per-HCA GPUDirect checks of production fleets run ``ib_write_bw`` against
itself), RDMA WRITEs of ``size_bytes`` kept ``depth`` deep, completions polled, bytes counted over
the timed rounds. The source buffer is host memory or GPU memory. GPU memory is registered the way
NVIDIA recommends first, by DMA-BUF: CUDA exports the allocation as a dma-buf file descriptor
(``cuMemGetHandleForAddressRange``, driver R515 or later, on a GPU that reports
``CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED``) and rdma-core registers that descriptor
(``ibv_reg_dmabuf_mr``, pyverbs ``DmaBufMR`` taking a descriptor); where that is not possible it
falls back to registering the GPU address directly, which needs the ``nvidia_peermem`` module. Each
measurement says which registration it used. Same JSON-lines protocol as :mod:`.cuda_worker`.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from ccdiag.bench.cuda_worker import emit, read_request

DEPTH = 64


#: what each QP grants its peer: the responder must allow RDMA WRITE into its memory (without
#: IBV_ACCESS_REMOTE_WRITE on the QP, every write completes with a remote access error however the
#: MR was registered; rdma-core's own write tests set both flags on the QP)
def qp_access(e: Any) -> int:
    return e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE


def _verbs() -> Any:
    """pyverbs' classes, from the environment or, failing that, from the system's rdma-core."""
    try:
        import pyverbs  # noqa: F401
    except ImportError:
        from ccdiag.bench.sysverbs import add_system_pyverbs

        add_system_pyverbs()
    import pyverbs.enums as e
    from pyverbs.addr import AHAttr, GlobalRoute
    from pyverbs.cq import CQ
    from pyverbs.device import Context
    from pyverbs.mr import MR
    from pyverbs.pd import PD
    from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
    from pyverbs.wr import SGE, SendWR

    try:
        from pyverbs.mr import DmaBufMR
    except ImportError:  # rdma-core before v34 has no dma-buf registration
        DmaBufMR = None  # noqa: N806
    return {"e": e, "AHAttr": AHAttr, "GlobalRoute": GlobalRoute, "CQ": CQ, "Context": Context, "MR": MR, "PD": PD,
            "QP": QP, "QPAttr": QPAttr, "QPCap": QPCap, "QPInitAttr": QPInitAttr, "SGE": SGE, "SendWR": SendWR,
            "DmaBufMR": DmaBufMR}


def dmabuf_mr_takes_fd(cls: Any) -> bool:
    """Whether this pyverbs' ``DmaBufMR`` registers a dma-buf file descriptor it is given (rdma-core
    v44 documents "A DmaBuf object or a FD"); earlier ones only take their own DRM-allocated
    ``DmaBuf`` object, which cannot wrap a CUDA allocation."""
    doc = (getattr(cls, "__init__", None).__doc__ or "") if cls is not None else ""
    return "FD" in doc or "file descriptor" in doc.lower()


#: cuda.h: CUdevice_attribute CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED and
#: CUmemRangeHandleType CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 124
CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD = 1


def cuda_dmabuf_fd(ptr: int, length: int, device: int, lib: Any = None) -> tuple[int | None, str | None]:
    """(a dma-buf descriptor of ``length`` bytes of GPU memory at ``ptr`` on CUDA device ``device``,
    None) or (None, why not). ``ptr`` and ``length`` must be host-page aligned (the CUDA driver API's
    rule for ``cuMemGetHandleForAddressRange``). ``lib``: the CUDA driver library (tests pass a stand-in)."""
    import ctypes

    if lib is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            return None, f"the CUDA driver library is not loadable ({exc})"
    try:
        get_attribute, get_handle = lib.cuDeviceGetAttribute, lib.cuMemGetHandleForAddressRange
    except AttributeError:
        return None, "this CUDA driver has no cuMemGetHandleForAddressRange (R515 or later exports dma-bufs)"
    supported = ctypes.c_int(0)
    rc = get_attribute(ctypes.byref(supported), ctypes.c_int(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED),
                       ctypes.c_int(device))
    if rc != 0 or not supported.value:
        return None, (f"the GPU does not export dma-bufs (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = {supported.value}, "
                      f"CUresult {rc}): the open GPU kernel modules on Linux 5.12 or later are needed")
    fd = ctypes.c_int(-1)
    rc = get_handle(ctypes.byref(fd), ctypes.c_uint64(ptr), ctypes.c_size_t(length),
                    ctypes.c_int(CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD), ctypes.c_ulonglong(0))
    if rc != 0 or fd.value < 0:
        return None, f"cuMemGetHandleForAddressRange failed (CUresult {rc})"
    return fd.value, None


def page_aligned(ptr: int, size: int, page: int) -> tuple[int, int]:
    """(the first page boundary at or after ``ptr``, ``size`` rounded up to whole pages): the range
    handed to CUDA, which lies inside an allocation of ``size + 2 * page`` bytes at ``ptr``."""
    start = (ptr + page - 1) // page * page
    return start, (size + page - 1) // page * page


def rts_attr(v: dict, port: int, pattr: Any, dest_qp_num: int, gid: Any, gid_index: int) -> Any:
    """The attributes that take one RC QP from RESET to RTS towards ``dest_qp_num`` on the same
    port: access flags (INIT), path MTU, destination and address vector (RTR), timeouts (RTS).
    ``pattr``: the port's attributes (``active_mtu``, ``link_layer``, ``lid``); ``gid``: the port's
    GID at ``gid_index`` (RoCE only)."""
    e = v["e"]
    attr = v["QPAttr"](port_num=port)
    attr.qp_access_flags = qp_access(e)
    attr.path_mtu = pattr.active_mtu
    attr.dest_qp_num = dest_qp_num
    attr.rq_psn = attr.sq_psn = 0
    attr.max_dest_rd_atomic = attr.max_rd_atomic = 1
    attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
    if pattr.link_layer == e.IBV_LINK_LAYER_ETHERNET:
        attr.ah_attr = v["AHAttr"](gr=v["GlobalRoute"](dgid=gid, sgid_index=gid_index), is_global=1, port_num=port)
    else:
        attr.ah_attr = v["AHAttr"](dlid=pattr.lid, port_num=port)
    return attr


class Loopback:
    """Two connected RC QPs on one port and their buffers."""

    def __init__(self, v: dict, device: str, port: int, gid_index: int, size: int, gpu_ptr: int | None,
                 gpu_device: int | None = None, page: int = 4096):
        e = v["e"]
        self.v, self.size = v, size
        self.registration: str = "host"
        self.dmabuf_error: str | None = None
        self.ctx = v["Context"](name=device)
        self.pd = v["PD"](self.ctx)
        self.cq = v["CQ"](self.ctx, DEPTH * 2)
        cap = v["QPCap"](max_send_wr=DEPTH, max_recv_wr=1, max_send_sge=1, max_recv_sge=1)
        init = v["QPInitAttr"](qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap)
        self.qa, self.qb = v["QP"](self.pd, init), v["QP"](self.pd, init)
        access = qp_access(e)
        if gpu_ptr is not None:
            self._register_gpu(gpu_ptr, gpu_device, access, page)
        else:
            self.src = v["MR"](self.pd, size, access)
            self.src_addr = self.src.buf
        self.dst = v["MR"](self.pd, size, access)
        pattr = self.ctx.query_port(port)
        gid = self.ctx.query_gid(port, gid_index) if pattr.link_layer == e.IBV_LINK_LAYER_ETHERNET else None
        for me, other in ((self.qa, self.qb), (self.qb, self.qa)):
            me.to_rts(rts_attr(v, port, pattr, other.qp_num, gid, gid_index))

    def _register_gpu(self, gpu_ptr: int, gpu_device: int | None, access: int, page: int) -> None:
        """DMA-BUF first (the CUDA allocation exported as a dma-buf and registered by descriptor;
        its addresses in work requests start at the MR's offset, the iova rdma-core gives it),
        ``nvidia_peermem`` (the GPU address registered as it is) when that is not possible."""
        v = self.v
        why: str | None = "this pyverbs' DmaBufMR cannot take a dma-buf descriptor (rdma-core v44 or later can)"
        if v.get("DmaBufMR") is not None and dmabuf_mr_takes_fd(v["DmaBufMR"]):
            _, length = page_aligned(gpu_ptr, self.size, page)
            fd, why = cuda_dmabuf_fd(gpu_ptr, length, int(gpu_device or 0))
            if fd is not None:
                try:
                    self.src = v["DmaBufMR"](self.pd, self.size, access, dmabuf=fd, offset=0)
                    self.src_addr, self.registration = self.src.offset, "dmabuf"
                    return
                except Exception as exc:  # noqa: BLE001 - the HCA's or driver's refusal: fall back
                    why = f"ibv_reg_dmabuf_mr refused it ({type(exc).__name__}: {exc})"
        self.dmabuf_error = why
        self.src = v["MR"](self.pd, self.size, access, address=gpu_ptr)
        self.src_addr, self.registration = self.src.buf, "peermem"

    def timed(self, rounds: int, deadline: float) -> list[float]:
        v, e = self.v, self.v["e"]
        sge = v["SGE"](self.src_addr, self.size, self.src.lkey)
        out = []
        for _ in range(rounds):
            posted = done = 0
            t0 = time.perf_counter()
            while done < DEPTH:
                while posted < DEPTH and posted - done < DEPTH:
                    wr = v["SendWR"](opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[sge],
                                     send_flags=e.IBV_SEND_SIGNALED)
                    wr.set_wr_rdma(self.dst.rkey, self.dst.buf)
                    self.qa.post_send(wr)
                    posted += 1
                n, wcs = self.cq.poll(DEPTH)
                for wc in wcs[:n]:
                    if wc.status != e.IBV_WC_SUCCESS:
                        raise RuntimeError(f"work completion status {wc.status}")
                done += n
                if time.monotonic() > deadline:
                    raise TimeoutError("the time budget ran out")
            dt = time.perf_counter() - t0
            out.append(self.size * DEPTH / dt / 1e9)
        return out


def device_by_bus_id(cp: Any, bus_id: str) -> int:
    """The CUDA ordinal of the GPU at PCI address ``bus_id`` as this process numbers devices (which
    CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER change; the bus address does not)."""
    try:
        return int(cp.cuda.runtime.deviceGetByPCIBusId(bus_id))
    except Exception as exc:  # noqa: BLE001 - not visible to this process
        raise RuntimeError(f"GPU {bus_id} is not visible to this process (CUDA_VISIBLE_DEVICES?): {exc}") from None


def main() -> int:
    req = read_request()
    if req is None:
        return 2
    try:
        v = _verbs()
    except Exception as exc:  # noqa: BLE001
        emit("fatal", error=f"pyverbs not available ({type(exc).__name__}: {exc}); install rdma-core's python3-pyverbs")
        return 3
    deadline = time.monotonic() + float(req.get("budget_s") or 30)
    size = int(req.get("size_bytes") or (8 << 20))
    rounds = int(req.get("iters") or 5)
    emit("info", engine="pyverbs")
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    for job in req.get("jobs") or []:
        gpu_ptr = gpu_device = None
        holder = None
        try:
            if job.get("cuda_bus_id") is not None:
                import cupy

                gpu_device = device_by_bus_id(cupy, job["cuda_bus_id"])
                with cupy.cuda.Device(gpu_device):
                    holder = cupy.cuda.alloc(size + 2 * page)  # room for a page-aligned, page-rounded range
                    gpu_ptr, _ = page_aligned(int(holder.ptr), size, page)
            lb = Loopback(v, job["device"], int(job["port"]), int(job.get("gid_index") or 0), size, gpu_ptr,
                          gpu_device, page)
            samples = lb.timed(rounds, deadline)
            emit("measure", bench="ib_write", src=job["src"], dst=f"{job['device']}:{job['port']}",
                 op="rdma_write", direction="uni", samples_gbyte_s=samples, size_bytes=size,
                 note=job.get("note"), buffer=job.get("buffer"), registration=lb.registration,
                 dmabuf_error=lb.dmabuf_error)
        except TimeoutError:
            emit("budget", error="the time budget ran out")
            return 0
        except Exception as exc:  # noqa: BLE001 - that port's error, then the next
            emit("error", bench="ib_write", src=job.get("src"), dst=f"{job.get('device')}:{job.get('port')}",
                 error=f"{type(exc).__name__}: {exc}"[:500], buffer=job.get("buffer"))
        finally:
            holder = None
    emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
