"""The names of the probes that ship with ccdiag, as constants.

A probe's name keys its run in every report, snapshot and metric label (``probe="infiniband"``), so
code that reads one probe's data names it through these constants rather than a string literal. A
probe added later needs no entry here: its module's ``NAME`` is its constant.
"""

from __future__ import annotations

PROBE_SYSTEM = "system"
PROBE_PCIE = "pcie"
PROBE_NVML = "nvml"
PROBE_INFINIBAND = "infiniband"
PROBE_NETDEV = "netdev"
PROBE_KMSG = "kmsg"
PROBE_SMI_TOPO = "smi_topo"
PROBE_PLATFORM = "platform"
