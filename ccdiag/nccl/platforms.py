"""The NCCL settings each cloud provider documents per instance type, and how a node's platform is
identified; a provider's documented setting is kept and labelled, never advised away.

Why: NCCL's guide calls ``NCCL_ALGO``, ``NCCL_PROTO`` or ``NCCL_NET_GDR_LEVEL`` debugging variables, and
ccdiag advises removing them on bare metal; but Google's GPUDirect-TCPX(O) and gIB environments set
them on purpose, Azure's ND images write ``NCCL_TOPO_FILE`` because the VM's PCI tree hides which NIC
sits beside which GPU, Oracle's cluster images pin the RoCE GID index and traffic class. And what one
instance type needs can break another: ``FI_EFA_USE_DEVICE_RDMA=1`` (for EFA with GPUDirect RDMA on
p4d/p5) aborts the ranks on a g5, whose EFA has no RDMA; ``NCCL_NET=gIB`` (A3 Ultra, A4) finds no network
on an A3 High; Oracle's A100 shapes use four queue pairs per connection, its H100 shapes one.

The table, ``ccdiag/data/nccl_platforms.json``, lists per instance type (AWS per family, GCP A3
High/Mega/Ultra, A4, A4X, Azure NDv4/NDv5/ND H200 v5/ND GB200 v6, OCI per BM.GPU shape, CoreWeave) the
documented settings with their sources, what the provider's network plugin sets by itself (aws-ofi-nccl,
from its source), and settings harmful there. :func:`identify` names the platform: from DMI and the
instance metadata service (``probes/platform.py``), from the provider's own files (Azure's
``/opt/microsoft/ndv*`` topology files), from the plugin's own variables (``NCCL_FASTRAK_*``,
``NCCL_GPUDIRECTTCPX_*``, the gIB tuner path), or by the user (``ccdiag nccl --platform``); a node whose
DMI names a hardware vendor, or whose PCI tree shows its switches, is bare metal; anything else is
*unidentified*, and then nothing is advised away.

A value of ``None`` means "node-specific, keep what is set" (interface names, file paths).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any
from xml.etree import ElementTree as ET

DATA = "nccl_platforms.json"
#: DMI vendors of hypervisors: a VM whose cloud is not known is not bare metal
HYPERVISORS = ("qemu", "kvm", "vmware", "xen", "innotek", "red hat", "openstack", "bochs", "parallels", "bhyve",
               "nutanix", "microsoft corporation", "amazon", "google", "oracle", "alibaba", "tencent")


@dataclass(frozen=True)
class Platform:
    key: str
    title: str
    provider: str
    instance_types: tuple[re.Pattern, ...]
    settings: Mapping[str, str | None]  # variable -> documented value (None: node-specific)
    sources: tuple[str, ...]
    alternatives: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    plugin: str | None = None
    plugin_sets: Mapping[str, str] = field(default_factory=dict)
    efa: Mapping[str, Any] | None = None
    harmful: Mapping[str, str] = field(default_factory=dict)
    identify: tuple[str, ...] = ("dmi", "imds")
    notes: str = ""

    @property
    def required(self) -> Mapping[str, str | None]:
        """The documented settings (the name the recommender used before the table had more fields)."""
        return self.settings

    @property
    def source(self) -> str:
        return "; ".join(self.sources)

    def documents(self, name: str, value: str) -> bool:
        """Whether ``name=value`` is what the provider documents here (or one of its other documented values)."""
        want = self.settings.get(name)
        return want is None or value == want or value in self.alternatives.get(name, ())


@functools.lru_cache(maxsize=1)
def table() -> tuple[Platform, ...]:
    raw = json.loads(resources.files("ccdiag.data").joinpath(DATA).read_text(encoding="utf-8"))
    return tuple(Platform(p["key"], p["title"], p["provider"], tuple(re.compile(t) for t in p["instance_types"]),
                          dict(p["settings"]), tuple(p["sources"]),
                          {k: tuple(v) for k, v in p.get("alternatives", {}).items()}, p.get("plugin"),
                          dict(p.get("plugin_sets") or {}), p.get("efa"), dict(p.get("harmful") or {}),
                          tuple(p.get("identify") or ("dmi", "imds")), p.get("notes", ""))
                 for p in raw["platforms"])


@functools.lru_cache(maxsize=1)
def by_key() -> dict[str, Platform]:
    return {p.key: p for p in table()}


#: the table by key (the name callers used before the table was data)
PLATFORMS = by_key()


def for_instance(provider: str | None, instance_type: str | None) -> Platform | None:
    """The table's entry for an instance type of a provider."""
    if not instance_type:
        return None
    for p in table():
        if (provider is None or p.provider == provider) and any(rx.search(instance_type) for rx in p.instance_types):
            return p
    return None


@dataclass(frozen=True)
class Identity:
    """What the node is, and how that was decided."""

    kind: str  # "cloud" | "bare-metal" | "unknown"
    how: str  # in words: "DMI (Amazon EC2, p5.48xlarge)", "the provider's topology file ...", "unidentified: ..."
    provider: str | None = None
    instance_type: str | None = None
    platform: Platform | None = None

    @property
    def label(self) -> str:
        if self.platform is not None:
            return self.platform.title
        if self.provider:
            return f"{self.provider}" + (f" {self.instance_type}" if self.instance_type else " (instance type unknown)")
        return "bare metal" if self.kind == "bare-metal" else "unidentified platform"

    def to_json(self) -> dict:
        return {"kind": self.kind, "how": self.how, "provider": self.provider, "instance_type": self.instance_type,
                "platform": self.platform.key if self.platform else None}


def _plugin_paths(obs: Any) -> str:
    return " ".join(getattr(obs, "net_plugins", ()) or ()) + " " + (getattr(obs, "net_plugin_env", None) or "")


def _from_environment(obs: Any, env: Mapping[str, str]) -> tuple[Platform, str] | None:
    """A platform its network plugin's own variables or files name."""
    paths = _plugin_paths(obs)
    if any(k.startswith("NCCL_FASTRAK_") for k in env) or "tcpxo" in paths or "fastrak" in paths:
        return by_key()["gcp-a3-mega"], "GPUDirect-TCPXO's own variables or plugin (NCCL_FASTRAK_*, /var/lib/tcpxo)"
    if any(k.startswith("NCCL_GPUDIRECTTCPX_") for k in env) or "/tcpx/" in paths:
        return by_key()["gcp-a3-high"], "GPUDirect-TCPX's own variables or plugin (NCCL_GPUDIRECTTCPX_*, /usr/local/tcpx)"
    tuner = env.get("NCCL_TUNER_CONFIG_PATH", "")
    if "/gib/" in tuner or "/gib/" in paths:
        key = "gcp-a3-ultra" if "a3u" in tuner else "gcp-a4" if "a4" in tuner else None
        if key:
            return by_key()[key], f"the gIB plugin's tuner configuration ({tuner})"
    return None


def _from_tree(obs: Any) -> tuple[Platform, str] | None:
    """Azure from the topology files its images ship in /opt/microsoft."""
    for f in getattr(obs, "topo_files", ()) or ():
        m = re.match(r"/opt/microsoft/(ndv[45])", f.path)
        if m:
            return by_key()[f"azure-{m.group(1)}"], f"the provider's topology file {f.path}"
    return None


def _named_platform(named: str) -> Identity:
    """The platform the user named (``ccdiag nccl --platform``): taken as given, an unknown key refused."""
    plat = by_key().get(named)
    if plat is None:
        raise KeyError(named)
    return Identity("cloud", f"named with --platform {named}", plat.provider, None, plat)


def _from_instance(obs: Any) -> Identity | None:
    """A cloud instance type the table lists, as DMI and the metadata service name it."""
    provider = getattr(obs, "provider", None)
    itype = getattr(obs, "instance_type", None)
    plat = for_instance(provider, itype)
    if plat is None:
        return None
    source = getattr(obs, "instance_type_source", "dmi")
    field_ = getattr(obs, "identified_by", None)
    via = f"DMI {field_}" if field_ else "DMI"
    return Identity("cloud", f"{provider} from {via}, {itype} from {source}", provider, itype, plat)


def _from_plugin_or_files(obs: Any, env: Mapping[str, str]) -> Identity | None:
    """A platform its network plugin's variables or the provider's files name, unless DMI names another
    provider (a copied environment on a different cloud is not that cloud)."""
    provider = getattr(obs, "provider", None)
    shaped = _from_environment(obs, env) or _from_tree(obs)
    if shaped is None or (provider is not None and shaped[0].provider != provider):
        return None
    return Identity("cloud", shaped[1], shaped[0].provider, getattr(obs, "instance_type", None), shaped[0])


def _unlisted_cloud(obs: Any) -> Identity | None:
    """A cloud VM (a provider in DMI, or EFA devices, which only AWS has) whose instance type the table does
    not list or nobody could read: a cloud, but with no documented settings to keep."""
    provider = getattr(obs, "provider", None)
    if provider is None and not getattr(obs, "efa_devices", ()):
        return None
    itype = getattr(obs, "instance_type", None)
    prov = provider or "aws"
    why = f"{prov} from DMI" if provider else "aws from its EFA devices"
    err = getattr(obs, "instance_type_error", None)
    return Identity("cloud", why + (f"; instance type {itype} is not in the table" if itype else
                                    "; instance type unknown" + (f" ({err})" if err else "")), prov, itype)


def _bare_metal_or_unknown(obs: Any, flattened: bool) -> Identity:
    """No cloud: bare metal when DMI names a hardware vendor or the PCI tree shows its switches (a VM's tree
    is flattened); else unidentified, so that nothing is advised away."""
    dmi = getattr(obs, "dmi", {}) or {}
    vendor = (dmi.get("sys_vendor") or dmi.get("board_vendor") or "").strip()
    if vendor and not any(h in vendor.lower() for h in HYPERVISORS):
        return Identity("bare-metal", f"DMI names the hardware vendor {vendor}")
    if not flattened and obs is not None:
        return Identity("bare-metal", "the PCI tree shows its switches (not a VM's flattened tree)" +
                        (f"; DMI says {vendor}" if vendor else "; no DMI identity"))
    return Identity("unknown", "unidentified: no DMI identity of a cloud or hardware vendor" +
                    (f" ({vendor})" if vendor else "") + (" and a VM's flattened PCI tree" if flattened else ""))


def identify(obs: Any, env: Mapping[str, str], flattened: bool = False, named: str | None = None) -> Identity:
    """The node's platform: named by the user, else DMI/IMDS, the plugin's variables, the provider's files;
    bare metal when DMI names a hardware vendor or the PCI tree shows its switches; else unidentified.
    The ways are tried in that order (``obs`` None: nothing was probed)."""
    if named:
        return _named_platform(named)
    return (_from_instance(obs) or _from_plugin_or_files(obs, env) or _unlisted_cloud(obs)
            or _bare_metal_or_unknown(obs, flattened))


def detect(obs: Any, env: Mapping[str, str]) -> Platform | None:
    """The platform whose documented settings apply (:func:`identify` without the tree's shape)."""
    return identify(obs, env).platform


def required_here(platform: Platform | None, name: str) -> bool:
    return platform is not None and name in platform.settings


def documented_elsewhere(name: str, here: Platform | None) -> list[Platform]:
    """The platforms that document ``name`` other than ``here``."""
    return [p for p in table() if p is not here and name in p.settings]


# -- a provider's topology file against the node ---------------------------------------------------------
def _norm_bdf(bdf: str) -> str:
    b = bdf.lower()
    return b if b.count(":") == 2 else "0000:" + b


@dataclass(frozen=True)
class TopoFileCheck:
    path: str
    readable: bool
    gpus_missing: tuple[str, ...] = ()  # node GPU bus ids absent from the file
    nics_missing: tuple[str, ...] = ()
    pairs: Mapping[str, tuple[str, ...]] | None = None  # GPU bus id -> NIC bus ids under the same parent
    disagree: tuple[str, ...] = ()  # GPUs whose pairing contradicts the node's own nearest NIC


def file_pairs(text: str) -> tuple[set[str], set[str], dict[str, tuple[str, ...]]]:
    """(GPU bus ids, NIC bus ids, GPU -> NICs sharing its parent element) of an NCCL topology XML."""
    root = ET.fromstring(text)
    parent: dict[ET.Element, ET.Element] = {c: p for p in root.iter() for c in p}
    gpus, nics = {}, {}
    for pci in root.iter("pci"):
        bus = pci.get("busid")
        if not bus:
            continue
        if pci.find("gpu") is not None:
            gpus[_norm_bdf(bus)] = parent.get(pci)
        elif pci.find("nic") is not None:
            nics[_norm_bdf(bus)] = parent.get(pci)
    pairs = {g: tuple(sorted(n for n, pn in nics.items() if pn is not None and pn is gp)) for g, gp in gpus.items()}
    return set(gpus), set(nics), pairs


def check_topo_file(path: str, text: str | None, gpu_bdfs: Mapping[str, str | None],
                    nic_bdfs: Mapping[str, str | None],
                    nearest: Mapping[str, tuple[str, ...]] | None) -> TopoFileCheck:
    """``gpu_bdfs``/``nic_bdfs``: label -> bus id on the node (None where unknown: not looked for in the
    file); ``nearest``: GPU label -> NIC labels the
    node's own tree puts nearest (None when the tree cannot tell, as in a flattened VM)."""
    if text is None:
        return TopoFileCheck(path, False)
    try:
        fg, fn, pairs = file_pairs(text)
    except ET.ParseError:
        return TopoFileCheck(path, False)
    gm = tuple(sorted(g for g, b in gpu_bdfs.items() if b and _norm_bdf(b) not in fg))
    nm = tuple(sorted(n for n, b in nic_bdfs.items() if b and _norm_bdf(b) not in fn))
    disagree = []
    if nearest:
        by_bdf = {_norm_bdf(b): n for n, b in nic_bdfs.items() if b}
        for g, near in nearest.items():
            b = gpu_bdfs.get(g)
            filed = {by_bdf.get(x) for x in pairs.get(_norm_bdf(b), ())} if b else set()
            if near and filed and not filed & set(near):
                disagree.append(g)
    return TopoFileCheck(path, True, gm, nm, pairs, tuple(disagree))


__all__ = ["Identity", "PLATFORMS", "Platform", "TopoFileCheck", "by_key", "check_topo_file", "detect", "documented_elsewhere",
           "file_pairs", "for_instance", "identify", "required_here", "table"]
