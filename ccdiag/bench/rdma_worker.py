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


def _verbs() -> Any:
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
        access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
        if gpu_ptr is not None:
            self.src = v["MR"](self.pd, size, access, address=gpu_ptr)
        else:
            self.src = v["MR"](self.pd, size, access)
        self.dst = v["MR"](self.pd, size, access)
        pattr = self.ctx.query_port(port)
        for me, other in ((self.qa, self.qb), (self.qb, self.qa)):
            attr = v["QPAttr"](port_num=port)
            attr.path_mtu = pattr.active_mtu
            attr.dest_qp_num = other.qp_num
            attr.rq_psn = attr.sq_psn = 0
            attr.max_dest_rd_atomic = attr.max_rd_atomic = 1
            attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
            if pattr.link_layer == e.IBV_LINK_LAYER_ETHERNET:
                gid = self.ctx.query_gid(port, gid_index)
                ah = v["AHAttr"](gr=v["GlobalRoute"](dgid=gid, sgid_index=gid_index), is_global=1, port_num=port)
            else:
                ah = v["AHAttr"](dlid=pattr.lid, port_num=port)
            attr.ah_attr = ah
            me.to_rts(attr)

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
            if job.get("cuda_device") is not None:
                import cupy

                with cupy.cuda.Device(int(job["cuda_device"])):
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
