"""The measuring engines against the real libraries they call: CuPy (the ``cupy-cuda12x`` wheel) and
rdma-core's pyverbs (the ``python3-pyverbs`` system package).

Why: no GPU or RDMA device is here, so the engines never run end to end in CI; a misspelt runtime
function, a keyword argument the library does not take, or a missing enum would first fail on a
customer's node. Both libraries import without a device, so every name the workers use is read
out of their source (``ast``) and resolved against the real modules: functions are called with
the worker's own argument count and keywords (without a device the call reaches the driver and
fails there, which proves the signature; a ``TypeError`` about arguments fails the test), classes
that build without a device are built, and pyverbs' queue-pair set-up (:func:`rts_attr`) runs on
the real ``QPAttr``, ``AHAttr`` and ``GlobalRoute``.

The libraries are optional here (skipped with the reason when absent); CI installs both and sets
``CCDIAG_REQUIRE_REAL_LIBS=1``, which turns a missing library into a failure.
"""

from __future__ import annotations

import ast
import json
import os
import pathlib
import re
import subprocess
import sys
import types

import pytest

from ccdiag.bench import cuda_worker, rdma_worker
from ccdiag.bench.sysverbs import add_system_pyverbs

REQUIRED = os.environ.get("CCDIAG_REQUIRE_REAL_LIBS") == "1"
BENCH = pathlib.Path(cuda_worker.__file__).resolve().parent
#: a TypeError that says the call's shape is wrong (not merely a dummy value of the wrong type)
SHAPE_ERROR = re.compile(r"positional argument|unexpected keyword|takes (exactly|at most|at least|no)|"
                         r"required (positional|keyword)|missing \d+ required")


def _need(module: str):
    try:
        if module == "pyverbs":
            try:
                import pyverbs  # noqa: F401
            except ImportError:
                add_system_pyverbs()
        return __import__(module)
    except ImportError as exc:
        if REQUIRED:
            raise
        pytest.skip(f"{module} is not installed here ({exc}); CI installs it")


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _uses(path: pathlib.Path, roots: dict[str, str]) -> tuple[dict[str, list[ast.Call]], set[str]]:
    """Calls and attribute reads in ``path`` whose dotted name starts with one of ``roots`` (local
    spelling -> the library's module path), keyed by the library's dotted name."""
    tree = ast.parse(path.read_text())
    calls: dict[str, list[ast.Call]] = {}
    reads: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            name = _dotted(node)
            for local, lib in sorted(roots.items(), key=lambda kv: -len(kv[0])):
                if name and name.startswith(local + "."):
                    reads.add(lib + name[len(local):])
                    break
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            for local, lib in sorted(roots.items(), key=lambda kv: -len(kv[0])):
                if name and name.startswith(local + "."):
                    calls.setdefault(lib + name[len(local):], []).append(node)
                    break
    return calls, reads


def _resolve(root_module, dotted: str):
    obj = root_module
    for part in dotted.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def _cupy_names():
    return _uses(BENCH / "cuda_worker.py", {"self.rt": "cupy.cuda.runtime", "rt": "cupy.cuda.runtime",
                                            "self.cp": "cupy", "cp": "cupy", "cupy": "cupy"})


def test_every_cupy_name_the_worker_uses_exists_in_the_real_cupy():
    cupy = _need("cupy")
    calls, reads = _cupy_names()
    names = sorted(set(calls) | reads)
    assert "cupy.cuda.runtime.memcpyPeerAsync" in names and "cupy.RawKernel" in names  # the scan sees them
    missing = []
    for name in names:
        try:
            _resolve(cupy, name)
        except AttributeError:
            missing.append(name)
    assert not missing, f"not in CuPy {cupy.__version__}: {missing}"


def _gpu_present(cupy) -> bool:
    try:
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no driver: the expected case here
        return False


def test_every_cupy_call_has_the_arguments_the_real_function_takes():
    """Called with the worker's own argument count and keyword names: without a driver CuPy raises
    its CUDA error (the call got through), never a TypeError about the arguments."""
    cupy = _need("cupy")
    if _gpu_present(cupy):
        pytest.skip("a GPU is present: the engine's own run checks the calls there")
    calls, _ = _cupy_names()
    wrong = []
    for name, nodes in sorted(calls.items()):
        fn = _resolve(cupy, name)
        doc_args = _doc_arity(fn)
        for node in nodes:
            nargs = len(node.args)
            kws = {k.arg: 0 for k in node.keywords if k.arg}
            if doc_args is not None and nargs + len(kws) != doc_args and not kws:
                wrong.append(f"{name}: the worker passes {nargs} arguments, CuPy documents {doc_args}")
                continue
            try:
                fn(*[0] * nargs, **{k: (True if k == "non_blocking" else v) for k, v in kws.items()})
            except TypeError as exc:
                if SHAPE_ERROR.search(str(exc)):
                    wrong.append(f"{name} (line {node.lineno}): {exc}")
            except Exception:  # noqa: BLE001 - the driver's error: the call's shape was accepted
                pass
    assert not wrong, wrong


def _doc_arity(fn) -> int | None:
    """The parameter count from a Cython function's embedded signature, e.g.
    ``memcpyAsync(intptr_t dst, intptr_t src, size_t size, int kind, intptr_t stream)``."""
    first = (getattr(fn, "__doc__", None) or "").strip().splitlines()[:1]
    m = re.match(r"^\w+\((.*)\)", first[0]) if first else None
    if not m or isinstance(fn, type):
        return None
    inner = m.group(1).strip()
    return len([p for p in inner.split(",") if p.strip()]) if inner else 0


def test_cupy_objects_have_the_methods_the_worker_calls_on_them():
    """Streams, events and kernels are made by the worker and then used by method: each method it
    calls (as written in its source) exists on the real class."""
    cupy = _need("cupy")
    src = (BENCH / "cuda_worker.py").read_text()
    used = {cupy.cuda.Stream: ("synchronize",), cupy.cuda.Event: ("record", "synchronize"),
            cupy.cuda.Device: ("__enter__", "__exit__"), cupy.RawKernel: ("__call__",)}
    for cls, attrs in used.items():
        for attr in attrs:
            assert hasattr(cls, attr), f"{cls.__name__}.{attr}"
    assert isinstance(cupy.cuda.Stream.null.ptr, int)  # an instance field: the null stream has one
    for spelled in (".synchronize()", ".record(stream)", "s.ptr", "stream=stream"):
        assert spelled in src, spelled  # the table above follows the source
    # the spin kernel's stream= keyword and a real kernel object from the worker's own source
    kernel = cupy.RawKernel(cuda_worker.SPIN_SOURCE, "ccdiag_spin")
    assert kernel.name == "ccdiag_spin"
    assert cupy.cuda.runtime.hostAllocMapped and cupy.cuda.runtime.hostAllocPortable is not None


def test_the_cuda_worker_without_a_device_says_cuda_is_not_usable():
    cupy = _need("cupy")
    if _gpu_present(cupy):
        pytest.skip("a GPU is present")
    req = json.dumps({"tasks": ["h2d"], "gpus": [{"label": "GPU0", "bdf": "0000:18:00.0"}], "budget_s": 10})
    p = subprocess.run([sys.executable, "-m", "ccdiag.bench.cuda_worker"], input=req, capture_output=True,
                       text=True, timeout=120)
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.strip()]
    assert p.returncode == 3 and lines[-1]["type"] == "fatal" and "CUDA not usable" in lines[-1]["error"], p.stdout


# -- pyverbs ------------------------------------------------------------------------------------


def _verbs_uses():
    """``v["Class"](...)`` calls and ``e.NAME`` reads in the pyverbs worker."""
    tree = ast.parse((BENCH / "rdma_worker.py").read_text())
    calls: dict[str, list[ast.Call]] = {}
    enums: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) and \
                isinstance(node.func.value, ast.Name) and node.func.value.id == "v" and \
                isinstance(node.func.slice, ast.Constant):
            calls.setdefault(node.func.slice.value, []).append(node)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "e":
            enums.add(node.attr)
    return calls, enums


def test_every_pyverbs_class_keyword_and_constant_exists_in_the_real_pyverbs():
    _need("pyverbs")
    import pyverbs.enums

    v = rdma_worker._verbs()
    calls, enums = _verbs_uses()
    assert {"QPAttr", "QPInitAttr", "MR", "SendWR", "AHAttr"} <= set(calls)
    assert {"IBV_ACCESS_REMOTE_WRITE", "IBV_WR_RDMA_WRITE", "IBV_QPT_RC"} <= enums
    missing = [n for n in enums if not hasattr(pyverbs.enums, n)]
    assert not missing, f"not in pyverbs.enums: {missing}"
    bad = []
    for cls_name, nodes in calls.items():
        cls = v[cls_name]
        documented = (getattr(cls.__init__, "__doc__", None) or "") + (cls.__doc__ or "")
        for node in nodes:
            kws = [k.arg for k in node.keywords if k.arg]
            verdict = _try_shape(cls, len(node.args), kws)
            if verdict is not None and verdict.startswith("shape:"):
                bad.append(f"{cls_name} (line {node.lineno}): {verdict[6:]}")
            elif verdict is not None:
                # a creator-first class refuses the dummy creator before reading keywords: its
                # documented parameters must name every keyword instead
                bad += [f"{cls_name}: keyword {k!r} is not a documented parameter" for k in kws
                        if f":param {k}:" not in documented]
    assert not bad, bad


def _try_shape(cls, nargs: int, kws: list[str]) -> str | None:
    """None when the real class accepted the call's shape (built, or failed on a value or for want
    of a device); "shape: why" when it refused the arguments themselves; "values" when every dummy
    value was refused before the keywords were read. Each keyword is tried on its own too, with a
    number and with None, since one dummy cannot suit an int field and an object field at once."""
    attempts = [dict.fromkeys(kws, 0), dict.fromkeys(kws, None)]
    attempts += [{k: d} for k in kws for d in (0, None)]
    accepted: set[str] = set()
    for kwargs in attempts:
        try:
            cls(*[None] * nargs, **kwargs)
            accepted |= set(kwargs)
        except TypeError as exc:
            if SHAPE_ERROR.search(str(exc)):
                return f"shape:{exc}"
        except Exception:  # noqa: BLE001 - no device, or a dummy value refused after parsing
            accepted |= set(kwargs)
    return None if accepted >= set(kws) and (accepted or not kws) else "values"


def test_pyverbs_objects_have_the_methods_and_fields_the_worker_uses():
    _need("pyverbs")
    from pyverbs.cq import CQ, WC
    from pyverbs.device import Context, PortAttr
    from pyverbs.mr import MR
    from pyverbs.qp import QP
    from pyverbs.wr import SendWR

    src = (BENCH / "rdma_worker.py").read_text()
    used = {Context: ("query_port", "query_gid"), QP: ("to_rts", "post_send", "qp_num"), CQ: ("poll",),
            MR: ("buf", "lkey", "rkey"), SendWR: ("set_wr_rdma",), WC: ("status",),
            PortAttr: ("active_mtu", "link_layer", "lid")}
    for cls, attrs in used.items():
        for attr in attrs:
            assert hasattr(cls, attr), f"{cls.__name__}.{attr}"
            assert f".{attr}" in src, f"{attr} is no longer used: update this table"


def _port(e, link_layer):
    return types.SimpleNamespace(active_mtu=e.IBV_MTU_4096, link_layer=link_layer, lid=7)


def test_queue_pairs_grant_remote_write_as_rdma_cores_own_tests_do():
    """The INIT-to-RTS attributes built on the real QPAttr: without IBV_ACCESS_REMOTE_WRITE the
    responder rejects every RDMA WRITE (remote access error), whatever the MR allows."""
    _need("pyverbs")
    from pyverbs.addr import GID

    v = rdma_worker._verbs()
    e = v["e"]
    attr = rdma_worker.rts_attr(v, 1, _port(e, e.IBV_LINK_LAYER_INFINIBAND), 0x1234, None, 0)
    assert attr.qp_access_flags == e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_LOCAL_WRITE
    assert attr.qp_access_flags & e.IBV_ACCESS_REMOTE_WRITE
    assert (attr.dest_qp_num, attr.path_mtu, attr.port_num) == (0x1234, e.IBV_MTU_4096, 1)
    assert attr.ah_attr.dlid == 7 and not attr.ah_attr.is_global
    roce = rdma_worker.rts_attr(v, 1, _port(e, e.IBV_LINK_LAYER_ETHERNET), 0x99, GID(), 3)
    assert roce.ah_attr.is_global and roce.ah_attr.sgid_index == 3
    assert roce.qp_access_flags & e.IBV_ACCESS_REMOTE_WRITE


def test_the_pyverbs_worker_reaches_the_device_list_and_reports_each_port():
    """As far as the library goes without a device: the worker imports the real pyverbs (from the
    system's rdma-core when the environment has none), opens the device and reports that port's
    error in rdma-core's own words, then finishes."""
    _need("pyverbs")
    req = json.dumps({"jobs": [{"device": "mlx5_0", "port": 1, "src": "host", "buffer": "host"}],
                      "budget_s": 10, "size_bytes": 4096, "iters": 1})
    p = subprocess.run([sys.executable, "-m", "ccdiag.bench.rdma_worker"], input=req, capture_output=True,
                       text=True, timeout=60)
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.strip()]
    kinds = [ln["type"] for ln in lines]
    assert p.returncode == 0 and kinds == ["info", "error", "done"], p.stdout + p.stderr
    assert lines[1]["dst"] == "mlx5_0:1" and "PyverbsRDMAError" in lines[1]["error"]


# -- GPU memory by DMA-BUF (no GPU here: the calls are checked against the real pyverbs and a
# stand-in of the CUDA driver library; the path is untested on hardware, docs/testing.md) ----------

def test_the_real_pyverbs_registers_a_dmabuf_descriptor_it_is_given():
    _need("pyverbs")
    v = rdma_worker._verbs()
    assert v["DmaBufMR"] is not None and rdma_worker.dmabuf_mr_takes_fd(v["DmaBufMR"])
    for attr in ("offset", "lkey", "rkey"):  # the worker's work requests address the MR from its offset
        assert hasattr(v["DmaBufMR"], attr), attr
    assert ".offset" in (BENCH / "rdma_worker.py").read_text()


class _CudaStandIn:
    """The two CUDA driver functions the worker calls, as ctypes would hand them its arguments."""

    def __init__(self, supported: int, rc: int = 0):
        self.supported, self.rc, self.calls = supported, rc, []

    def cuDeviceGetAttribute(self, out, attribute, device):  # noqa: N802 - the driver's own name
        self.calls.append(("attr", attribute.value, device.value))
        out._obj.value = self.supported
        return 0

    def cuMemGetHandleForAddressRange(self, out, ptr, size, handle_type, flags):  # noqa: N802
        self.calls.append(("handle", ptr.value, size.value, handle_type.value, flags.value))
        out._obj.value = 37
        return self.rc


def test_cuda_exports_a_dmabuf_descriptor_with_the_driver_apis_arguments():
    lib = _CudaStandIn(supported=1)
    assert rdma_worker.cuda_dmabuf_fd(0x7F0000200000, 8 << 20, 3, lib) == (37, None)
    assert lib.calls == [("attr", 124, 3), ("handle", 0x7F0000200000, 8 << 20, 1, 0)]
    fd, why = rdma_worker.cuda_dmabuf_fd(0x7F0000200000, 8 << 20, 3, _CudaStandIn(supported=0))
    assert fd is None and "open GPU kernel modules" in why
    fd, why = rdma_worker.cuda_dmabuf_fd(0x7F0000200000, 8 << 20, 3, _CudaStandIn(supported=1, rc=1))
    assert fd is None and "CUresult 1" in why
    assert rdma_worker.page_aligned(0x1000010, 5000, 4096) == (0x1001000, 8192)


def test_gpu_memory_falls_back_to_peermem_and_says_why():
    """Without a CUDA driver here the DMA-BUF export fails: the worker registers the GPU address as
    it is (nvidia_peermem) with the real MR class's keyword, and keeps the reason."""
    registered = {}

    class MR:
        def __init__(self, pd, length, access, address=None):
            registered.update(length=length, address=address)
            self.buf, self.lkey = address, 1

    class DmaBufMR:
        def __init__(self, pd, length, access, dmabuf=None, offset=0):
            """:param dmabuf: A DmaBuf object or a FD representing a dmabuf."""
            raise AssertionError("not reached without a CUDA driver")

    lb = rdma_worker.Loopback.__new__(rdma_worker.Loopback)
    lb.v, lb.size, lb.pd = {"MR": MR, "DmaBufMR": DmaBufMR}, 8192, None
    lb.dmabuf_error = None
    lb._register_gpu(0x7F0000200000, 0, 0, 4096)
    assert lb.registration == "peermem" and registered == {"length": 8192, "address": 0x7F0000200000}
    assert lb.src_addr == 0x7F0000200000 and lb.dmabuf_error
