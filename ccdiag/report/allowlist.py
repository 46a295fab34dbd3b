"""What a redacted snapshot keeps: the one list of readings that may leave the site.

A snapshot attached to a ticket must carry what the checks read (``ccdiag check``, ``ccdiag nccl``,
``ccdiag compare`` on its report) and nothing else. Redaction therefore works by allowing, not by
guessing: an environment variable, a line of a configuration file, a DMI field, an NVML record's
field that is not named here is dropped (and counted in what ``snapshot --redact`` prints); what is
named here is kept, pseudonymised where the rule says so (addresses, host names, serials, GUIDs:
:class:`ccdiag.report.redact.Redactor`), and dropped anyway when its value looks like a secret
(:mod:`ccdiag.report.secrets`). The kernel log keeps only the lines the kmsg probe reads
(:func:`ccdiag.probes.kmsg.lines_used`), with process names pseudonymised.

Adding a reading: a probe that reads a new environment variable, configuration file, DMI field or
NVML record field adds its name here, in the table of its kind, with the rule its value needs
(``tests/test_redact_allowlist.py`` replays the redacted samples to the same verdict and plants
secrets beside every kind). The rules:

* ``KEEP``: the value is kept as read (device names, numbers, levels, on/off switches);
* ``PSEUDONYMISE``: kept with every address, host name, serial and GUID in it replaced;
* ``HOSTPORT``: a ``host:port`` (``NCCL_COMM_ID``): the host becomes a pseudonym, the port stays;
* ``SYSTEM_PATH``: a file path, kept when it lies under a system directory (:data:`SYSTEM_DIRS`),
  dropped otherwise (a home directory names a person);
* ``PROVIDER_CONSTANT``: kept only when it is one of the provider identity strings
  (:data:`PROVIDER_CONSTANTS`), which is what platform detection reads it for.
"""

from __future__ import annotations

KEEP = "keep"
PSEUDONYMISE = "pseudonymise"
HOSTPORT = "hostport"
SYSTEM_PATH = "system-path"
PROVIDER_CONSTANT = "provider-constant"
RULES = (KEEP, PSEUDONYMISE, HOSTPORT, SYSTEM_PATH, PROVIDER_CONSTANT)

#: file paths under these directories name software, not people
SYSTEM_DIRS = ("/opt/", "/usr/", "/etc/", "/lib/", "/lib64/", "/var/lib/", "/run/", "/sys/", "/proc/", "/dev/")

#: identity strings a cloud puts in DMI (probes/platform.py names each with its source)
PROVIDER_CONSTANTS = frozenset({"7783-7084-3265-9085-8269-3286-77", "OracleCloud.com"})

#: environment variables by name (NCCL reads the same names from /etc/nccl.conf: :data:`NCCL_CONF`)
ENV: dict[str, str] = {
    # the NCCL settings the advice, the platform rules and the debugging-variable check read
    "NCCL_ALGO": KEEP, "NCCL_BUFFSIZE": KEEP, "NCCL_CROSS_NIC": KEEP, "NCCL_DEBUG": KEEP,
    "NCCL_DEBUG_SUBSYS": KEEP, "NCCL_DEBUG_FILE": SYSTEM_PATH, "NCCL_DYNAMIC_CHUNK_SIZE": KEEP,
    "NCCL_COMM_ID": HOSTPORT, "NCCL_GRAPH_FILE": SYSTEM_PATH, "NCCL_IB_DISABLE": KEEP,
    "NCCL_IB_GDR_LEVEL": KEEP, "NCCL_IB_GID_INDEX": KEEP, "NCCL_IB_HCA": KEEP, "NCCL_IB_QPS_PER_CONNECTION": KEEP,
    "NCCL_IB_ROCE_VERSION_NUM": KEEP, "NCCL_IB_TC": KEEP, "NCCL_IB_SL": KEEP, "NCCL_IB_TIMEOUT": KEEP,
    "NCCL_IB_RETRY_CNT": KEEP, "NCCL_IB_ADDR_FAMILY": KEEP, "NCCL_IB_ADDR_RANGE": PSEUDONYMISE,
    "NCCL_IB_PCI_RELAXED_ORDERING": KEEP, "NCCL_IB_ADAPTIVE_ROUTING": KEEP, "NCCL_IB_SPLIT_DATA_ON_QPS": KEEP,
    "NCCL_MAX_NCHANNELS": KEEP, "NCCL_MIN_NCHANNELS": KEEP, "NCCL_NET": KEEP, "NCCL_NET_GDR_LEVEL": KEEP,
    "NCCL_NET_GDR_READ": KEEP, "NCCL_NET_PLUGIN": KEEP, "NCCL_NSOCKS_PERTHREAD": KEEP, "NCCL_NVLS_ENABLE": KEEP,
    "NCCL_P2P_DISABLE": KEEP, "NCCL_P2P_LEVEL": KEEP, "NCCL_P2P_NET_CHUNKSIZE": KEEP,
    "NCCL_P2P_NVL_CHUNKSIZE": KEEP, "NCCL_P2P_PCI_CHUNKSIZE": KEEP, "NCCL_P2P_PXN_LEVEL": KEEP,
    "NCCL_PXN_DISABLE": KEEP, "NCCL_PROTO": KEEP, "NCCL_SHM_DISABLE": KEEP, "NCCL_SOCKET_FAMILY": KEEP,
    "NCCL_SOCKET_IFNAME": KEEP, "NCCL_SOCKET_NTHREADS": KEEP, "NCCL_TOPO_FILE": SYSTEM_PATH,
    "NCCL_TOPO_DUMP_FILE": SYSTEM_PATH, "NCCL_TUNER_CONFIG_PATH": SYSTEM_PATH, "NCCL_TUNER_PLUGIN": KEEP,
    "NCCL_CONF_FILE": SYSTEM_PATH, "NCCL_COLLNET_ENABLE": KEEP, "NCCL_CUMEM_ENABLE": KEEP,
    # a provider's profile refers to its plugin's directory as ${NCCL_LIB_DIR} (the advice expands it)
    "NCCL_LIB_DIR": SYSTEM_PATH,
    "NCCL_SHIMNET_GUEST_CONFIG_CHECKER_CONFIG_FILE": SYSTEM_PATH,
    # Google's GPUDirect-TCPX(O) plugins (ccdiag/nccl/platforms.py reads them by these names)
    "NCCL_FASTRAK_CTRL_DEV": KEEP, "NCCL_FASTRAK_ENABLE_CONTROL_CHANNEL": KEEP,
    "NCCL_FASTRAK_ENABLE_HOTPATH_LOGGING": KEEP, "NCCL_FASTRAK_IFNAME": KEEP,
    "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY": SYSTEM_PATH, "NCCL_FASTRAK_NUM_FLOWS": KEEP,
    "NCCL_FASTRAK_PLUGIN_ACCEPT_TIMEOUT_MS": KEEP, "NCCL_FASTRAK_USE_LLCM": KEEP, "NCCL_FASTRAK_USE_SNAP": KEEP,
    "NCCL_GPUDIRECTTCPX_CTRL_DEV": KEEP, "NCCL_GPUDIRECTTCPX_FORCE_ACK": KEEP,
    "NCCL_GPUDIRECTTCPX_PROGRAM_FLOW_STEERING_WAIT_MICROS": KEEP, "NCCL_GPUDIRECTTCPX_RX_BINDINGS": KEEP,
    "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME": KEEP, "NCCL_GPUDIRECTTCPX_TX_BINDINGS": KEEP,
    "NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX": SYSTEM_PATH,
    # the AWS EFA platform's libfabric settings (ccdiag/nccl/platforms.py)
    "FI_PROVIDER": KEEP, "FI_EFA_USE_DEVICE_RDMA": KEEP, "FI_EFA_FORK_SAFE": KEEP,
    "FI_EFA_USE_HUGE_PAGE": KEEP, "RDMAV_FORK_SAFE": KEEP,
    # which devices a job sees
    "CUDA_VISIBLE_DEVICES": PSEUDONYMISE, "CUDA_DEVICE_ORDER": KEEP, "NVIDIA_VISIBLE_DEVICES": PSEUDONYMISE,
    "GPU_DEVICE_ORDINAL": KEEP, "UCX_NET_DEVICES": KEEP, "UCX_TLS": KEEP,
}

#: NCCL's debugging variables (ccdiag/nccl/debugvars.py) are kept by name too, each value as read:
#: naming one found set is a check of its own
ENV_FROM_DEBUGVARS = KEEP
#: every setting the platform table (ccdiag/data/nccl_platforms.json) documents, requires, calls
#: harmful or has a plugin set is kept by name too, each value as read: the advice judges it against
#: the table, so a new platform's settings join this list with the table
ENV_FROM_PLATFORMS = KEEP
#: variables kept by prefix: the platform is identified by any variable of its plugin's own
#: (ccdiag/nccl/platforms.py); a name listed in :data:`ENV` keeps its own rule
ENV_PREFIXES: dict[str, str] = {"NCCL_FASTRAK_": KEEP, "NCCL_GPUDIRECTTCPX_": KEEP}

#: /etc/nccl.conf: NCCL reads the names of :data:`ENV` from it; comments and other lines are dropped
NCCL_CONF = "/etc/nccl.conf"

#: configuration files a probe reads, line by line: file -> {key: rule}; a ``KEY=value`` line whose
#: key is not named is dropped, as is every comment. ``None``: the lines are names (modules), kept
#: when they are one word
CONFIG_FILES: dict[str, dict[str, str] | None] = {
    "/etc/os-release": {"NAME": KEEP, "VERSION": KEEP, "ID": KEEP, "ID_LIKE": KEEP, "VERSION_ID": KEEP,
                        "PRETTY_NAME": KEEP, "VERSION_CODENAME": KEEP},
    "/etc/modules-load.d/": None,
}

#: DMI identity fields (/sys/class/dmi/id/*): what platform detection and the hardware catalogue read.
#: Serials, UUIDs and asset tags are not here, so they are dropped
DMI_DIR = "/sys/class/dmi/id/"
DMI: dict[str, str] = {
    "sys_vendor": KEEP, "product_name": KEEP, "board_vendor": KEEP, "bios_vendor": KEEP,
    "board_name": KEEP, "chassis_asset_tag": PROVIDER_CONSTANT,
}

#: fields of an NVML record's answer kept per call, where the answer is a list of structures
#: (everything else in them is dropped: a process's name and command line never leave)
NVML_FIELDS: dict[str, tuple[str, ...]] = {
    "nvmlDeviceGetComputeRunningProcesses": ("pid", "usedGpuMemory", "gpuInstanceId", "computeInstanceId"),
    "nvmlDeviceGetGraphicsRunningProcesses": ("pid", "usedGpuMemory", "gpuInstanceId", "computeInstanceId"),
}
#: NVML calls whose answers are dropped whole (a process name, a user's command)
NVML_DROPPED = frozenset({"nvmlSystemGetProcessName"})

#: process-list commands are not recorded by any probe; if one ever is, its output is dropped
COMMANDS_DROPPED = frozenset({"ps", "top", "pgrep", "who", "w", "last"})


def env_rule(name: str) -> str | None:
    """The rule for environment variable ``name`` (also a ``/etc/nccl.conf`` key), or None: dropped."""
    rule = ENV.get(name)
    if rule is not None:
        return rule
    from ccdiag.nccl.debugvars import DEBUGGING_VARS

    if any(name == var for var, _since, _removed in DEBUGGING_VARS):
        return ENV_FROM_DEBUGVARS
    if name in _platform_settings():
        return ENV_FROM_PLATFORMS
    for prefix, rule in ENV_PREFIXES.items():
        if name.startswith(prefix):
            return rule
    return None


_PLATFORM_SETTINGS: frozenset[str] | None = None


def _platform_settings() -> frozenset[str]:
    """Every variable the platform table names (documented, harmful, set by a plugin)."""
    global _PLATFORM_SETTINGS
    if _PLATFORM_SETTINGS is None:
        from ccdiag.nccl import platforms

        _PLATFORM_SETTINGS = frozenset(name for p in platforms.table()
                                       for table in (p.settings, p.harmful, p.plugin_sets) for name in table)
    return _PLATFORM_SETTINGS


__all__ = ["CONFIG_FILES", "DMI", "DMI_DIR", "ENV", "ENV_PREFIXES", "HOSTPORT", "KEEP", "NCCL_CONF", "NVML_DROPPED", "NVML_FIELDS",
           "PROVIDER_CONSTANT", "PROVIDER_CONSTANTS", "PSEUDONYMISE", "RULES", "SYSTEM_DIRS", "SYSTEM_PATH",
           "COMMANDS_DROPPED", "env_rule"]
