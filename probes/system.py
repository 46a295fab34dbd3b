"""The node around the GPUs: kernel, OS, CPUs and NUMA, modules, fabric manager, limits, IOMMU.

Why these facts: each is a known cause of slow or failing collectives that no GPU counter shows.
``nvidia_peermem`` not loaded disables GPUDirect RDMA; a stopped ``nvidia-fabricmanager`` leaves
NVSwitch systems without NVLink P2P; a small ``/dev/shm`` breaks NCCL's shared-memory transport in
containers; a low memlock limit makes RDMA memory registration fail; an IOMMU in translated mode
slows or breaks P2P DMA. Which kernel module flavour is loaded (the open GPU kernel modules), the
kernel and the rdma-core release decide whether GPUDirect RDMA can go over DMA-BUF instead of
``nvidia_peermem``; ``/etc/nccl.conf`` says which path NCCL is told to take. All are read from /proc,
/sys and the file system without root.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from ccdiag.host.door import NOT_RUN_UNDER_ROOT, Host, HostReadError
from ccdiag.core.readings import ReadError
from ccdiag.probes.registry import PROBE_SYSTEM, probe
from ccdiag.probes._sysfs import attr, decimal, listing, read_error

NAME = PROBE_SYSTEM
TIMEOUT_S = 8.0

FABRIC_MANAGER_ARGV = ("systemctl", "is-active", "nvidia-fabricmanager")
IMEX_ARGV = ("systemctl", "is-active", "nvidia-imex")
IMEX_CHANNELS = "/dev/nvidia-caps-imex-channels"


@dataclass(frozen=True)
class NumaNode:
    node: int
    cpulist: str | None = None  # "0-47,96-143"


@dataclass(frozen=True)
class SystemObservation:
    hostname: str | None = None
    kernel: str | None = None
    os_release: str | None = None  # PRETTY_NAME
    cpu_count: int | None = None
    numa_nodes: tuple[NumaNode, ...] = ()
    modules: tuple[str, ...] = ()  # loaded module names from /proc/modules
    nvidia_driver_version: str | None = None  # /proc/driver/nvidia/version or module version
    fabric_manager: str | None = None  # systemctl is-active nvidia-fabricmanager: "active", ...
    shm_bytes: int | None = None  # size of /dev/shm
    memlock_soft_bytes: int | None = None  # None with memlock_unlimited True means unlimited
    memlock_hard_bytes: int | None = None
    memlock_unlimited: bool | None = None
    iommu: str | None = None  # "off" | "passthrough" | "translated" | None when unknown
    cmdline: str | None = None
    environ: dict[str, str] | None = None  # NCCL_*/CUDA_* seen by the run
    errors: tuple[ReadError, ...] = ()
    #: "open" | "proprietary": which NVIDIA kernel module is loaded (the /proc/driver/nvidia/version
    #: banner); GPUDirect RDMA over DMA-BUF needs the open GPU kernel modules
    nvidia_module_flavor: str | None = None
    rdma_core_version: int | None = None  # from libibverbs.so.1's file name (libibverbs.so.1.14.<N>.0)
    libibverbs_path: str | None = None  # the libibverbs.so.1 that was read
    nccl_conf_text: str | None = None  # /etc/nccl.conf as NCCL reads it (None: no file)
    #: IMEX (multi-node NVLink memory sharing, GB200/GB300): systemctl is-active nvidia-imex, whether the
    #: driver registered the channel device (/proc/devices "nvidia-caps-imex-channels"), and the
    #: channel nodes administrators create (/dev/nvidia-caps-imex-channels/channelN; None: no directory)
    imex_service: str | None = None
    imex_channel_device: bool | None = None
    imex_channels: tuple[str, ...] | None = None
    #: the NCCL the node's library directory holds (libnccl.so.2 -> libnccl.so.2.<minor>.<patch>), and
    #: the fabric manager's own version (`nv-fabricmanager --version`, read where its service is
    #: active): both belong to a node class's known-good set
    nccl_version: str | None = None
    nccl_library: str | None = None
    fabric_manager_version: str | None = None


# -- parsers (pure) ------------------------------------------------------------------------------
def cpulist_cpus(text: str | None, max_cpu: int = 65535) -> set[int]:
    """The CPUs of a kernel cpulist ("0-3,8" -> {0, 1, 2, 3, 8}); parts that are not numbers, and
    CPUs above ``max_cpu``, are left out (a damaged file cannot make a huge set)."""
    out: set[int] = set()
    for part in (text or "").split(","):
        lo, _, hi = part.strip().partition("-")
        try:
            first, last = int(lo), int(hi or lo)
        except ValueError:
            continue
        if 0 <= first <= last:
            out.update(range(first, min(last, max_cpu) + 1))
    return out


def parse_cpulist(text: str | None) -> int | None:
    """Number of CPUs in a kernel cpulist ("0-47,96-143" -> 96); None when unparseable."""
    if text is None or not text.strip():
        return None
    count = 0
    for part in text.strip().split(","):
        lo, sep, hi = part.partition("-")
        try:
            first = int(lo)
            count += (int(hi) - first + 1) if sep else 1
        except ValueError:
            return None
    return count


def parse_cpuinfo_count(text: str) -> int | None:
    """Number of "processor" entries in /proc/cpuinfo."""
    n = sum(1 for line in text.splitlines() if re.match(r"^processor\s*:", line))
    return n or None


def parse_os_release(text: str) -> str | None:
    """PRETTY_NAME from os-release (quotes removed)."""
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "PRETTY_NAME":
            return value.strip().strip("\"'") or None
    return None


def parse_modules(text: str) -> tuple[str, ...]:
    """Loaded module names, first field of each /proc/modules line, in file order."""
    return tuple(line.split()[0] for line in text.splitlines() if line.strip())


def parse_nvidia_version(text: str) -> str | None:
    """Driver version from /proc/driver/nvidia/version ("... Kernel Module  535.104.05  ...",
    "... Open Kernel Module for x86_64  570.158.01  Release Build ...")."""
    m = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    return m.group(1) if m else None


def parse_module_flavor(text: str) -> str | None:
    """"open" when /proc/driver/nvidia/version names the open GPU kernel modules ("NVRM version:
    NVIDIA UNIX Open Kernel Module for x86_64  570.158.01 ..."), "proprietary" for any other NVIDIA
    kernel module banner, None when the text is not a banner."""
    if "Open Kernel Module" in text:
        return "open"
    return "proprietary" if "Kernel Module" in text else None


#: where distributions put libibverbs (Debian/Ubuntu multiarch, RHEL/SUSE lib64)
LIBIBVERBS = ("/usr/lib/x86_64-linux-gnu/libibverbs.so.1", "/usr/lib/aarch64-linux-gnu/libibverbs.so.1",
              "/usr/lib64/libibverbs.so.1", "/lib/x86_64-linux-gnu/libibverbs.so.1",
              "/lib/aarch64-linux-gnu/libibverbs.so.1", "/usr/lib/libibverbs.so.1")


def parse_libibverbs_target(name: str) -> int | None:
    """The rdma-core release of a libibverbs file name: rdma-core names its library
    ``libibverbs.so.1.<ABI>.<release>.0`` ("libibverbs.so.1.14.44.0" is rdma-core 44)."""
    m = re.search(r"libibverbs\.so\.1\.[0-9]{1,3}\.([0-9]{2,3})\.[0-9]{1,3}$", name.strip())
    return int(m.group(1)) if m else None


#: where the distributions' NCCL packages (libnccl2, libnccl) install the library's soname link
LIBNCCL = ("/usr/lib/x86_64-linux-gnu/libnccl.so.2", "/usr/lib/aarch64-linux-gnu/libnccl.so.2", "/usr/lib64/libnccl.so.2",
           "/usr/local/cuda/lib64/libnccl.so.2", "/usr/lib/libnccl.so.2")
#: the fabric manager's version query; it prints "Fabric Manager version is : 535.161.08"
FABRIC_MANAGER_VERSION_ARGV = ("nv-fabricmanager", "--version")


def parse_libnccl_target(name: str) -> str | None:
    """The NCCL release of a library file name: NCCL's packages name it ``libnccl.so.<major>.<minor>.<patch>``
    ("libnccl.so.2.18.3" is NCCL 2.18.3) and link ``libnccl.so.2`` to it."""
    m = re.search(r"libnccl\.so\.([0-9]{1,2}\.[0-9]{1,3}\.[0-9]{1,3})$", name.strip())
    return m.group(1) if m else None


def parse_fabric_manager_version(text: str) -> str | None:
    """The version in ``nv-fabricmanager --version``'s answer ("Fabric Manager version is : 535.161.08")."""
    m = re.search(r"Fabric Manager version is\s*:\s*([0-9][0-9A-Za-z.\-]*)", text)
    return m.group(1) if m else None


#: RLIM_INFINITY as a number: ``~0UL`` (16 EiB - 1) on most architectures, ``LONG_MAX`` on a few
#: (include/uapi/asm-generic/resource.h, arch/mips); a limit at or above it is no limit
RLIM_INFINITY_VALUES = (2**64 - 1, 2**63 - 1)


def _is_unlimited(s: str) -> bool:
    value = decimal(s)
    return s == "unlimited" or s == "infinity" or (value is not None and value in RLIM_INFINITY_VALUES)


def parse_memlock(text: str) -> tuple[int | None, int | None, bool | None]:
    """(soft, hard, unlimited) from /proc/<pid>/limits' "Max locked memory" line. A limit that
    reads "unlimited" (or RLIM_INFINITY written as its number, 18446744073709551615) is None with
    ``unlimited`` True when the soft limit is: a finite soft limit is what registration runs into."""
    for line in text.splitlines():
        if line.startswith("Max locked memory"):
            fields = line[len("Max locked memory"):].split()
            if len(fields) < 2:
                return None, None, None

            def value(s: str) -> int | None:
                return None if _is_unlimited(s) else decimal(s)

            soft, hard = value(fields[0]), value(fields[1])
            return soft, hard, _is_unlimited(fields[0])
    return None, None, None


def iommu_mode(cmdline: str | None, class_entries: list[str] | None, group_type: str | None) -> str | None:
    """"off" | "passthrough" | "translated" | None.

    The default domain type of an IOMMU group ("identity" = passthrough, "DMA"/"DMA-FQ" =
    translated) is the kernel's own answer; without it, /sys/class/iommu entries say whether an
    IOMMU is active and the command line says whether it was set to passthrough.
    """
    if group_type:
        t = group_type.strip()
        if t == "identity":
            return "passthrough"
        if t.startswith("DMA"):
            return "translated"
    args = (cmdline or "").split()
    if any(a in ("iommu=off", "intel_iommu=off", "amd_iommu=off") for a in args):
        return "off"
    if class_entries is None:
        return None
    if not class_entries:
        return "off"
    if "iommu=pt" in args or "iommu.passthrough=1" in args:
        return "passthrough"
    return "translated"


# -- reading -------------------------------------------------------------------------------------
def _text(host: Host, path: str, errors: list[ReadError], optional: bool = True) -> str | None:
    try:
        return host.read_text(path)
    except HostReadError as exc:
        if not (optional and exc.kind == "missing"):
            errors.append(read_error(exc))
        return None


def _numa_nodes(host: Host, errors: list[ReadError]) -> tuple[NumaNode, ...]:
    base = "/sys/devices/system/node"
    nodes = []
    for name in listing(host, base, errors) or []:
        m = re.fullmatch(r"node(\d+)", name)
        if m:
            nodes.append(NumaNode(int(m.group(1)), attr(host, f"{base}/{name}/cpulist", errors)))
    return tuple(sorted(nodes, key=lambda n: n.node))


def _cpu_count(host: Host, errors: list[ReadError]) -> int | None:
    online = attr(host, "/sys/devices/system/cpu/online", errors)
    count = parse_cpulist(online)
    if online and count is None:
        errors.append(ReadError("/sys/devices/system/cpu/online", "parse", f"not a cpulist: {online[:40]!r}"))
    if count is None:
        text = _text(host, "/proc/cpuinfo", errors)
        count = parse_cpuinfo_count(text) if text else None
    return count


def _fabric_manager(host: Host, errors: list[ReadError], argv: tuple[str, ...] = FABRIC_MANAGER_ARGV) -> str | None:
    result = host.run(list(argv), timeout=5)
    if result.error is not None or result.timed_out:
        if result.error not in ("not found", NOT_RUN_UNDER_ROOT):  # no systemd (containers), a tree: unknown
            errors.append(ReadError(" ".join(argv), "command", result.describe()))
        return None
    # is-active exits non-zero for inactive/failed/unknown units and prints the state anyway
    state = result.stdout.strip().splitlines()
    return state[0].strip() if state and state[0].strip() else None


def _iommu(host: Host, cmdline: str | None, errors: list[ReadError]) -> str | None:
    group_type = None
    groups = listing(host, "/sys/kernel/iommu_groups")
    if groups:
        first = sorted(groups, key=lambda g: (len(g), g))[0]
        group_type = attr(host, f"/sys/kernel/iommu_groups/{first}/type", errors)
    return iommu_mode(cmdline, listing(host, "/sys/class/iommu"), group_type)


def _linked_release(host: Host, links: tuple[str, ...], parse: Callable[[str], Any],
                    errors: list[ReadError]) -> tuple[Any, str | None]:
    """(the release ``parse`` reads from the first of ``links`` that exists, that link): a library's
    release as its distribution package names the file the link points to."""
    for path in links:
        try:
            target = host.read_link(path)
        except HostReadError as exc:
            if exc.kind != "missing":
                errors.append(read_error(exc))
            continue
        return parse(target), path
    return None, None


def _rdma_core(host: Host, errors: list[ReadError]) -> tuple[int | None, str | None]:
    """(rdma-core release, the libibverbs read) from where the distribution links libibverbs.so.1."""
    return _linked_release(host, LIBIBVERBS, parse_libibverbs_target, errors)


def _nccl(host: Host, errors: list[ReadError]) -> tuple[str | None, str | None]:
    """(NCCL release, the library link read) from where the distribution's NCCL package links it."""
    return _linked_release(host, LIBNCCL, parse_libnccl_target, errors)


def _fabric_manager_version(host: Host, state: str | None, errors: list[ReadError]) -> str | None:
    if state != "active":
        return None  # asked only where the service runs: NVSwitch systems
    result = host.run(list(FABRIC_MANAGER_VERSION_ARGV), timeout=5)
    if result.error is not None or result.timed_out:
        if result.error not in ("not found", NOT_RUN_UNDER_ROOT, "not recorded in snapshot"):
            errors.append(ReadError(" ".join(FABRIC_MANAGER_VERSION_ARGV), "command", result.describe()))
        return None
    return parse_fabric_manager_version(result.stdout + result.stderr)


def _imex(host: Host, errors: list[ReadError]) -> tuple[bool | None, tuple[str, ...] | None]:
    """(the driver registered the IMEX channel device, the channel nodes that exist)."""
    devices = _text(host, "/proc/devices", errors)
    registered = None if devices is None else any(
        line.split()[-1:] == ["nvidia-caps-imex-channels"] for line in devices.splitlines())
    channels = None
    if host.exists(IMEX_CHANNELS):
        channels = tuple(sorted(listing(host, IMEX_CHANNELS, errors) or ()))
    return registered, channels


@probe(order=10, what="modules, fabric manager, limits")
def collect(host: Host) -> SystemObservation:
    """Facts about the node; every one may be None with the reason beside it."""
    errors: list[ReadError] = []
    try:
        meta = host.meta() or {}
    except Exception:  # noqa: BLE001 - metadata is a convenience, never a reason to fail
        meta = {}
    kernel = attr(host, "/proc/sys/kernel/osrelease", errors) or meta.get("kernel")
    os_text = _text(host, "/etc/os-release", errors) or _text(host, "/usr/lib/os-release", errors)
    modules_text = _text(host, "/proc/modules", errors, optional=False)
    nv_text = _text(host, "/proc/driver/nvidia/version", errors)
    nv_version = parse_nvidia_version(nv_text) if nv_text else None
    flavor = parse_module_flavor(nv_text) if nv_text else None
    rdma_core, libibverbs = _rdma_core(host, errors)
    nccl_version, nccl_library = _nccl(host, errors)
    fabric_manager = _fabric_manager(host, errors)
    nccl_conf = _text(host, "/etc/nccl.conf", errors)
    imex_device, imex_channels = _imex(host, errors)
    if nv_version is None:
        nv_version = attr(host, "/sys/module/nvidia/version", errors)
    shm = None
    try:
        shm = int(host.statvfs("/dev/shm")["total_bytes"])
    except HostReadError as exc:
        errors.append(read_error(exc))
    except (KeyError, TypeError, ValueError) as exc:
        errors.append(ReadError("/dev/shm", "parse", f"statvfs result unusable: {exc}"))
    limits = _text(host, "/proc/self/limits", errors, optional=False)
    soft, hard, unlimited = parse_memlock(limits) if limits else (None, None, None)
    cmdline = attr(host, "/proc/cmdline", errors)
    try:
        environ = dict(host.environ())
    except Exception as exc:  # noqa: BLE001
        errors.append(ReadError("environ", "io", str(exc)))
        environ = None
    return SystemObservation(
        hostname=meta.get("hostname"), kernel=kernel,
        os_release=parse_os_release(os_text) if os_text else None,
        cpu_count=_cpu_count(host, errors), numa_nodes=_numa_nodes(host, errors),
        modules=parse_modules(modules_text) if modules_text else (),
        nvidia_driver_version=nv_version, fabric_manager=fabric_manager,
        shm_bytes=shm, memlock_soft_bytes=soft, memlock_hard_bytes=hard, memlock_unlimited=unlimited,
        iommu=_iommu(host, cmdline, errors), cmdline=cmdline, environ=environ, errors=tuple(errors),
        nvidia_module_flavor=flavor, rdma_core_version=rdma_core, libibverbs_path=libibverbs,
        nccl_conf_text=nccl_conf[:65536] if nccl_conf is not None else None,
        imex_service=_fabric_manager(host, errors, IMEX_ARGV) if imex_device else None,
        imex_channel_device=imex_device, imex_channels=imex_channels,
        nccl_version=nccl_version, nccl_library=nccl_library,
        fabric_manager_version=_fabric_manager_version(host, fabric_manager, errors),
    )
