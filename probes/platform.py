"""Where the node runs: cloud provider and instance type, container, NCCL network plugins, EFA
devices, and the provider's NCCL topology files.

Why: NCCL advice that holds on bare metal is wrong on clouds. Azure's ND VMs hide the PCIe switches
and ship a topology file (``/opt/microsoft/ndv*-topo.xml``) that must stay; AWS EFA needs the
aws-ofi-nccl plugin and its libfabric settings; Google's A3 VMs need the GPUDirect-TCPX(O) plugin and
the NCCL settings Google documents with it. The probe reads only what the host door serves under its
root: DMI identity files (``/sys/class/dmi/id/*``), ``/proc/1/cgroup``, ``/.dockerenv``,
``/run/.containerenv``, the library directories where network plugins live (``libnccl-net*.so``),
``/sys/class/infiniband`` (EFA devices are named ``efa_*``), the ``NCCL_*`` environment, and the
topology files named by ``NCCL_TOPO_FILE`` (environment or ``/etc/nccl.conf``) or shipped by the
provider. Parsing is apart from reading (:func:`classify`, :func:`container_kind`).

Identity strings (each provider's documentation of what its VMs report in DMI): Azure
``sys_vendor`` "Microsoft Corporation" with chassis asset tag 7783-7084-3265-9085-8269-3286-77;
AWS Nitro ``sys_vendor`` "Amazon EC2" with the instance type as ``product_name``; Google
``product_name`` "Google Compute Engine"; Oracle ``chassis_asset_tag`` "OracleCloud.com".

The instance type: from DMI where it is there (AWS); else, only when DMI names Azure, Google or
Oracle, from that cloud's instance metadata service through the door
(:meth:`ccdiag.host.door.LiveHost.cloud_metadata`: one link-local read of about a second at most, recorded
in snapshots, never asked under ``--root`` or on replay; endpoints, headers and fields with their
sources in :mod:`ccdiag.host.imds`). ``instance_type_source`` says which: ``dmi``, ``imds`` or ``unknown``
(with ``instance_type_error`` saying why).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ccdiag.host.door import Host, HostReadError
from ccdiag.core.probenames import PROBE_PLATFORM
from ccdiag.probes._sysfs import attr, listing, read_error
from ccdiag.probes.registry import probe
from ccdiag.core.readings import ReadError

NAME = PROBE_PLATFORM
TIMEOUT_S = 3.0

DMI = "/sys/class/dmi/id"
DMI_FIELDS = ("sys_vendor", "product_name", "product_version", "board_vendor", "chassis_asset_tag", "bios_vendor")
AZURE_ASSET_TAG = "7783-7084-3265-9085-8269-3286-77"
#: where network plugins are installed by the providers' images and NVIDIA's containers
PLUGIN_DIRS = ("/usr/lib", "/usr/lib64", "/usr/local/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
               "/opt/amazon/ofi-nccl/lib", "/opt/amazon/ofi-nccl/lib64", "/opt/aws-ofi-nccl/lib",
               "/opt/amazon/aws-ofi-nccl/lib", "/usr/local/nvidia/lib64", "/var/lib/tcpxo/lib64",
               "/usr/local/tcpx/lib64", "/opt/hpcx/nccl_rdma_sharp_plugin/lib")
#: topology files the providers ship (Azure HPC images)
PROVIDER_TOPO_DIRS = ("/opt/microsoft",)
MAX_TOPO_BYTES = 1 << 20


@dataclass(frozen=True)
class TopoFile:
    path: str
    text: str | None  # None when it could not be read (see errors)
    named_by: str  # "NCCL_TOPO_FILE (environment)", "/etc/nccl.conf", "provider directory"


@dataclass(frozen=True)
class PlatformObservation:
    dmi: dict
    provider: str | None  # "azure" | "aws" | "gcp" | "oci" | None (bare metal, or not recognised)
    instance_type: str | None  # from DMI (AWS) or the cloud's metadata service (Azure, GCP, OCI); None when unknown
    container: str | None  # "docker" | "kubernetes" | "podman" | "containerd" | "lxc" | None
    net_plugin_env: str | None  # NCCL_NET_PLUGIN
    net_plugins: tuple[str, ...] = ()  # paths of libnccl-net*.so found
    efa_devices: tuple[str, ...] = ()
    topo_files: tuple[TopoFile, ...] = ()
    errors: tuple[ReadError, ...] = ()
    instance_type_source: str = "unknown"  # "dmi" | "imds" | "unknown"
    instance_type_error: str | None = None  # why it is unknown on a cloud (the metadata service's failure)
    #: the DMI field that named the provider ("chassis_asset_tag", "sys_vendor", ...), None when none did: with
    #: provider and instance_type, the derived identity a redacted snapshot must keep to replay as the same cloud
    identified_by: str | None = None


# -- parsers (pure) ------------------------------------------------------------------------------
def identified_by(dmi: dict) -> str | None:
    """The DMI field whose documented value named the provider (what :func:`classify` decided on)."""
    vendor = (dmi.get("sys_vendor") or "").strip()
    if (dmi.get("chassis_asset_tag") or "").strip() in (AZURE_ASSET_TAG, "OracleCloud.com"):
        return "chassis_asset_tag"
    if vendor in ("Microsoft Corporation", "Amazon EC2", "Google"):
        return "sys_vendor"
    if (dmi.get("bios_vendor") or "").strip() == "Amazon EC2":
        return "bios_vendor"
    if (dmi.get("product_name") or "").strip() == "Google Compute Engine":
        return "product_name"
    return None


def classify(dmi: dict) -> tuple[str | None, str | None]:
    """(provider, instance type) from DMI identity strings."""
    vendor = (dmi.get("sys_vendor") or "").strip()
    product = (dmi.get("product_name") or "").strip()
    tag = (dmi.get("chassis_asset_tag") or "").strip()
    bios = (dmi.get("bios_vendor") or "").strip()
    if tag == AZURE_ASSET_TAG or (vendor == "Microsoft Corporation" and product == "Virtual Machine"):
        return "azure", None
    if vendor == "Amazon EC2" or bios == "Amazon EC2":
        return "aws", product if re.fullmatch(r"[a-z][a-z0-9-]*\.[a-z0-9]+", product) else None
    if product == "Google Compute Engine" or vendor == "Google":
        return "gcp", None
    if tag == "OracleCloud.com":
        return "oci", None
    return None, None


#: the clouds whose instance type only their metadata service gives (:mod:`ccdiag.host.imds`)
IMDS_PROVIDERS = ("azure", "gcp", "oci")
_AZURE_SIZE = re.compile(r"[A-Za-z][A-Za-z0-9_-]{1,80}")
_GCP_TYPE = re.compile(r"projects/[^/\s]+/machineTypes/([a-z0-9][a-z0-9-]{0,62})")
_OCI_SHAPE = re.compile(r"[A-Za-z][A-Za-z0-9.\-]{1,80}")


def instance_type_from_imds(provider: str, text: str) -> str | None:
    """The instance type in a metadata service's answer (Azure ``vmSize`` "Standard_ND96isr_H100_v5",
    Google ``machine-type`` "projects/NUM/machineTypes/a3-megagpu-8g", Oracle ``shape``
    "BM.GPU.H100.8"), or None when the answer is not one."""
    t = text.strip()
    if provider == "gcp":
        m = _GCP_TYPE.fullmatch(t)
        return m.group(1) if m else None
    pattern = _AZURE_SIZE if provider == "azure" else _OCI_SHAPE if provider == "oci" else None
    return t if pattern is not None and pattern.fullmatch(t) else None


def container_kind(cgroup: str | None, dockerenv: bool, containerenv: bool) -> str | None:
    """The container runtime visible from inside, or None on the host."""
    text = cgroup or ""
    if "kubepods" in text:
        return "kubernetes"
    if containerenv or "libpod" in text:
        return "podman"
    if dockerenv or "/docker" in text:
        return "docker"
    if "containerd" in text:
        return "containerd"
    if "/lxc" in text:
        return "lxc"
    return None


def conf_value(text: str, name: str) -> str | None:
    """``NAME=value`` from an nccl.conf, read as NCCL reads it (:mod:`ccdiag.probes._ncclconf`)."""
    from ccdiag.probes._ncclconf import parse_nccl_conf

    return parse_nccl_conf(text).get(name)


# -- reading -------------------------------------------------------------------------------------
def _dmi(host: Host, errors: list[ReadError]) -> dict:
    return {f: attr(host, f"{DMI}/{f}", errors) for f in DMI_FIELDS}


def provider_of(host: Host) -> str | None:
    """The cloud a host runs on, from its DMI identity alone (what :func:`collect` reads first):
    for callers that need only that, such as the cross-host benchmarks' flow limits."""
    return classify(_dmi(host, []))[0]


def _text(host: Host, path: str, errors: list[ReadError], max_bytes: int = 64 << 10) -> str | None:
    try:
        return host.read_text(path, max_bytes)
    except HostReadError as exc:
        if exc.kind != "missing":
            errors.append(read_error(exc))
        return None


def _plugins(host: Host, errors: list[ReadError]) -> tuple[str, ...]:
    found = []
    for d in PLUGIN_DIRS:
        for name in listing(host, d, errors) or []:
            if name.startswith("libnccl-net") and ".so" in name:
                found.append(f"{d}/{name}")
    return tuple(sorted(set(found)))


def _topo_files(host: Host, env: dict, conf: str | None, errors: list[ReadError]) -> tuple[TopoFile, ...]:
    named: dict[str, str] = {}
    if env.get("NCCL_TOPO_FILE"):
        named[env["NCCL_TOPO_FILE"]] = "NCCL_TOPO_FILE (environment)"
    conf_path = conf_value(conf, "NCCL_TOPO_FILE") if conf else None
    if conf_path:
        named.setdefault(conf_path, "/etc/nccl.conf")
    for d in PROVIDER_TOPO_DIRS:
        for name in listing(host, d, errors) or []:
            if name.endswith(".xml") and "topo" in name:
                named.setdefault(f"{d}/{name}", "provider directory")
    return tuple(TopoFile(p, _text(host, p, errors, MAX_TOPO_BYTES), why) for p, why in sorted(named.items()))


def _instance_type(host: Host, provider: str | None, from_dmi: str | None) -> tuple[str | None, str, str | None]:
    """(instance type, where it came from, why unknown): DMI first; the metadata service only on a
    cloud DMI names whose type only that service gives."""
    if from_dmi:
        return from_dmi, "dmi", None
    if provider not in IMDS_PROVIDERS:
        return None, "unknown", None
    try:
        text = host.cloud_metadata(provider)
    except HostReadError as exc:
        return None, "unknown", f"{provider} instance metadata service: {exc.message}"
    found = instance_type_from_imds(provider, text)
    if found is None:
        return None, "unknown", f"{provider} instance metadata service answered {text.strip()[:80]!r}, not an instance type"
    return found, "imds", None


@probe(order=80, what="platform, container and NCCL network plugins")
def collect(host: Host) -> PlatformObservation:
    errors: list[ReadError] = []
    dmi = _dmi(host, errors)
    provider, from_dmi = classify(dmi)
    instance, instance_source, instance_error = _instance_type(host, provider, from_dmi)
    container = container_kind(_text(host, "/proc/1/cgroup", errors), host.exists("/.dockerenv"),
                               host.exists("/run/.containerenv"))
    try:
        env = host.environ() or {}
    except Exception:  # noqa: BLE001 - a door without an environment (an old snapshot): nothing set
        env = {}
    conf = _text(host, "/etc/nccl.conf", errors)
    efa = tuple(sorted(n for n in (listing(host, "/sys/class/infiniband", errors) or []) if n.startswith("efa")))
    return PlatformObservation(dmi=dmi, provider=provider, instance_type=instance, container=container,
                               net_plugin_env=env.get("NCCL_NET_PLUGIN"), net_plugins=_plugins(host, errors),
                               efa_devices=efa, topo_files=_topo_files(host, env, conf, errors),
                               errors=tuple(errors), instance_type_source=instance_source,
                               instance_type_error=instance_error,
                               identified_by=identified_by(dmi) if provider else None)
