"""The one way ccdiag calls NVML: bounded in time, errors sorted into classes, results as JSON.

Why a facade rather than calling ``pynvml`` from the probes:

* **Classes, not codes.** Probes and checks care whether a value is *not applicable*
  (``not_supported``), *unknown* (``no_permission``), or whether the *GPU has failed*
  (``gpu_lost``, ``unknown_error``, ``timeout``, ``hung``). :func:`classify` does that mapping once.
* **Deadlines.** A wedged driver can block an NVML call for minutes. Each call runs on a worker
  thread and is abandoned after its deadline; the GPU it addressed is then marked hung and later
  calls for it fail at once, while other GPUs are still read on a fresh worker. Calls told ahead
  (:meth:`NvmlFacade.prefetch`) cross to the worker as one batch, each still under its own deadline.
* **Replayable.** Calls are named by ``(function, *args)`` where GPUs are given by *index*, never by
  handle, and results are plain JSON (ctypes structures become dicts), so the same call can be
  recorded into a snapshot and answered again from it.
"""

from __future__ import annotations

import ctypes
import threading
import time
from typing import Any, Callable, Sequence

from ccdiag.host import inflight

# Error classes. Keep in sync with the "NVML error" table of docs/architecture.md.
NOT_SUPPORTED = "not_supported"
NOT_FOUND = "not_found"
NO_PERMISSION = "no_permission"
INVALID_ARGUMENT = "invalid_argument"
GPU_LOST = "gpu_lost"
UNKNOWN_ERROR = "unknown_error"
TIMEOUT = "timeout"
HUNG = "hung"
RESET_REQUIRED = "reset_required"
DRIVER_MISSING = "driver_missing"
NOT_RECORDED = "not_recorded"
OTHER = "error"

#: classes meaning "this field does not apply to this device"
NOT_APPLICABLE_CLASSES = frozenset({NOT_SUPPORTED, NOT_FOUND})
#: classes meaning "we could not find out" (never a pass, never a fail)
UNKNOWN_CLASSES = frozenset({NO_PERMISSION, INVALID_ARGUMENT, NOT_RECORDED, OTHER})
#: classes meaning "the GPU itself is in trouble"
GPU_FAILED_CLASSES = frozenset({GPU_LOST, UNKNOWN_ERROR, TIMEOUT, HUNG, RESET_REQUIRED})

# NVML return codes (nvml.h); kept numeric so the mapping works without importing pynvml.
_CODE_CLASS = {
    1: DRIVER_MISSING,  # UNINITIALIZED
    2: INVALID_ARGUMENT,
    3: NOT_SUPPORTED,
    4: NO_PERMISSION,
    6: NOT_FOUND,
    9: DRIVER_MISSING,  # DRIVER_NOT_LOADED
    10: TIMEOUT,
    12: DRIVER_MISSING,  # LIBRARY_NOT_FOUND
    13: NOT_SUPPORTED,  # FUNCTION_NOT_FOUND: the installed driver predates the call
    15: GPU_LOST,
    16: RESET_REQUIRED,
    999: UNKNOWN_ERROR,
}

#: argument positions that name a GPU (by index) for functions taking two devices
_DEVICE_ARGS: dict[str, tuple[int, ...]] = {
    "nvmlDeviceGetP2PStatus": (0, 1),
    "nvmlDeviceGetTopologyCommonAncestor": (0, 1),
}


#: functions whose binding wrapper wants an output structure made by the caller, with the name of
#: that structure in the binding; called with a GPU index only, the facade makes and returns it
_OUT_STRUCTS: dict[str, str] = {
    "nvmlDeviceGetGpuFabricInfoV": "c_nvmlGpuFabricInfoV_t",
    "nvmlDeviceGetGpuFabricInfo": "c_nvmlGpuFabricInfo_t",
    "nvmlDeviceGetSramEccErrorStatus": "c_nvmlEccSramErrorStatus_v1_t",
}


def _new_out_struct(binding: Any, struct_cls: Any) -> Any:
    """An output structure for the driver to fill. A versioned structure (first field
    ``version``) must carry the NVML version word of its own layout, ``sizeof | major << 24``
    (nvml.h ``NVML_STRUCT_VERSION``); the binding's constructor sets it for the layouts it knows,
    and a constructor that did not is given the word that matches the structure's size."""
    out = struct_cls()
    if getattr(out, "version", None) == 0:
        size = ctypes.sizeof(struct_cls)
        for name in dir(binding):
            word = getattr(binding, name, None)
            if name.startswith("nvmlGpuFabricInfo_v") and isinstance(word, int) and word & 0xFFFFFF == size:
                out.version = word
                break
    return out


def _parent_index(spec: Any) -> Any:
    """The GPU index of a device argument: itself, or the GPU of a MIG instance ``"3:mig1"``."""
    if isinstance(spec, str) and ":mig" in spec:
        try:
            return int(spec.split(":mig", 1)[0])
        except ValueError:
            return spec
    return spec


class NvmlCallError(Exception):
    """An NVML call that did not return a value. ``error_class`` is one of the constants above."""

    def __init__(self, fn: str, args: tuple, error_class: str, code: int | None = None, message: str = ""):
        self.fn = fn
        self.args_ = tuple(args)
        self.error_class = error_class
        self.code = code
        self.message = message or error_class
        super().__init__(f"{call_name(fn, args)}: {self.message} [{error_class}]")

    def to_record(self) -> dict:
        return {"error": self.error_class, "code": self.code, "message": self.message}


def call_name(fn: str, args: tuple | list) -> str:
    """Human and JSON key form of one call: ``nvmlDeviceGetUUID(0)``."""
    return f"{fn}({', '.join(repr(a) for a in args)})"


def classify(code: int | None) -> str:
    """Map an NVML return code to ccdiag's error class."""
    if code is None:
        return OTHER
    return _CODE_CLASS.get(int(code), OTHER)


def jsonify(value: Any) -> Any:
    """Turn what pynvml returns (ctypes structures, arrays, bytes, named tuples) into JSON."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").rstrip("\x00")
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, ctypes.Array):
        return [jsonify(v) for v in value]
    if isinstance(value, (ctypes.Structure, ctypes.Union)):
        out = {}
        for field in value._fields_:
            name = field[0]
            if name.startswith("_") and name != "_unused":
                # pynvml names raw fields with a leading underscore and offers a property without
                name = name.lstrip("_")
            try:
                out[name] = jsonify(getattr(value, field[0]))
            except Exception:  # pragma: no cover - exotic field types
                out[name] = None
        return out
    if isinstance(value, dict):
        return {str(k): jsonify(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonify(v) for v in value]
    if isinstance(value, ctypes._SimpleCData):
        return jsonify(value.value)
    if hasattr(value, "__dict__"):
        return {k: jsonify(v) for k, v in vars(value).items() if not k.startswith("_")}
    return repr(value)


class _Waiting:
    """What a thread waiting in the facade announces, worded when read (never on the hot path): its
    own call, and the call the worker is in at that moment when that is another (a hung nvmlInit
    another probe started, say)."""

    __slots__ = ("facade", "fn", "args")

    def __init__(self, facade: Any, fn: str, args: tuple):
        self.facade, self.fn, self.args = facade, fn, args

    def __str__(self) -> str:
        what = f"NVML call {call_name(self.fn, self.args)}"
        running = self.facade._running
        if running is None:
            return what
        running_name = call_name(*running)
        return what if what.endswith(running_name) else f"{what}, waiting behind {running_name}"


class _Worker:
    """One daemon thread that executes NVML calls handed to it one at a time. Abandoned when a call hangs.

    A call is handed over through two locks used as semaphores (``go``: a job is there, ``done``: its
    answer is), not a queue and an event per call: one collection makes about 1,700 calls, and the
    hand-off is most of what the facade costs beyond them (bench/bench_nvml_cost.py). The facade's
    own lock keeps it to one job at a time.
    """

    def __init__(self) -> None:
        self._go = threading.Lock()
        self._go.acquire()
        self._done = threading.Lock()
        self._done.acquire()
        self._job: Callable[[], Any] | None = None
        self._box: dict = {}
        self.thread = threading.Thread(target=self._loop, name="ccdiag-nvml", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            self._go.acquire()
            fn, box = self._job, self._box
            try:
                box["value"] = fn()  # type: ignore[misc]
            except BaseException as exc:  # noqa: BLE001 - handed back to the caller
                box["exc"] = exc
            self._done.release()

    def submit(self, fn: Callable[[], Any], timeout: float) -> tuple[bool, dict]:
        box: dict = {}
        self._job, self._box = fn, box
        self._go.release()
        return self._done.acquire(timeout=timeout), box

    def submit_watched(self, fn: Callable[[], Any], progress: "_Progress", timeout: float) -> tuple[bool, dict]:
        """Run a job of several calls: it may take as long as it keeps finishing calls, but no
        one call more than ``timeout`` from its start (``progress.started``, set by the job)."""
        box: dict = {}
        self._job, self._box = fn, box
        self._go.release()
        wait = timeout
        while True:
            if self._done.acquire(timeout=wait):
                return True, box
            left = progress.started + timeout - time.monotonic()
            if left <= 0:
                return False, box
            wait = left


class _Progress:
    """Where a batch is: the call it is in and that call's start (``time.monotonic()``), and
    whether its caller has given up on it (an abandoned worker that wakes up must not go on
    calling NVML)."""

    __slots__ = ("started", "cancelled", "fn", "args", "charge")

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.cancelled = False
        self.fn: str = ""
        self.args: tuple = ()
        self.charge: tuple[str, tuple] | None = None  # while a handle is looked up: the call that needs it


class _Batch:
    """What a thread waiting on a batch announces: the call the worker is in."""

    __slots__ = ("progress",)

    def __init__(self, progress: _Progress):
        self.progress = progress

    def __str__(self) -> str:
        p = self.progress
        return f"NVML call {call_name(p.fn, p.args)}" if p.fn else "NVML calls (a batch)"


#: the GPU argument positions of most functions (the GPU first), one object so the batch can tell it by identity
_FIRST_ARG = (0,)

#: result types that are already plain JSON (no conversion needed)
_PLAIN = frozenset({int, str, float, bool, type(None)})


def call_key(fn: str, args: tuple) -> tuple:
    """``(fn, args)`` as a dictionary key; with list arguments (field ids, the NVLink counters'
    ``[[field, link], ...]``), the arguments as their text."""
    key = (fn, args)
    try:
        hash(key)
        return key
    except TypeError:
        # written out rather than frozen into tuples: the NVLink counters' request is 72 pairs,
        # and this key is made twice a GPU (kept, then asked for); never equal to a hashable key
        return (fn, repr(args))


class NvmlFacade:
    """Live NVML behind deadlines. ``binding`` is the ``pynvml`` module (or a test double of it).

    ``call(fn, *args)`` runs ``binding.<fn>`` with device indices replaced by handles and returns a
    JSON value, or raises :class:`NvmlCallError`.
    """

    def __init__(self, binding: Any = None, call_timeout: float = 3.0, init_timeout: float = 10.0):
        self._binding = binding
        self.call_timeout = call_timeout
        self.init_timeout = init_timeout
        self._lock = threading.Lock()
        self._worker: _Worker | None = None
        self._init_error: NvmlCallError | None = None
        self._initialised = False
        self._handles: dict[int, Any] = {}
        self._mig_handles: dict[tuple[int, int], Any] = {}
        self._hung_devices: set[int] = set()
        self._hung_global = False
        self._running: tuple[str, tuple] | None = None  # the call the worker is in now, for what waiters announce
        # answers of the last batch (prefetch), by call_key, each given out once
        self._ready: dict[tuple, tuple[Any, NvmlCallError | None]] = {}

    # -- plumbing -----------------------------------------------------------------
    def _load_binding(self) -> Any:
        if self._binding is None:
            try:
                import pynvml  # nvidia-ml-py
            except Exception as exc:  # pragma: no cover - nvidia-ml-py is a hard dependency
                raise NvmlCallError("nvmlInit", (), DRIVER_MISSING, None, f"pynvml not importable: {exc}")
            self._binding = pynvml
        return self._binding

    def _run(self, label: str, args: tuple, thunk: Callable[[], Any], timeout: float, device: int | None) -> Any:
        if self._worker is None:
            self._worker = _Worker()
        self._running = (label, args)  # worded only when someone asks (_Waiting)
        try:
            finished, box = self._worker.submit(thunk, timeout)
        finally:
            self._running = None
        if not finished:
            # the worker is stuck inside the driver: abandon it, remember who hung
            self._worker = None
            if device is None:
                self._hung_global = True
            else:
                self._hung_devices.add(device)
            raise NvmlCallError(label, args, HUNG, None, f"no answer within {timeout:g}s (driver hung?)")
        if "exc" in box:
            exc = box["exc"]
            code = getattr(exc, "value", None)
            if isinstance(exc, NvmlCallError):
                raise exc
            if code is None:
                raise NvmlCallError(label, args, OTHER, None, f"{type(exc).__name__}: {exc}")
            raise NvmlCallError(label, args, classify(code), int(code), str(exc))
        return box.get("value")

    def _ensure_init(self) -> None:
        if self._initialised:
            return
        if self._init_error is not None:
            # a fresh exception each time: re-raising the cached one would grow its traceback with
            # every call (a daemon on a node whose driver did not load calls this every cycle)
            e = self._init_error
            raise NvmlCallError(e.fn, e.args_, e.error_class, e.code, e.message) from None
        try:
            binding = self._load_binding()
            self._run("nvmlInit", (), binding.nvmlInit, self.init_timeout, None)
            self._initialised = True
        except NvmlCallError as exc:
            # LIBRARY_NOT_FOUND, DRIVER_NOT_LOADED ... stay the answer for this facade
            self._init_error = exc
            raise

    def _handle(self, index: int) -> Any:
        if index in self._handles:
            return self._handles[index]
        binding = self._binding
        handle = self._run("nvmlDeviceGetHandleByIndex", (index,),
                           lambda: binding.nvmlDeviceGetHandleByIndex(index), self.call_timeout, index)
        self._handles[index] = handle
        return handle

    def _device_handle(self, spec: Any) -> Any:
        """The handle of a GPU index, or of a MIG instance ``"<gpu>:mig<slot>"`` (NVML answers some
        health queries, remapped rows among them, per MIG instance only)."""
        if isinstance(spec, str) and ":mig" in spec:
            parent_txt, slot_txt = spec.split(":mig", 1)
            parent, slot = int(parent_txt), int(slot_txt)
            key = (parent, slot)
            if key not in self._mig_handles:
                parent_handle = self._handle(parent)
                binding = self._binding
                self._mig_handles[key] = self._run(
                    "nvmlDeviceGetMigDeviceHandleByIndex", (parent, slot),
                    lambda: binding.nvmlDeviceGetMigDeviceHandleByIndex(parent_handle, slot), self.call_timeout, parent)
            return self._mig_handles[key]
        return self._handle(int(spec))

    # -- the API -------------------------------------------------------------------
    def call(self, fn: str, *args: Any) -> Any:
        """``fn(*args)`` through the worker, its result as plain JSON values; raises :class:`NvmlCallError`.
        While it runs (or waits for a hung call before it) the call is announced in :mod:`ccdiag.host.inflight`.
        A call the last :meth:`prefetch` made is answered from there, once."""
        ready = self._ready
        if ready:
            try:
                hit = ready.pop((fn, args), None)
            except TypeError:  # a list argument (field ids)
                hit = ready.pop(call_key(fn, args), None)
            if hit is not None:
                if hit[1] is not None:
                    raise hit[1]
                return hit[0]
        inflight.enter(_Waiting(self, fn, args))
        try:
            return self._call(fn, *args)
        finally:
            inflight.leave()

    def _call(self, fn: str, *args: Any) -> Any:
        with self._lock:
            if self._hung_global:
                raise NvmlCallError(fn, args, HUNG, None, "an earlier NVML call hung; NVML not called again")
            self._ensure_init()
            thunk, device = self._prepare(fn, args)
            value = self._run(fn, args, thunk, self.call_timeout, device)
            return jsonify(value)

    def _prepare(self, fn: str, args: tuple, handle_of: Callable[[Any], Any] | None = None
                 ) -> tuple[Callable[[], Any], int | None]:
        """The call as a thunk for the worker (GPU indices replaced by handles, from ``handle_of``,
        by default looked up through the worker; an output structure made where the binding wants
        one) and the GPU a hang is charged to; raises :class:`NvmlCallError` for what needs no call
        (a hung GPU, a function the binding lacks, a handle NVML refused)."""
        handle_of = handle_of or self._device_handle
        binding = self._binding
        func = getattr(binding, fn, None)
        if func is None:
            raise NvmlCallError(fn, args, NOT_SUPPORTED, 13, f"{fn} is not in this nvidia-ml-py")
        device_positions = _DEVICE_ARGS.get(fn, (0,) if fn.startswith("nvmlDevice") and args else ())
        # a MIG instance is named "<gpu>:mig<slot>"; hangs are charged to its GPU
        devices = [_parent_index(args[i]) for i in device_positions if i < len(args)]
        real_args = list(args)
        for dev in devices:
            if dev in self._hung_devices:
                raise NvmlCallError(fn, args, HUNG, None, f"GPU {dev} stopped answering earlier; not called again")
        for pos in device_positions:
            if pos < len(real_args):
                real_args[pos] = handle_of(real_args[pos])
        struct_name = _OUT_STRUCTS.get(fn)
        if struct_name is not None and len(args) == 1:
            struct_cls = getattr(binding, struct_name, None)
            if struct_cls is None:
                raise NvmlCallError(fn, args, NOT_SUPPORTED, 13, f"{struct_name} is not in this nvidia-ml-py")
            out = _new_out_struct(binding, struct_cls)

            def filled() -> Any:
                # the C function takes a pointer to the caller's structure and fills it; the
                # binding hands its argument through unchanged, so it must be a pointer already
                func(*real_args, ctypes.byref(out))
                return out

            return filled, (devices[0] if devices else None)
        if not real_args:
            return func, (devices[0] if devices else None)
        return (lambda: func(*real_args)), (devices[0] if devices else None)

    def _error(self, fn: str, args: tuple, exc: BaseException) -> NvmlCallError:
        """What the binding raised, as the error class of its NVML return code."""
        if isinstance(exc, NvmlCallError):
            return exc
        code = getattr(exc, "value", None)
        if code is None:
            return NvmlCallError(fn, args, OTHER, None, f"{type(exc).__name__}: {exc}")
        return NvmlCallError(fn, args, classify(code), int(code), str(exc))

    def prefetch(self, groups: Sequence[Sequence[tuple[str, tuple]]], *, gated: bool | int = False,
                 stop_on_failure: bool = True, ends: frozenset[str] = frozenset()) -> None:
        """Make the calls of ``groups`` (each ``(function, args)``) on the worker in one hand-off, in
        order, and keep their answers for :meth:`call` to give out (once each) until the next
        prefetch.

        Why: a hand-off between threads per call was most of what a collection cost beyond the
        calls themselves, and under load each one waits for the scheduler
        (bench/bench_nvml_cost.py). The deadline stays per call: the batch may run as long as it
        keeps finishing calls, but a call (or a GPU handle lookup) that does not answer within
        ``call_timeout`` is abandoned with its worker, its GPU is marked hung, and the call gets
        ``hung``, as unbatched. The batch never calls past what the caller would have called: an
        answer of a failed-GPU class ends its group (and, with ``stop_on_failure``, the batch);
        ``gated`` (True, or the index of the first such group) makes the first call of each group
        its gate (an NVLink's state): a gate that errs ends the batch; a call of a function in ``ends``
        answered *not applicable* ends it too (the caller then asks something else: an older form of
        the call). Calls the batch did not make are made one by one when asked."""
        with self._lock:
            self._ready = {}
            if self._hung_global or not groups:
                return  # nothing to make: no hand-off
            inflight.enter(_Waiting(self, "nvmlInit", ()))  # a hung nvmlInit is named, as unbatched
            try:
                self._ensure_init()
            except NvmlCallError:
                return  # each call raises it when made
            finally:
                inflight.leave()
            # MIG instances' handles (rare) are looked up first, through the worker as ever; a GPU's
            # own handle is looked up inside the batch, when its first call needs it
            refused: dict[Any, NvmlCallError] = {}
            for group in groups:
                for _fn, args in group:
                    spec = args[0] if args else None
                    if type(spec) is str and ":mig" in spec and spec not in refused:
                        try:
                            self._device_handle(spec)
                        except NvmlCallError as exc:
                            refused[spec] = exc
            first_gated = (0 if gated is True else len(groups)) if isinstance(gated, bool) else int(gated)
            self._run_batch(groups, refused, first_gated, stop_on_failure, ends)

    def _run_batch(self, groups: Sequence[Sequence[tuple[str, tuple]]], refused: dict, first_gated: int,
                   stop_on_failure: bool, ends: frozenset[str] = frozenset()) -> None:
        ready: dict[tuple, tuple[Any, NvmlCallError | None]] = {}
        progress = _Progress()
        binding, handles, hung = self._binding, self._handles, self._hung_devices
        # per function: (binding function, GPU argument positions, whether it takes an output structure)
        known: dict[str, tuple[Any, tuple[int, ...], bool]] = {}

        def handle_of(spec: Any) -> Any:
            """A GPU's handle, looked up here (on the worker) the first time; a MIG instance's from
            the lookups made before the batch."""
            if isinstance(spec, str) and ":mig" in spec:
                if spec in refused:  # the lookup's own answer, for the first call that needed it
                    raise refused.pop(spec)
                try:
                    parent, slot = spec.split(":mig", 1)
                    return self._mig_handles[(int(parent), int(slot))]
                except (KeyError, ValueError):
                    raise NvmlCallError("nvmlDeviceGetMigDeviceHandleByIndex", (spec,), OTHER, None,
                                        "no handle for this MIG instance") from None
            found = handles.get(spec)
            if found is not None:
                return found
            # a hang here is the answer of the call that needed the handle (progress.charge)
            progress.charge = (progress.fn, progress.args)
            progress.fn, progress.args = "nvmlDeviceGetHandleByIndex", (spec,)
            progress.started = time.monotonic()
            try:
                found = binding.nvmlDeviceGetHandleByIndex(spec)
            except BaseException as exc:  # noqa: BLE001 - the call's answer, as unbatched
                raise self._error("nvmlDeviceGetHandleByIndex", (spec,), exc) from None
            finally:
                progress.fn, progress.args = progress.charge
                progress.charge = None
            if not progress.cancelled:
                handles[spec] = found
            return found

        def with_handles(args: tuple, positions: tuple[int, ...]) -> tuple | None:
            """GPU indices as handles, for a call naming its GPUs by index, none of them hung (else
            None: :meth:`_prepare` makes the call, or says why not)."""
            listed = list(args)
            for pos in positions:
                if pos < len(args):
                    index = args[pos]
                    if type(index) is not int or index in hung:
                        return None
                    handle = handles.get(index)
                    listed[pos] = handle if handle is not None else handle_of(index)
            return tuple(listed)

        def job() -> None:
            monotonic = time.monotonic
            for g, group in enumerate(groups):
                for n, (fn, args) in enumerate(group):
                    if progress.cancelled:
                        return
                    progress.fn, progress.args = fn, args
                    err: NvmlCallError | None = None
                    try:
                        info = known.get(fn)
                        if info is None:
                            info = known[fn] = (getattr(binding, fn, None),
                                                _DEVICE_ARGS.get(fn, _FIRST_ARG if fn.startswith("nvmlDevice") else ()),
                                                fn in _OUT_STRUCTS)
                        func, positions, has_struct = info
                        real: tuple | None = args
                        if func is None or has_struct:
                            real = None
                        elif positions is _FIRST_ARG and args:
                            # the usual call: one GPU, named by index first (no list built)
                            index = args[0]
                            if type(index) is int and index not in hung:
                                handle = handles.get(index)
                                real = (handle if handle is not None else handle_of(index), *args[1:])
                            else:
                                real = None
                        elif args:
                            real = with_handles(args, positions)
                        progress.started = monotonic()
                        value = func(*real) if real is not None else self._prepare(fn, args, handle_of)[0]()
                        if type(value) not in _PLAIN:
                            value = jsonify(value)
                    except NvmlCallError as exc:  # answered without a call, or a handle refused
                        value, err = None, exc
                    except BaseException as exc:  # noqa: BLE001 - filed as the call's answer
                        value, err = None, self._error(fn, args, exc)
                    if progress.cancelled:
                        return
                    try:
                        ready[(fn, args)] = (value, err)
                    except TypeError:  # a list argument (field ids)
                        ready[call_key(fn, args)] = (value, err)
                    if err is None:
                        continue
                    if n == 0 and g >= first_gated:
                        return  # the gate (an NVLink's state) erred: the walk ends here
                    if fn in ends and err.error_class in NOT_APPLICABLE_CLASSES:
                        return  # the caller asks an older form next, not what follows
                    if err.error_class in GPU_FAILED_CLASSES:
                        if stop_on_failure:
                            return
                        break

        if self._worker is None:
            self._worker = _Worker()
        inflight.enter(_Batch(progress))
        try:
            finished, box = self._worker.submit_watched(job, progress, self.call_timeout)
        finally:
            inflight.leave()
        if not finished:
            progress.cancelled = True
            self._worker = None
            fn, args = progress.fn, progress.args
            devices = [_parent_index(args[i]) for i in _DEVICE_ARGS.get(fn, (0,) if fn.startswith("nvmlDevice") else ())
                       if i < len(args)]
            if not devices:
                self._hung_global = True
            else:
                self._hung_devices.add(devices[0])
            # the call that was waiting gets it (a GPU's handle lookup hung: the call that needed it)
            ready[call_key(*(progress.charge or (fn, args)))] = (None, NvmlCallError(
                fn, args, HUNG, None, f"no answer within {self.call_timeout:g}s (driver hung?)"))
        self._ready = ready

    def shutdown(self) -> None:
        with self._lock:
            if self._initialised and not self._hung_global and not self._hung_devices:
                try:
                    self._run("nvmlShutdown", (), self._binding.nvmlShutdown, 2.0, None)
                except NvmlCallError:
                    pass
            self._initialised = False
