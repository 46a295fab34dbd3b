"""The NCCL settings each cloud vendor documents as required on its GPU VMs, with sources.

Why: NCCL's guide calls ``NCCL_ALGO``, ``NCCL_PROTO`` or ``NCCL_NET_GDR_LEVEL`` debugging variables,
and ccdiag advises removing them on bare metal; but Google's GPUDirect-TCPX(O) environment sets
them on purpose, and Azure's ND VMs need the provider's ``NCCL_TOPO_FILE`` because the VM's PCI
tree hides which NIC sits beside which GPU. On a detected platform these settings are kept and
labelled "vendor-required", never advised away.

A value of ``None`` means "node-specific, keep what is set" (interface names, file paths).

Sources (facts carried over, not text):

* Azure ND A100 v4 / ND H100 v5 / ND H200 v5: the Azure HPC images set ``NCCL_TOPO_FILE`` to
  ``/opt/microsoft/ndv4-topo.xml`` / ``ndv5-topo.xml`` in ``/etc/nccl.conf`` (Azure/azhpc-images
  SKU customisation; https://jingchaozhang.github.io/Decoding-Azure-NCCL-Topology-Files/). A stale or
  foreign topology file is a known failure (Azure/azurehpc-health-checks#142), hence the check
  against the node in :func:`check_topo_file`.
* AWS EFA (p4d, p5, p5e/p5en): NCCL goes through the aws-ofi-nccl plugin with libfabric's ``efa``
  provider; ``FI_PROVIDER=efa`` and ``FI_EFA_USE_DEVICE_RDMA=1`` (RDMA-capable instances), and
  ``RDMAV_FORK_SAFE=1`` (AWS EFA documentation; aws/sagemaker-training-toolkit commit 9a5ed9f, which
  also sets ``NCCL_PROTO=simple`` "to handle the out-of-order data delivery from EFA"). The plugin
  sets ``NCCL_TOPO_FILE`` itself on P4d/P5 ("NET/OFI Running on P4d platform, Setting
  NCCL_TOPO_FILE": aws/aws-ofi-nccl#67; "NET/OFI Setting NCCL_TOPO_FILE environment variable":
  NVIDIA/nccl#1597).
* GCP A3 Mega (a3-megagpu-8g, GPUDirect-TCPXO): Google's ``nccl-env-profile.sh`` shipped in
  ``/var/lib/tcpxo/lib64`` ("These parameters should not be modified": GoogleCloudPlatform/
  cluster-toolkit a3mega examples; https://cloud.google.com/kubernetes-engine/docs/how-to/
  gpu-bandwidth-gpudirect-tcpx#environment-variables-nccl).
* GCP A3 High (a3-highgpu-8g, GPUDirect-TCPX): the same GKE page, TCPX section.
* OCI BM.GPU (RoCE cluster network): ``NCCL_IB_GID_INDEX=3`` and ``NCCL_IB_QPS_PER_CONNECTION=4``
  (oracle-japan/ocitutorials run-nccltests; the corpus sample's mpirun line).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from xml.etree import ElementTree as ET


@dataclass(frozen=True)
class Platform:
    key: str
    title: str
    source: str
    required: Mapping[str, str | None]  # variable -> documented value (None: node-specific)
    plugin: str | None = None


_TCPXO = {"NCCL_CROSS_NIC": "0", "NCCL_ALGO": "Ring,Tree", "NCCL_PROTO": None, "NCCL_MIN_NCHANNELS": "4",
          "NCCL_P2P_NET_CHUNKSIZE": "524288", "NCCL_P2P_PCI_CHUNKSIZE": "524288", "NCCL_P2P_NVL_CHUNKSIZE": "1048576",
          "NCCL_BUFFSIZE": "8388608", "NCCL_NET_GDR_LEVEL": "PIX", "NCCL_NVLS_ENABLE": "0",
          "NCCL_TUNER_PLUGIN": "libnccl-tuner.so", "NCCL_TUNER_CONFIG_PATH": None,
          "NCCL_SHIMNET_GUEST_CONFIG_CHECKER_CONFIG_FILE": None, "NCCL_FASTRAK_CTRL_DEV": None,
          "NCCL_FASTRAK_IFNAME": None, "NCCL_SOCKET_IFNAME": None, "NCCL_FASTRAK_NUM_FLOWS": "2",
          "NCCL_FASTRAK_USE_SNAP": "1", "NCCL_FASTRAK_ENABLE_CONTROL_CHANNEL": "0", "NCCL_FASTRAK_USE_LLCM": "1",
          "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY": "/dev/aperture_devices",
          "NCCL_FASTRAK_PLUGIN_ACCEPT_TIMEOUT_MS": "600000", "NCCL_FASTRAK_ENABLE_HOTPATH_LOGGING": "0"}
_TCPX = {"NCCL_CROSS_NIC": "0", "NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple", "NCCL_NSOCKS_PERTHREAD": "4",
         "NCCL_SOCKET_NTHREADS": "1", "NCCL_NET_GDR_LEVEL": "PIX", "NCCL_P2P_PXN_LEVEL": "0",
         "NCCL_MAX_NCHANNELS": "12", "NCCL_MIN_NCHANNELS": "12", "NCCL_DYNAMIC_CHUNK_SIZE": "524288",
         "NCCL_P2P_NET_CHUNKSIZE": "524288", "NCCL_P2P_PCI_CHUNKSIZE": "524288", "NCCL_P2P_NVL_CHUNKSIZE": "1048576",
         "NCCL_BUFFSIZE": None, "NCCL_SOCKET_IFNAME": None, "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME": None,
         "NCCL_GPUDIRECTTCPX_CTRL_DEV": None, "NCCL_GPUDIRECTTCPX_TX_BINDINGS": None,
         "NCCL_GPUDIRECTTCPX_RX_BINDINGS": None, "NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX": None,
         "NCCL_GPUDIRECTTCPX_PROGRAM_FLOW_STEERING_WAIT_MICROS": None, "NCCL_GPUDIRECTTCPX_FORCE_ACK": "0"}

PLATFORMS: dict[str, Platform] = {
    "azure-nd": Platform(
        "azure-nd", "Azure ND (A100 v4, H100 v5, H200 v5)",
        "Azure HPC images set NCCL_TOPO_FILE=/opt/microsoft/ndv4-topo.xml (ND A100 v4) or ndv5-topo.xml (ND H100/H200 "
        "v5) in /etc/nccl.conf (Azure/azhpc-images); https://jingchaozhang.github.io/Decoding-Azure-NCCL-Topology-Files/",
        {"NCCL_TOPO_FILE": None}),
    "aws-efa": Platform(
        "aws-efa", "AWS EFA instances (p4d, p5, p5e, p5en)",
        "AWS EFA documentation and aws/sagemaker-training-toolkit commit 9a5ed9f (FI_EFA_USE_DEVICE_RDMA=1, "
        "RDMAV_FORK_SAFE=1, NCCL_PROTO=simple for EFA's out-of-order delivery); aws-ofi-nccl sets NCCL_TOPO_FILE "
        "itself on P4d/P5 (aws/aws-ofi-nccl#67, NVIDIA/nccl#1597 logs)",
        {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "RDMAV_FORK_SAFE": "1", "NCCL_PROTO": None,
         "NCCL_TOPO_FILE": None}, plugin="aws-ofi-nccl"),
    "gcp-a3-mega": Platform(
        "gcp-a3-mega", "GCP A3 Mega (a3-megagpu-8g, GPUDirect-TCPXO)",
        "Google's /var/lib/tcpxo/lib64/nccl-env-profile.sh (\"These parameters should not be modified\": "
        "GoogleCloudPlatform/cluster-toolkit a3mega examples); "
        "https://cloud.google.com/kubernetes-engine/docs/how-to/gpu-bandwidth-gpudirect-tcpx#environment-variables-nccl",
        _TCPXO, plugin="GPUDirect-TCPXO"),
    "gcp-a3-high": Platform(
        "gcp-a3-high", "GCP A3 High (a3-highgpu-8g, GPUDirect-TCPX)",
        "https://cloud.google.com/kubernetes-engine/docs/how-to/gpu-bandwidth-gpudirect-tcpx (TCPX NCCL settings for "
        "a3-highgpu-8g)", _TCPX, plugin="GPUDirect-TCPX"),
    "oci-bm-gpu": Platform(
        "oci-bm-gpu", "OCI BM.GPU with a RoCE cluster network",
        "oracle-japan/ocitutorials run-nccltests (NCCL_IB_GID_INDEX=3, NCCL_IB_QPS_PER_CONNECTION=4 on BM.GPU4.8)",
        {"NCCL_IB_GID_INDEX": "3", "NCCL_IB_QPS_PER_CONNECTION": "4"}),
}


def _plugin_paths(obs: Any) -> str:
    return " ".join(getattr(obs, "net_plugins", ()) or ()) + " " + (getattr(obs, "net_plugin_env", None) or "")


def detect(obs: Any, env: Mapping[str, str]) -> Platform | None:
    """The platform whose required settings apply, from the platform observation and the settings
    present (a TCPXO environment names itself with ``NCCL_FASTRAK_*``)."""
    provider = getattr(obs, "provider", None) if obs is not None else None
    paths = _plugin_paths(obs)
    if any(k.startswith("NCCL_FASTRAK_") for k in env) or "tcpxo" in paths or "fastrak" in paths:
        return PLATFORMS["gcp-a3-mega"]
    if any(k.startswith("NCCL_GPUDIRECTTCPX_") for k in env) or "/tcpx/" in paths:
        return PLATFORMS["gcp-a3-high"]
    if provider == "aws" or getattr(obs, "efa_devices", ()) or "ofi" in paths:
        return PLATFORMS["aws-efa"]
    if provider == "azure":
        return PLATFORMS["azure-nd"]
    if provider == "oci":
        return PLATFORMS["oci-bm-gpu"]
    return None


def required_here(platform: Platform | None, name: str) -> bool:
    return platform is not None and name in platform.required


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

    @property
    def consistent(self) -> bool:
        return self.readable and not self.gpus_missing and not self.nics_missing and not self.disagree


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


__all__ = ["PLATFORMS", "Platform", "TopoFileCheck", "check_topo_file", "detect", "file_pairs", "required_here"]
