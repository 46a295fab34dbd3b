"""The native verbs engine of ``ib_write``, run as a child process:
``python -m ccdiag.bench.rdma_worker < request.json``.

Per port: two RC queue pairs on the same port connected to each other (a loopback through the
port, the way the per-HCA GPUDirect checks of production fleets run ``ib_write_bw`` against
itself), RDMA WRITEs of ``size_bytes`` kept ``depth`` deep, completions polled, bytes counted over
the timed rounds. The source buffer is host memory, or GPU memory registered directly (which needs
the ``nvidia_peermem`` module; pyverbs' own dma-buf MR allocates from a DRM render node and cannot
wrap a CUDA allocation). Same JSON-lines protocol as :mod:`.cuda_worker`.
"""

from __future__ import annotations

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

    return {"e": e, "AHAttr": AHAttr, "GlobalRoute": GlobalRoute, "CQ": CQ, "Context": Context, "MR": MR, "PD": PD,
            "QP": QP, "QPAttr": QPAttr, "QPCap": QPCap, "QPInitAttr": QPInitAttr, "SGE": SGE, "SendWR": SendWR}


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

    def __init__(self, v: dict, device: str, port: int, gid_index: int, size: int, gpu_ptr: int | None):
        e = v["e"]
        self.v, self.size = v, size
        self.ctx = v["Context"](name=device)
        self.pd = v["PD"](self.ctx)
        self.cq = v["CQ"](self.ctx, DEPTH * 2)
        cap = v["QPCap"](max_send_wr=DEPTH, max_recv_wr=1, max_send_sge=1, max_recv_sge=1)
        init = v["QPInitAttr"](qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap)
        self.qa, self.qb = v["QP"](self.pd, init), v["QP"](self.pd, init)
        access = qp_access(e)
        if gpu_ptr is not None:
            self.src = v["MR"](self.pd, size, access, address=gpu_ptr)
        else:
            self.src = v["MR"](self.pd, size, access)
        self.dst = v["MR"](self.pd, size, access)
        pattr = self.ctx.query_port(port)
        gid = self.ctx.query_gid(port, gid_index) if pattr.link_layer == e.IBV_LINK_LAYER_ETHERNET else None
        for me, other in ((self.qa, self.qb), (self.qb, self.qa)):
            me.to_rts(rts_attr(v, port, pattr, other.qp_num, gid, gid_index))

    def timed(self, rounds: int, deadline: float) -> list[float]:
        v, e = self.v, self.v["e"]
        sge = v["SGE"](self.src.buf, self.size, self.src.lkey)
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
    for job in req.get("jobs") or []:
        gpu_ptr = None
        holder = None
        try:
            if job.get("cuda_bus_id") is not None:
                import cupy

                with cupy.cuda.Device(device_by_bus_id(cupy, job["cuda_bus_id"])):
                    holder = cupy.cuda.alloc(size)
                    gpu_ptr = int(holder.ptr)
            lb = Loopback(v, job["device"], int(job["port"]), int(job.get("gid_index") or 0), size, gpu_ptr)
            samples = lb.timed(rounds, deadline)
            emit("measure", bench="ib_write", src=job["src"], dst=f"{job['device']}:{job['port']}",
                 op="rdma_write", direction="uni", samples_gbyte_s=samples, size_bytes=size,
                 note=job.get("note"), buffer=job.get("buffer"))
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
