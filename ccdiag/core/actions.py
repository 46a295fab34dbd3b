"""What to do about a finding, as one word a scheduler or a remediation tool can act on.

The remedy of a finding is prose for a person. Schedulers (a Slurm drain), remediation controllers
and dashboards need the same decision without parsing prose, so every finding carries one value of
a small vocabulary, ordered from the least to the most disruptive: an escalation ladder climbs it
(drain, then reset the GPU, then reboot, then service) when the step below did not clear the
finding. The values, and how NVIDIA's own words map onto them, live here and nowhere else:

* NVIDIA's XID catalogue names a "resolution bucket (immediate action)" per XID code
  (docs.nvidia.com/deploy/xid-errors, ``RESET_GPU``, ``RESTART_BM``, ``RESTART_APP`` ...);
* NVML's ``nvmlDeviceGpuRecoveryAction_t`` (``nvmlDeviceGetFieldValues`` field
  ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``) says what the driver wants before the GPU is usable.

A finding that names no action of its own gets :func:`default_action` of its status: a failure
takes the node out of scheduling (``drain``) until someone fixes what it names; anything else
leaves it in service (``none``).
"""

from __future__ import annotations

from typing import Iterable

NONE = "none"
RESTART_JOB = "restart_job"
DRAIN = "drain"
RESET_GPU = "reset_gpu"
REBOOT = "reboot"
SERVICE = "service"

#: the vocabulary, least disruptive first: an escalation ladder climbs it in this order
ACTIONS: tuple[str, ...] = (NONE, RESTART_JOB, DRAIN, RESET_GPU, REBOOT, SERVICE)
RANK = {a: i for i, a in enumerate(ACTIONS)}

#: what each value asks for; published in the report schema and docs/report.md
MEANING = {
    NONE: "nothing to do: the node stays in service (a pass, information, a warning to watch)",
    RESTART_JOB: "the job that hit the fault restarts (its own bug, or an error contained to it); "
                 "the node stays in service",
    DRAIN: "take the node out of scheduling until a person fixes what the finding names (a setting, a "
           "service, a cable, a module); no automatic repair",
    RESET_GPU: "drain, then reset the named GPU(s) once idle (nvidia-smi -r) and check again; reboot if "
               "the reset fails or the finding returns",
    REBOOT: "drain and reboot the node (the host, or the VM on a cloud instance); service if the finding "
            "returns after the reboot",
    SERVICE: "drain and hand the node to hardware service (reseat, field diagnostics, RMA): software "
             "cannot clear it",
}

#: NVIDIA XID catalogue "Resolution Bucket (Immediate Action)" -> action. WORKFLOW_* buckets name a
#: flow of several steps; their first step that needs the node is taken here (the XID catalogue
#: module refines 45 and 48 by their code).
NVIDIA_BUCKET = {
    "IGNORE": NONE,
    "RESTART_APP": RESTART_JOB,
    "CHECK_APP/CUDA": RESTART_JOB,
    "RESET_GPU": RESET_GPU,
    "RESTART_BM": REBOOT,
    "RESTART_VM": REBOOT,
    "CHECK_MECHANICALS": SERVICE,
    "CONTACT_SUPPORT": SERVICE,
    "UPDATE_SWFW": DRAIN,
    "CHECK_UVM": DRAIN,
    "WORKFLOW_XID_45": NONE,  # follows another XID, which carries the action
    "WORKFLOW_XID_48": RESET_GPU,  # a reset (or reboot) clears it; SRAM over its threshold: service
    "WORKFLOW_NVLINK_ERR": RESET_GPU,
    "WORKFLOW_NVLINK5_ERR": RESET_GPU,
    "XID_154": NONE,  # says the recovery action changed: gpu.recovery_action reads the action itself
}

#: nvmlDeviceGpuRecoveryAction_t (as ccdiag.probes.nvml names it) -> action
NVML_RECOVERY = {
    "none": NONE,
    "reset": RESET_GPU,
    "gpu_reset": RESET_GPU,
    "reboot": REBOOT,
    "node_reboot": REBOOT,
    "system_reboot": REBOOT,
    "bus_reset": REBOOT,  # the GPU's PCIe bus is reset: the node's business, as a reboot is
    "drain_p2p": DRAIN,
    "drain_and_reset": RESET_GPU,
    "recover_imex_domain": DRAIN,  # restart the IMEX daemons of the domain: a person's step
}


def default_action(status: str) -> str:
    """The action of a finding that names none: a failure drains, anything else is no action."""
    return DRAIN if status == "fail" else NONE


def action_of(finding: object) -> str:
    """The finding's own action, or its status's default."""
    own = getattr(finding, "action", None)
    return own if own in RANK else default_action(getattr(finding, "status", ""))


def worst(actions: Iterable[str]) -> str:
    """The most disruptive of ``actions`` (``none`` for none at all)."""
    return max(actions, key=lambda a: RANK.get(a, 0), default=NONE)


def from_bucket(bucket: str | None) -> str | None:
    """The action for an NVIDIA resolution bucket; None for an empty or unknown bucket."""
    if not bucket:
        return None
    key = bucket.strip().upper()
    if key in NVIDIA_BUCKET:
        return NVIDIA_BUCKET[key]
    if key.startswith("WORKFLOW_"):
        return DRAIN  # a flow this table does not know yet: a person follows it
    return None
