"""The Debugging section of NCCL's environment documentation: every variable it lists, with the
release it appeared in and, where the guide says so, the release that removed it.

Why: the guide says the variables of this section "should not be used in production nor retained
in scripts, or only as workaround, and removed as soon as the issue is resolved". ccdiag names each
one found set, with its version facts, so a setting that NCCL no longer reads is recognised too.

Source: NVIDIA/nccl ``docs/userguide/source/env.rst``, section "Debugging" (read at commit
5067397c; 69 variables). ``NCCL_NET_GDR_LEVEL`` was formerly ``NCCL_IB_GDR_LEVEL``.
"""

from __future__ import annotations

#: (variable, since, removed in); None where the guide gives no version
DEBUGGING_VARS: tuple[tuple[str, str | None, str | None], ...] = (
    ('NCCL_P2P_DISABLE', None, None),
    ('NCCL_P2P_LEVEL', '2.3.4', None),
    ('NCCL_P2P_DIRECT_DISABLE', None, None),
    ('NCCL_SHM_DISABLE', None, None),
    ('NCCL_BUFFSIZE', None, None),
    ('NCCL_NTHREADS', None, None),
    ('NCCL_MAX_NCHANNELS', '2.0.5', None),
    ('NCCL_MIN_NCHANNELS', '2.2.0', None),
    ('NCCL_CHECKS_DISABLE', '2.0.5', None),
    ('NCCL_CHECK_POINTERS', '2.2.12', None),
    ('NCCL_CHECK_MODE', '2.29.7', None),
    ('NCCL_LAUNCH_MODE', '2.1.0', None),
    ('NCCL_IB_DISABLE', None, None),
    ('NCCL_IB_AR_THRESHOLD', '2.6', None),
    ('NCCL_IB_OOO_RQ', '2.30', None),
    ('NCCL_IB_QPS_PER_CONNECTION', '2.10', None),
    ('NCCL_IB_SPLIT_DATA_ON_QPS', '2.18', None),
    ('NCCL_IB_CUDA_SUPPORT', None, '2.4.0'),
    ('NCCL_IB_PCI_RELAXED_ORDERING', '2.12', None),
    ('NCCL_IB_ADAPTIVE_ROUTING', '2.16', None),
    ('NCCL_IB_ECE_ENABLE', '2.23', None),
    ('NCCL_MEM_SYNC_DOMAIN', '2.16', None),
    ('NCCL_CUMEM_ENABLE', '2.18', None),
    ('NCCL_CUMEM_HOST_ENABLE', '2.23', None),
    ('NCCL_NET_GDR_LEVEL', '2.3.4.', None),
    ('NCCL_NET_GDR_C2C', '2.26', None),
    ('NCCL_NET_GDR_READ', None, None),
    ('NCCL_NET_SHARED_BUFFERS', '2.8', None),
    ('NCCL_NET_SHARED_COMMS', '2.12', None),
    ('NCCL_IGNORE_NET_MISMATCH', '2.30', None),
    ('NCCL_IGNORE_COLLNET_MISMATCH', '2.30', None),
    ('NCCL_SINGLE_RING_THRESHOLD', '2.1', '2.3'),
    ('NCCL_LL_THRESHOLD', '2.1', '2.5'),
    ('NCCL_TREE_THRESHOLD', '2.4', '2.5'),
    ('NCCL_ALGO', '2.5', None),
    ('NCCL_PROTO', '2.5', None),
    ('NCCL_NVB_DISABLE', '2.11', None),
    ('NCCL_PXN_DISABLE', '2.12', None),
    ('NCCL_P2P_PXN_LEVEL', '2.12', None),
    ('NCCL_PXN_C2C', '2.27', None),
    ('NCCL_RUNTIME_CONNECT', '2.22', None),
    ('NCCL_GRAPH_REGISTER', '2.11', None),
    ('NCCL_LOCAL_REGISTER', '2.19', None),
    ('NCCL_LEGACY_CUDA_REGISTER', '2.24', None),
    ('NCCL_WIN_ENABLE', '2.27', None),
    ('NCCL_SET_STACK_SIZE', '2.9', None),
    ('NCCL_GRAPH_MIXING_SUPPORT', '2.13', None),
    ('NCCL_GRAPH_STREAM_ORDERING', '2.30', None),
    ('NCCL_DMABUF_ENABLE', '2.13', None),
    ('NCCL_P2P_NET_CHUNKSIZE', '2.14', None),
    ('NCCL_P2P_LL_THRESHOLD', '2.14', None),
    ('NCCL_ALLOC_P2P_NET_LL_BUFFERS', '2.14', None),
    ('NCCL_COMM_BLOCKING', '2.14', None),
    ('NCCL_CGA_CLUSTER_SIZE', '2.16', None),
    ('NCCL_MAX_CTAS', '2.17', None),
    ('NCCL_MIN_CTAS', '2.17', None),
    ('NCCL_NVLS_ENABLE', '2.17', None),
    ('NCCL_IB_MERGE_NICS', '2.20', None),
    ('NCCL_NET_MERGE_POLICY', '2.30.5', None),
    ('NCCL_MNNVL_ENABLE', '2.21', None),
    ('NCCL_MNNVL_UUID', '2.25', None),
    ('NCCL_MNNVL_CLIQUE_ID', '2.25', None),
    ('NCCL_RAS_ENABLE', '2.24', None),
    ('NCCL_RAS_ADDR', '2.24', None),
    ('NCCL_RAS_TIMEOUT_FACTOR', '2.24', None),
    ('NCCL_LAUNCH_ORDER_IMPLICIT', '2.26', None),
    ('NCCL_LAUNCH_RACE_FATAL', '2.26', None),
    ('NCCL_IPC_USE_ABSTRACT_SOCKET', '2.29', None),
    ('NCCL_SYM_GIN_KERNELS_ENABLE', '2.29', None),
)
#: names that old releases read under another name
FORMERLY = {"NCCL_IB_GDR_LEVEL": "NCCL_NET_GDR_LEVEL"}


def version_note(name: str) -> str:
    """"since 2.12", "removed in 2.5: NCCL no longer reads it", or ""."""
    row = next((r for r in DEBUGGING_VARS if r[0] == FORMERLY.get(name, name)), None)
    if row is None:
        return ""
    _, since, removed = row
    if removed:
        return f"removed in NCCL {removed}: releases since then do not read it"
    return f"since NCCL {since}" if since else ""


def is_debugging(name: str) -> bool:
    return any(r[0] == FORMERLY.get(name, name) for r in DEBUGGING_VARS)
