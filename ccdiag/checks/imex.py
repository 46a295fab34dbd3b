"""IMEX on multi-node NVLink systems (GB200/GB300 NVL): what a job spanning trays needs.

NVIDIA's IMEX guide: GPUs of different compute trays in one NVLink domain share memory through the
IMEX service (``nvidia-imex``, one per tray, configured with the domain's nodes), and a process may
import such memory only through an IMEX channel: the driver registers the character device
``nvidia-caps-imex-channels`` (``/proc/devices``), but the channel nodes
(``/dev/nvidia-caps-imex-channels/channelN``) are created by the administrator and do not survive
a reboot; without one, CUDA's fabric-memory calls fail with an insufficient-permission error. A
tray that runs single-tray jobs works without either, so each missing piece warns; on Kubernetes the
NVIDIA DRA driver starts IMEX and hands channels to pods, which this host-level view cannot see.
"""

from __future__ import annotations

from typing import Any

from ccdiag.checks import CheckContext, check
from ccdiag.checks.common import NODE, node_component, nvml_gate
from ccdiag.core.findings import PASS, SKIP, WARN, Evidence, Finding
from ccdiag.core.probenames import PROBE_NVML, PROBE_SYSTEM

SOURCE = "NVIDIA IMEX Service for NVLink Networks, user's guide (IMEX channels)"
#: GPU models built into multi-node NVLink domains
MNNVL_MODELS = ("GB200", "GB300")


def multi_node_nvlink(nvml: Any) -> bool:
    """GPUs of an NVLink domain larger than the node: a GB200/GB300, or a GPU registered with a
    fabric cluster (its clusterUuid set)."""
    return any(any(m in (g.name or "") for m in MNNVL_MODELS) or g.fabric_cluster_uuid for g in nvml.gpus)


@check("gpu.imex", needs=(PROBE_NVML,), uses=(PROBE_SYSTEM,))
def check_imex(ctx: CheckContext) -> list[Finding]:
    """The IMEX service running and an IMEX channel present, on multi-node NVLink GPUs."""
    cid = "gpu.imex"
    nvml, gated = nvml_gate(ctx, cid)
    if gated:
        return gated
    if not multi_node_nvlink(nvml):
        return [Finding(cid, SKIP, NODE, "No multi-node NVLink GPU (GB200/GB300, or a fabric cluster): IMEX "
                        "is not used here.")]
    sysobs = ctx.data(PROBE_SYSTEM)
    device = getattr(sysobs, "imex_channel_device", None)
    if device is None:
        return [Finding(cid, SKIP, NODE, "IMEX state not read (/proc/devices not readable or not in this snapshot).")]
    service, channels = sysobs.imex_service, sysobs.imex_channels
    ev = (Evidence("IMEX channel device registered", device, "/proc/devices"),
          Evidence("nvidia-imex", service, "systemctl is-active nvidia-imex"),
          Evidence("IMEX channels", list(channels) if channels is not None else None, "/dev/nvidia-caps-imex-channels"))
    comp = node_component("nvidia-imex")
    if not device:
        return [Finding(cid, WARN, comp, "The NVIDIA driver registered no IMEX channel device: jobs across trays "
                        "cannot share GPU memory over NVLink.", evidence=ev, expected="nvidia-caps-imex-channels in "
                        "/proc/devices", expected_source=SOURCE,
                        remedy="Install a driver with IMEX support (R550 or later, with the nvidia-imex package).")]
    out = []
    if service is not None and service != "active":
        out.append(Finding(cid, WARN, comp, f"nvidia-imex is '{service}': jobs across trays of this NVLink domain "
                           "cannot import each other's GPU memory.", evidence=ev, expected="active",
                           expected_source=SOURCE,
                           remedy="systemctl enable --now nvidia-imex, with every node of the domain in "
                                  "/etc/nvidia-imex/nodes_config.cfg (on Kubernetes the NVIDIA DRA driver runs it per "
                                  "ComputeDomain instead).", details={"service": service}))
    if not channels:
        out.append(Finding(cid, WARN, node_component("nvidia-caps-imex-channels"),
                           "No IMEX channel node: CUDA's fabric-memory calls fail with an insufficient-permission "
                           "error for jobs across trays.", evidence=ev,
                           expected="/dev/nvidia-caps-imex-channels/channel0", expected_source=SOURCE,
                           remedy="Create it after each boot: mknod /dev/nvidia-caps-imex-channels/channel0 c <major of "
                                  "nvidia-caps-imex-channels in /proc/devices> 0 (the NVIDIA DRA driver gives pods "
                                  "their own channels).", details={"channels": list(channels or ())}))
    return out or [Finding(cid, PASS, NODE, f"IMEX ready: nvidia-imex {service or 'state not readable here'}, "
                           f"channel(s) {', '.join(channels)}.", evidence=ev, expected_source=SOURCE)]
