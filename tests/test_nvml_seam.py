"""The NVML facade and probe driven through the real ``pynvml`` wrapper, against a stand-in for
the NVML shared library at the C ABI (tests/nvml_abi.py; its GPUs are SYNTHESIZED).

Test doubles of the *Python* binding (tests/test_nvml_facade.py) cannot see how arguments reach
the driver: a structure handed over by value instead of by pointer looks fine to them and gives a
real driver garbage. Here every call goes through pynvml's own argument marshalling into C
function pointers declared with nvml.h's prototypes, which refuse arguments of the wrong kind, and
every answer comes back through the caller's memory.
"""

from __future__ import annotations

import ctypes
import inspect
import re

import pytest

import nvml_abi as abi_mod
from ccdiag.host.door import LiveHost
from ccdiag.host.nvmlcall import NvmlFacade
from ccdiag.probes import nvml as probe

BUS = ("00000000:18:00.0", "00000000:2A:00.0")


def _abi(**per_gpu):
    gpus = [abi_mod.AbiGpu(f"GPU-5eam{i:04d}-0000-0000-0000-000000000000", bus) for i, bus in enumerate(BUS)]
    for i, changes in per_gpu.items():
        for k, v in changes.items():
            setattr(gpus[int(i[1:])], k, v)
    return abi_mod.NvmlAbi(gpus)


def _collect(monkeypatch, abi):
    pynvml = abi_mod.install(monkeypatch, abi)
    facade = NvmlFacade(binding=pynvml, call_timeout=5.0)
    try:
        return probe.collect(LiveHost("/", nvml=facade))
    finally:
        facade.shutdown()


def _c_symbol(wrapper_name: str, depth: int = 0) -> str | None:
    """The C function a pynvml wrapper calls, read from the wrapper's own source (following one
    delegation such as nvmlDeviceGetComputeRunningProcesses -> ..._v3)."""
    import pynvml

    func = getattr(pynvml, wrapper_name, None)
    if func is None:
        return None
    src = inspect.getsource(inspect.unwrap(func))
    m = re.search(r'_nvmlGetFunctionPointer\("(\w+)"\)', src)
    if m:
        return m.group(1)
    m = re.search(r"return (nvml\w+)\(", src)
    if m and depth < 2:
        return _c_symbol(m.group(1), depth + 1)
    m = re.search(r"\b(nvml\w+)\(", src.split(":", 1)[1])  # nvmlInit -> nvmlInitWithFlags(0)
    return _c_symbol(m.group(1), depth + 1) if m and depth < 2 else None


def _probe_calls() -> set[str]:
    """Every NVML function the probe module names (it calls the facade with these names)."""
    src = inspect.getsource(probe)
    return set(re.findall(r'"(nvml(?:Device|System)\w+)"', src))


def test_every_nvml_call_the_probe_makes_has_a_c_function_in_the_seam():
    implemented = abi_mod.c_prototype_names()
    missing = {}
    for name in sorted(_probe_calls()):
        sym = _c_symbol(name)
        if sym is None or sym not in implemented:
            missing[name] = sym
    # the throttle-reason fallback and the pre-V fabric call only run on drivers lacking the newer
    # calls; they go through the same marshalling as their successors
    missing.pop("nvmlDeviceGetCurrentClocksThrottleReasons", None)
    missing.pop("nvmlDeviceGetGpuFabricInfo", None)
    missing.pop("nvmlDeviceGetRetiredPagesPendingStatus", None)
    assert missing == {}, "NVML calls without a stand-in C function (add them to tests/nvml_abi.py)"


def test_the_probe_reads_two_gpus_through_the_c_abi_without_a_marshalling_error(monkeypatch):
    abi = _abi()
    obs = _collect(monkeypatch, abi)
    assert (obs.driver_version, obs.device_count, obs.cuda_driver_version) == ("570.133.20", 2, "12.8")
    for g, bus in zip(obs.gpus, BUS):
        assert g.failed is None and g.bus_id == bus[4:].lower()
        assert (g.name, g.persistence_mode, g.ecc_mode_current, g.mig_mode_current) == \
            ("NVIDIA H100 80GB HBM3", True, True, False)
        assert (g.pcie_gen_current, g.pcie_width_max, g.temperature_c, g.power_w) == (5, 16, 33.0, 71.5)
        assert g.vbios_version == "96.00.51.00.0E"  # a text buffer through the C ABI, as the serial
        kinds = {e.kind for e in g.errors}
        # only "not supported" answers (retired pages on a row-remapping GPU); no marshalling error
        assert kinds <= {"not_supported"}, [(e.source, e.kind, e.message) for e in g.errors]
    assert obs.errors == ()
    called = set(abi.called)
    probe_c_calls = {_c_symbol(n) for n in _probe_calls()} - {None}
    only_sometimes = {"nvmlDeviceGetCurrentClocksThrottleReasons", "nvmlDeviceGetGpuFabricInfo",
                      "nvmlDeviceGetRetiredPagesPendingStatus",
                      "nvmlDeviceGetMaxMigDeviceCount"}  # asked only of a GPU in MIG mode
    assert called >= probe_c_calls - only_sometimes


def test_fabric_info_reaches_the_driver_by_pointer_with_its_layout_version(monkeypatch):
    """The driver writes into the caller's nvmlGpuFabricInfo_v2_t; passed by value it cannot."""
    obs = _collect(monkeypatch, _abi(g1={"fabric_state": 2, "fabric_health_mask": 0x2A}))
    assert [(g.fabric_state, g.fabric_health_mask) for g in obs.gpus] == [("completed", 0x0A), ("in_progress", 0x2A)]
    assert obs.gpus[0].fabric_status == "success"
    assert not [e for g in obs.gpus for e in g.errors if "Fabric" in e.source]


def test_nvlink_throughput_fields_are_read_per_link_scope(monkeypatch):
    obs = _collect(monkeypatch, _abi())
    links = obs.gpus[0].nvlinks
    assert [l.link for l in links] == [0, 1] and all(l.active for l in links)
    # the stand-in answers 1000*k + link for field 137+k; the probe turns KiB counters into bytes
    assert [(l.tx_bytes, l.rx_bytes) for l in links] == [(1000 * 1024, 2000 * 1024), (1001 * 1024, 2001 * 1024)]
    assert {l.remote_device_type for l in links} == {"switch"}


def test_a_process_with_memory_not_available_reads_as_unknown_memory(monkeypatch):
    obs = _collect(monkeypatch, _abi(g0={"processes": ((4242, 1 << 30), (4343, None))}))
    assert [(p.pid, p.used_memory_bytes) for p in obs.gpus[0].compute_processes] == [(4242, 1 << 30), (4343, None)]
    assert obs.gpus[1].compute_processes == ()


@pytest.mark.parametrize("fn,code,error_class", [
    ("nvmlDeviceGetUUID", 15, "gpu_lost"),           # NVML_ERROR_GPU_IS_LOST
    ("nvmlDeviceGetUUID", 999, "unknown_error"),     # NVML_ERROR_UNKNOWN
    ("nvmlDeviceGetName", 16, "reset_required"),     # NVML_ERROR_RESET_REQUIRED
])
def test_a_failing_gpu_is_marked_and_the_other_still_read(monkeypatch, fn, code, error_class):
    obs = _collect(monkeypatch, _abi(g1={"fail": {fn: code}}))
    assert obs.gpus[0].failed is None and obs.gpus[0].uuid.startswith("GPU-5eam0000")
    assert obs.gpus[1].failed == error_class
    assert any(e.kind == error_class and fn in e.source for e in obs.gpus[1].errors)
    assert obs.p2p == ()  # P2P is only asked between GPUs that answer


@pytest.mark.parametrize("code,recorded", [
    (4, ["no_permission"]),  # NVML_ERROR_NO_PERMISSION: unknown, filed on the GPU, never a value
    (3, []),                 # NVML_ERROR_NOT_SUPPORTED: the GPU has no such value: absent, not an error
])
def test_per_field_errors_keep_their_class(monkeypatch, code, recorded):
    obs = _collect(monkeypatch, _abi(g0={"fail": {"nvmlDeviceGetSerial": code}}))
    g = obs.gpus[0]
    assert g.serial is None and g.failed is None
    assert [e.kind for e in g.errors if "Serial" in e.source] == recorded
    assert obs.gpus[1].serial == "1650000000001"


def test_driver_not_loaded_at_init_is_the_probe_being_unavailable(monkeypatch):
    abi = _abi()
    init = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint)(lambda flags: 9)  # NVML_ERROR_DRIVER_NOT_LOADED
    abi.functions["nvmlInitWithFlags"] = init
    with pytest.raises(probe.ProbeUnavailable, match="driver not loaded"):
        _collect(monkeypatch, abi)


def test_by_value_structures_are_refused_at_the_boundary(monkeypatch):
    """The seam itself: what the old facade did (a structure by value) cannot pass unnoticed."""
    pynvml = abi_mod.install(monkeypatch, _abi())
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    info = pynvml.c_nvmlGpuFabricInfoV_t()
    with pytest.raises(ctypes.ArgumentError):
        pynvml.nvmlDeviceGetGpuFabricInfoV(handle, info)
    pynvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
    assert info.state == 3 and info.healthMask == 0x0A
