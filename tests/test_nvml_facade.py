"""The NVML facade (ccdiag.host.nvmlcall) against a fake binding module: error classes, deadlines on
hung calls, JSON results, and the nvml probe on top of a live host whose driver hangs on one GPU.

The fake stands in for ``pynvml``: functions named like the binding's, raising an exception whose
``.value`` is an NVML return code (as pynvml's NVMLError does). Its answers are SYNTHESIZED.
"""

from __future__ import annotations

import ctypes
import threading
import time

import pytest

from ccdiag.host import nvmlcall
from ccdiag.host.door import LiveHost
from ccdiag.host.nvmlcall import NvmlCallError, NvmlFacade, classify, jsonify
from ccdiag.probes import nvml as probe

TIMEOUT = 0.3
#: what the tests allow beyond a call deadline before calling it "did not return in time"
SLACK = 1.0

_FOREVER = threading.Event()  # never set: a call that waits on it blocks like a wedged driver


class FakeNVMLError(Exception):
    def __init__(self, value: int):
        super().__init__(f"NVML error {value}")
        self.value = value


class Handle:
    def __init__(self, index: int):
        self.index = index


class FakeBinding:
    """Just enough of pynvml: GPUs by handle, a per-GPU hang, per-call error codes."""

    def __init__(self, count: int = 3, hang_gpu: int | None = None, hang_fn: str = "nvmlDeviceGetName",
                 hang_global: bool = False, init_error: int | None = None, errors: dict | None = None):
        self.count = count
        self.hang_gpu = hang_gpu
        self.hang_fn = hang_fn
        self.hang_global = hang_global
        self.init_error = init_error
        self.errors = errors or {}
        self.calls: list[tuple] = []
        self.lock = threading.Lock()

    def _log(self, fn: str, *args) -> None:
        with self.lock:
            self.calls.append((fn, *[a.index if isinstance(a, Handle) else a for a in args]))
        code = self.errors.get(fn)
        if code is not None:
            raise FakeNVMLError(code)

    def _device(self, fn: str, handle: Handle, *rest):
        self._log(fn, handle, *rest)
        if handle.index == self.hang_gpu and fn == self.hang_fn:
            _FOREVER.wait()

    def nvmlInit(self):
        self._log("nvmlInit")
        if self.init_error is not None:
            raise FakeNVMLError(self.init_error)

    def nvmlShutdown(self):
        self._log("nvmlShutdown")

    def nvmlSystemGetDriverVersion(self):
        self._log("nvmlSystemGetDriverVersion")
        if self.hang_global:
            _FOREVER.wait()
        return "570.133.20"

    def nvmlSystemGetCudaDriverVersion_v2(self):
        self._log("nvmlSystemGetCudaDriverVersion_v2")
        return 12080

    def nvmlDeviceGetCount(self):
        self._log("nvmlDeviceGetCount")
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index):
        self._log("nvmlDeviceGetHandleByIndex", index)
        if index == self.hang_gpu and self.hang_fn == "nvmlDeviceGetHandleByIndex":
            _FOREVER.wait()
        if index >= self.count:
            raise FakeNVMLError(2)
        return Handle(index)

    def nvmlDeviceGetUUID(self, handle):
        self._device("nvmlDeviceGetUUID", handle)
        return f"GPU-00000000-0000-0000-0000-00000000000{handle.index}".encode()

    def nvmlDeviceGetName(self, handle):
        self._device("nvmlDeviceGetName", handle)
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetTemperature(self, handle, sensor):
        self._device("nvmlDeviceGetTemperature", handle, sensor)
        return 40 + handle.index

    def nvmlDeviceGetP2PStatus(self, a, b, cap):
        self._device("nvmlDeviceGetP2PStatus", a, b, cap)
        return 0


def facade(binding: FakeBinding) -> NvmlFacade:
    return NvmlFacade(binding=binding, call_timeout=TIMEOUT, init_timeout=TIMEOUT)


# -- classify -------------------------------------------------------------------------------------
@pytest.mark.parametrize("code,cls", [
    (1, nvmlcall.DRIVER_MISSING), (2, nvmlcall.INVALID_ARGUMENT), (3, nvmlcall.NOT_SUPPORTED),
    (4, nvmlcall.NO_PERMISSION), (6, nvmlcall.NOT_FOUND), (9, nvmlcall.DRIVER_MISSING),
    (10, nvmlcall.TIMEOUT), (12, nvmlcall.DRIVER_MISSING), (13, nvmlcall.NOT_SUPPORTED),
    (15, nvmlcall.GPU_LOST), (16, nvmlcall.RESET_REQUIRED), (999, nvmlcall.UNKNOWN_ERROR),
    (7, nvmlcall.OTHER), (None, nvmlcall.OTHER),
])
def test_classify(code, cls):
    assert classify(code) == cls


def test_classes_are_disjoint():
    sets = (nvmlcall.NOT_APPLICABLE_CLASSES, nvmlcall.UNKNOWN_CLASSES, nvmlcall.GPU_FAILED_CLASSES)
    for a in sets:
        for b in sets:
            if a is not b:
                assert not (a & b)
    assert nvmlcall.HUNG in nvmlcall.GPU_FAILED_CLASSES


@pytest.mark.parametrize("code,cls", [(3, nvmlcall.NOT_SUPPORTED), (4, nvmlcall.NO_PERMISSION),
                                      (15, nvmlcall.GPU_LOST), (999, nvmlcall.UNKNOWN_ERROR)])
def test_binding_error_becomes_its_class(code, cls):
    f = facade(FakeBinding(errors={"nvmlDeviceGetName": code}))
    with pytest.raises(NvmlCallError) as info:
        f.call("nvmlDeviceGetName", 0)
    assert (info.value.error_class, info.value.code) == (cls, code)
    assert f.call("nvmlDeviceGetUUID", 0).startswith("GPU-")  # one error is not sticky


def test_function_missing_from_the_binding_is_not_supported():
    with pytest.raises(NvmlCallError) as info:
        facade(FakeBinding()).call("nvmlDeviceGetGpuFabricInfoV", 0)
    assert (info.value.error_class, info.value.code) == (nvmlcall.NOT_SUPPORTED, 13)


def test_init_failure_is_driver_missing_and_not_retried():
    b = FakeBinding(init_error=12)
    f = facade(b)
    for _ in range(3):
        with pytest.raises(NvmlCallError) as info:
            f.call("nvmlSystemGetDriverVersion")
        assert info.value.error_class == nvmlcall.DRIVER_MISSING
    assert [c for c in b.calls if c[0] == "nvmlInit"] == [("nvmlInit",)]
    assert not [c for c in b.calls if c[0] == "nvmlSystemGetDriverVersion"]


def test_results_are_json_and_devices_are_indices():
    b = FakeBinding()
    f = facade(b)
    assert f.call("nvmlDeviceGetName", 2) == "NVIDIA H100 80GB HBM3"  # bytes -> str
    assert f.call("nvmlDeviceGetTemperature", 1, 0) == 41
    assert f.call("nvmlDeviceGetP2PStatus", 0, 2, 4) == 0
    assert ("nvmlDeviceGetP2PStatus", 0, 2, 4) in b.calls  # both GPU arguments became handles
    assert [c for c in b.calls if c[0] == "nvmlDeviceGetHandleByIndex"] == [
        ("nvmlDeviceGetHandleByIndex", 2), ("nvmlDeviceGetHandleByIndex", 1), ("nvmlDeviceGetHandleByIndex", 0)]


# -- deadlines ----------------------------------------------------------------------------------------
def test_hung_gpu_call_returns_hung_in_time_and_later_calls_fail_fast():
    b = FakeBinding(hang_gpu=1)
    f = facade(b)
    start = time.monotonic()
    with pytest.raises(NvmlCallError) as info:
        f.call("nvmlDeviceGetName", 1)
    assert time.monotonic() - start < TIMEOUT + SLACK
    assert info.value.error_class == nvmlcall.HUNG

    start = time.monotonic()
    with pytest.raises(NvmlCallError) as info:
        f.call("nvmlDeviceGetUUID", 1)
    assert info.value.error_class == nvmlcall.HUNG
    assert time.monotonic() - start < TIMEOUT  # answered without asking the driver
    assert ("nvmlDeviceGetUUID", 1) not in b.calls

    # another GPU still answers, on a fresh worker
    assert f.call("nvmlDeviceGetName", 2) == "NVIDIA H100 80GB HBM3"
    assert f.call("nvmlSystemGetDriverVersion") == "570.133.20"
    f.shutdown()
    assert ("nvmlShutdown",) not in b.calls  # never shut down a library with a stuck thread in it


def test_hung_handle_lookup_marks_that_gpu():
    f = facade(FakeBinding(hang_gpu=0, hang_fn="nvmlDeviceGetHandleByIndex"))
    with pytest.raises(NvmlCallError) as info:
        f.call("nvmlDeviceGetUUID", 0)
    assert info.value.error_class == nvmlcall.HUNG
    assert f.call("nvmlDeviceGetUUID", 1).endswith("1")


def test_global_hang_marks_everything_hung():
    b = FakeBinding(hang_global=True)
    f = facade(b)
    start = time.monotonic()
    with pytest.raises(NvmlCallError) as info:
        f.call("nvmlSystemGetDriverVersion")
    assert info.value.error_class == nvmlcall.HUNG and time.monotonic() - start < TIMEOUT + SLACK
    for fn, args in (("nvmlDeviceGetUUID", (0,)), ("nvmlDeviceGetCount", ()), ("nvmlDeviceGetName", (2,))):
        start = time.monotonic()
        with pytest.raises(NvmlCallError) as info:
            f.call(fn, *args)
        assert info.value.error_class == nvmlcall.HUNG and time.monotonic() - start < TIMEOUT
    assert not [c for c in b.calls if c[0] in ("nvmlDeviceGetUUID", "nvmlDeviceGetCount")]


# -- jsonify ----------------------------------------------------------------------------------------
class _Inner(ctypes.Structure):
    _fields_ = [("a", ctypes.c_uint), ("b", ctypes.c_double)]


class _Outer(ctypes.Structure):
    _fields_ = [("_busId", ctypes.c_char * 16), ("inner", _Inner), ("arr", ctypes.c_uint8 * 3),
                ("count", ctypes.c_ulonglong)]


def test_jsonify_ctypes_structures():
    s = _Outer()
    s._busId = b"0000:18:00.0"
    s.inner.a = 7
    s.inner.b = 1.5
    s.arr[1] = 9
    s.count = 2**40
    assert jsonify(s) == {"busId": "0000:18:00.0", "inner": {"a": 7, "b": 1.5}, "arr": [0, 9, 0], "count": 2**40}
    assert jsonify((1, b"x\x00", [ctypes.c_int(3)])) == [1, "x", [3]]


def test_jsonify_real_binding_structures():
    pynvml = pytest.importorskip("pynvml")
    info = pynvml.nvmlPciInfo_t()
    info.busId = b"00000000:18:00.0"
    info.bus = 0x18
    j = jsonify(info)
    assert j["busId"] == "00000000:18:00.0" and j["bus"] == 24
    assert probe.parse_pci_bus_id(j) == "0000:18:00.0"
    values = (pynvml.c_nvmlFieldValue_t * 1)()
    values[0].fieldId = 230
    values[0].valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    values[0].value.uiVal = 3
    assert probe.parse_field_values(jsonify(values)) == {230: (0, 3)}


# -- the probe over a live host with a fake driver --------------------------------------------------
def test_probe_on_live_host_with_a_hung_gpu():
    b = FakeBinding(count=3, hang_gpu=1)
    host = LiveHost(nvml_binding=b, nvml_call_timeout=TIMEOUT)
    try:
        start = time.monotonic()
        obs = probe.collect(host)
        elapsed = time.monotonic() - start
    finally:
        host.close()
    # one deadline for the hung GPU (its other calls fail fast), plus slack for the rest
    assert elapsed < TIMEOUT + 5 * SLACK
    assert obs.driver_version == "570.133.20" and obs.cuda_driver_version == "12.8" and obs.device_count == 3
    hung = obs.gpus[1]
    assert hung.failed == nvmlcall.HUNG
    assert hung.uuid.endswith("1") and hung.name is None  # the UUID came before the hang
    assert [(e.source, e.kind) for e in hung.errors] == [("nvmlDeviceGetName(1)", nvmlcall.HUNG)]
    for g in (obs.gpus[0], obs.gpus[2]):
        assert g.failed is None and g.name == "NVIDIA H100 80GB HBM3" and g.uuid.startswith("GPU-")
        assert g.temperature_c == 40.0 + g.index
        assert g.nvlinks == () and g.errors == ()  # absent from the fake binding: not supported
    assert [(p.gpu_a, p.gpu_b, p.read) for p in obs.p2p] == [(0, 2, "OK"), (2, 0, "OK")]
    # nothing more was asked of GPU 1 after it hung
    asked_after = [c for c in b.calls if c[0] not in ("nvmlDeviceGetHandleByIndex",) and len(c) > 1 and c[1] == 1
                   and c[0] != "nvmlDeviceGetP2PStatus"]
    assert asked_after == [("nvmlDeviceGetUUID", 1), ("nvmlDeviceGetName", 1)]


def test_probe_on_live_host_without_library():
    host = LiveHost(nvml_binding=FakeBinding(init_error=12), nvml_call_timeout=TIMEOUT)
    with pytest.raises(Exception) as info:
        probe.collect(host)
    assert type(info.value).__name__ == "ProbeUnavailable"
    assert "NVML library not found" in str(info.value)


# Output structures (fabric info) are tested below the binding, where pointer passing is visible:
# tests/test_nvml_seam.py. A fake of the Python binding cannot tell a pointer from a value.


def test_a_mig_instance_is_addressed_by_its_gpu_and_slot():
    """``"1:mig2"`` becomes the instance handle from nvmlDeviceGetMigDeviceHandleByIndex(GPU1, 2);
    the handle is asked for once."""

    class Mig(Handle):
        def __init__(self, parent: int, slot: int):
            super().__init__(parent)
            self.slot = slot

    class WithMig(FakeBinding):
        def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, slot):
            self._log("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
            return Mig(handle.index, slot)

        def nvmlDeviceGetRemappedRows(self, handle):
            self._log("nvmlDeviceGetRemappedRows", handle)
            assert isinstance(handle, Mig)
            return (0, 1, handle.slot == 2, False)

    b = WithMig(count=2)
    f = NvmlFacade(binding=b, call_timeout=TIMEOUT)
    assert f.call("nvmlDeviceGetRemappedRows", "1:mig2") == [0, 1, True, False]
    assert f.call("nvmlDeviceGetRemappedRows", "1:mig2") == [0, 1, True, False]
    assert [c for c in b.calls if c[0] == "nvmlDeviceGetMigDeviceHandleByIndex"] == \
        [("nvmlDeviceGetMigDeviceHandleByIndex", 1, 2)]


# -- batches (prefetch): one hand-off for many calls, the same answers and the same deadlines -------
class RecordedBinding:
    """pynvml answering what synthesized records say (an error as its NVML code), logging each call."""

    def __init__(self, records: list[dict]):
        self.answers = {(r["call"][0], repr(list(r["call"][1:]))): r for r in records if r.get("epoch", 0) == 0}
        self.calls: list[tuple] = []

    def nvmlInit(self):
        self.calls.append(("nvmlInit",))

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, index):
        self.calls.append(("nvmlDeviceGetHandleByIndex", index))
        return Handle(index)

    def __getattr__(self, fn):
        if not fn.startswith("nvml"):
            raise AttributeError(fn)

        def stub(*args):
            plain = [a.index if isinstance(a, Handle) else a for a in args]
            self.calls.append((fn, *[tuple(a) if isinstance(a, list) else a for a in plain]))
            rec = self.answers.get((fn, repr(plain)))
            if rec is None:
                raise FakeNVMLError(3)
            if "error" in rec:
                raise FakeNVMLError(rec.get("code") or 999)
            return rec["ok"]

        return stub


def _scenarios():
    import dataclasses

    from synth.nvml import err, h100_node

    lost = h100_node(4)
    lost[2] = dataclasses.replace(lost[2], overrides={"nvmlDeviceGetSerial": err(nvmlcall.GPU_LOST)})
    late_loss = h100_node(3)
    late_loss[1] = dataclasses.replace(late_loss[1], overrides={("nvmlDeviceGetNvLinkErrorCounter", 5, 0):
                                                                err(nvmlcall.GPU_LOST)})
    return {
        "healthy": h100_node(4),
        "gpu lost on its third call": lost,
        "gpu lost inside its NVLink walk": late_loss,
        "link 3 state unknown": h100_node(2, overrides={("nvmlDeviceGetNvLinkState", 3): err(nvmlcall.NO_PERMISSION)}),
        "old driver": h100_node(2, overrides={"nvmlDeviceGetCurrentClocksEventReasons": err(nvmlcall.NOT_SUPPORTED, code=13),
                                              "nvmlDeviceGetGpuFabricInfoV": err(nvmlcall.NOT_SUPPORTED, code=13)}),
        "pre-Ampere retired pages": h100_node(2, retired_pages=(2, 1), retired_pages_pending=True, remapped_rows=None),
        "MIG instances": h100_node(1, mig_mode=(True, True), mig_remapped_rows={0: (1, 0, False, False)}),
        "not permitted": h100_node(2, overrides={"nvmlDeviceGetSerial": err(nvmlcall.NO_PERMISSION),
                                                 "nvmlDeviceGetPowerUsage": err(nvmlcall.NO_PERMISSION)}),
        "a value of the wrong shape": h100_node(1, overrides={"nvmlDeviceGetTemperature": "hot"}),
    }


@pytest.mark.parametrize("name", list(_scenarios()))
def test_calls_told_ahead_give_the_same_reading_from_the_same_calls(name):
    """The probe tells the facade what it will ask; the observation, and every call the driver sees
    (in order), are those of the calls made one by one."""
    from synth.nvml import nvml_records

    records = nvml_records(_scenarios()[name])
    batched, one_by_one = RecordedBinding(records), RecordedBinding(records)
    fast = LiveHost(nvml_binding=batched, nvml_call_timeout=5.0)
    slow = LiveHost(nvml_binding=one_by_one, nvml_call_timeout=5.0)
    slow.nvml_prefetch = None  # the probe then asks one call at a time
    try:
        assert probe.collect(fast) == probe.collect(slow)
    finally:
        fast.close()
        slow.close()
    assert batched.calls == one_by_one.calls
    assert len(batched.calls) > 50


def test_a_call_that_hangs_inside_a_batch_is_hung_in_time_and_nothing_after_it_is_called():
    b = FakeBinding(count=3, hang_gpu=1, hang_fn="nvmlDeviceGetName")
    f = facade(b)
    start = time.monotonic()
    f.prefetch([[("nvmlDeviceGetUUID", (1,)), ("nvmlDeviceGetName", (1,)), ("nvmlDeviceGetTemperature", (1, 0))]])
    assert time.monotonic() - start < TIMEOUT + SLACK
    assert f.call("nvmlDeviceGetUUID", 1).endswith("1")  # answered before the hang: kept
    with pytest.raises(NvmlCallError) as info:
        f.call("nvmlDeviceGetName", 1)
    assert info.value.error_class == nvmlcall.HUNG and "no answer within" in info.value.message
    with pytest.raises(NvmlCallError) as info:
        f.call("nvmlDeviceGetTemperature", 1, 0)
    assert info.value.error_class == nvmlcall.HUNG and "not called again" in info.value.message
    assert ("nvmlDeviceGetTemperature", 1, 0) not in b.calls
    assert f.call("nvmlDeviceGetTemperature", 2, 0) == 42  # another GPU, on a fresh worker


def test_a_handle_lookup_that_hangs_inside_a_batch_is_the_first_calls_answer():
    f = facade(FakeBinding(count=3, hang_gpu=0, hang_fn="nvmlDeviceGetHandleByIndex"))
    f.prefetch([[("nvmlDeviceGetUUID", (0,)), ("nvmlDeviceGetName", (0,))]])
    with pytest.raises(NvmlCallError) as info:
        f.call("nvmlDeviceGetUUID", 0)
    assert info.value.error_class == nvmlcall.HUNG and info.value.fn == "nvmlDeviceGetHandleByIndex"
    assert f.call("nvmlDeviceGetUUID", 1).endswith("1")


def test_a_gate_that_errs_ends_the_batch_and_an_answer_is_given_once():
    b = FakeBinding(count=2, errors={"nvmlDeviceGetTemperature": 3})  # the gate: not supported
    f = facade(b)
    f.prefetch([[("nvmlDeviceGetName", (0,))], [("nvmlDeviceGetTemperature", (0, 0)), ("nvmlDeviceGetUUID", (0,))],
                [("nvmlDeviceGetTemperature", (0, 1))]], gated=1)
    assert [c for c in b.calls if c[0] != "nvmlDeviceGetHandleByIndex"] == [
        ("nvmlInit",), ("nvmlDeviceGetName", 0), ("nvmlDeviceGetTemperature", 0, 0)]
    assert f.call("nvmlDeviceGetName", 0) == "NVIDIA H100 80GB HBM3"
    with pytest.raises(NvmlCallError) as info:
        f.call("nvmlDeviceGetTemperature", 0, 0)
    assert info.value.error_class == nvmlcall.NOT_SUPPORTED
    f.call("nvmlDeviceGetName", 0)  # asked again: called again, not the kept answer
    assert [c[0] for c in b.calls].count("nvmlDeviceGetName") == 2


@pytest.mark.parametrize("code, goes_on", [(3, False), (13, False), (4, True)])
def test_a_call_in_ends_answered_not_applicable_ends_the_batch(code, goes_on):
    """The probe asks an older form of the call next when one in ``ends`` is not applicable, so the
    batch stops there; any other answer (not permitted) changes nothing that follows."""
    b = FakeBinding(count=2, errors={"nvmlDeviceGetTemperature": code})
    f = facade(b)
    f.prefetch([[("nvmlDeviceGetName", (0,)), ("nvmlDeviceGetTemperature", (0, 0)), ("nvmlDeviceGetUUID", (0,))]],
               ends=frozenset({"nvmlDeviceGetTemperature"}))
    made = [c for c in b.calls if c[0] not in ("nvmlInit", "nvmlDeviceGetHandleByIndex")]
    assert made == [("nvmlDeviceGetName", 0), ("nvmlDeviceGetTemperature", 0, 0)] + (
        [("nvmlDeviceGetUUID", 0)] if goes_on else [])


def test_a_call_with_nested_list_arguments_is_answered_from_its_batch_once():
    """The NVLink counters are asked for as ``[[field, link], ...]``: the batch's answer is found
    for them, not made a second time."""
    request = [[138, 0], [139, 0]]
    b = RecordedBinding([{"call": ["nvmlDeviceGetFieldValues", 0, request], "ok": [7, 8]}])
    f = facade(b)
    f.prefetch([[("nvmlDeviceGetFieldValues", (0, request))]])
    assert f.call("nvmlDeviceGetFieldValues", 0, [[138, 0], [139, 0]]) == [7, 8]
    assert [c[0] for c in b.calls].count("nvmlDeviceGetFieldValues") == 1
