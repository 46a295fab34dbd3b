"""Real NCCL_DEBUG=INFO logs from public issue threads, each kept whole as pasted in
tests/fixtures/nccl-logs/ with its source and the fact its thread established, and read by
``ccdiag nccl --log``'s reader: every log must give its thread's key fact.

The predicate of each case looks at what the reader extracted (``NcclLog``) and at the differences
it names (``compare``), never at the raw text.
"""

from __future__ import annotations

import pathlib

import pytest

from ccdiag.nccl.diagnose import diagnose, host_count
from ccdiag.nccl.diagnose import compare
from ccdiag.nccl.logread import read_nccl_log

LOGS = pathlib.Path(__file__).resolve().parent / "fixtures" / "nccl-logs"


def _has(diffs, *needles):
    return any(all(n in d for n in needles) for d in diffs)


def _first(L):
    return diagnose(L, None)[0]


#: file -> (the key fact in words, predicate over (log, differences))
CASES = {
    "nccl-226-aws-socket-only-ens3.log": (
        "sockets over ens3, no IB device",
        lambda L, D: L.net_devices == {"ens3": "Socket"} and L.no_ib_device and _has(D, "TCP sockets")),
    "nccl-tests-179-two-hosts-socket-eno1-enp1s0.log": (
        "sockets between 2 hosts on eno1/enp1s0; one 4-rank communicator",
        lambda L, D: L.network == "Socket" and {"eno1", "enp1s0"} <= set(L.net_devices)
        and [v["nranks"] for v in L.comms.values()] == [4] and _has(D, "TCP sockets")),
    "nccl-1232-rank-prefix-bootstrap-enp10s0.log": (
        "bootstrap enp10s0 10.10.7.107/.109; NCCL_SOCKET_IFNAME from the environment",
        lambda L, D: L.bootstrap == {"enp10s0": {"10.10.7.107", "10.10.7.109"}}
        and L.env["NCCL_SOCKET_IFNAME"] == "en,eth,em,bond" and L.hosts == {"node0", "node2"}),
    "nccl-601-multi-nic-ethernet-channels-net-socket.log": (
        "inter-node traffic over sockets seen only in channel lines",
        lambda L, D: L.network is None and L.transports == {"NET/Socket": 1} and _has(D, "TCP sockets", "channel")),
    "nccl-447-gcp-slurm-socket-eth0-hang.log": (
        "sockets over eth0, no IB device",
        lambda L, D: L.network == "Socket" and L.bootstrap == {"eth0": {"10.0.0.33", "10.0.0.34"}}
        and _has(D, "TCP sockets", "NET/IB found no device")),
    "nccl-tests-29-socket-list-includes-virbr0.log": (
        "virbr0 (a bridge) in NCCL's socket list",
        lambda L, D: "virbr0" in L.net_devices and _has(D, "virbr0", "bridge")
        and {"mlx5_0:1", "mlx5_1:1"} <= set(L.net_devices)),
    "nccl-1597-aws-p5en-efa-ofi-libfabric.log": (
        "aws-ofi-nccl plugin, provider efa, 16 NICs",
        lambda L, D: L.network == "Libfabric" and "provider efa, 16 NICs" in L.plugins.get("aws-ofi-nccl", "")
        and _has(D, "network plugin 'Libfabric'")),
    "aws-ofi-nccl-889-cloudwatch-efa-provider-empty.log": (
        "efa provider found no device; bootstrap eth0 through CloudWatch prefixes",
        lambda L, D: L.bootstrap == {"eth0": {"10.36.29.253"}} and L.version == "2.21.5"
        and _has(D, "no EFA device")),
    "aws-ofi-nccl-24-horovod-mpirun-prefix-libfabric-av.log": (
        "NET/AWS Libfabric label kept whole; WARN Couldn't open AV",
        lambda L, D: L.transports.get("NET/AWS Libfabric") == 3 and L.transports.get("P2P/IPC") == 6
        and _has(D, "Couldn't open AV")),
    "nccl-899-gdr-disabled-no-module-net-ib-without-gdrdma.log": (
        "GDR disabled (no module); NET/IB channels without GDRDMA",
        lambda L, D: L.transports == {"NET/IB": 11} and L.gdr_why.get("mlx5_1") == "no module"
        and _has(D, "without GPUDirect RDMA") and _has(D, "disabled for mlx5_1 (no module)")),
    "nccl-1537-roce-gdr-disabled-peermem-loaded.log": (
        "RoCE mlx5_0/1 with GDR disabled for both",
        lambda L, D: L.net_devices == {"mlx5_0:1": "RoCE", "mlx5_1:1": "RoCE"} and L.gdr == {"mlx5_0": False, "mlx5_1": False}
        and L.oob == {"primaryip": {"10.10.10.10"}} and _has(D, "disabled for mlx5_0")),
    "nccl-952-hpcx-plugin-ib-not-found-net-socket-channels.log": (
        "inter-node channels via NET/Socket; bootstrap on IPoIB ibp12s0; HPC-X plugin",
        lambda L, D: L.transports.get("NET/Socket") == 2 and L.bootstrap == {"ibp12s0": {"10.149.0.32"}}
        and _has(D, "TCP sockets") and "nccl_rdma_sharp_plugin" in L.plugins.get("net plugin", "")),
    "nccl-1297-vllm-ray-ib-hca-rxe0-soft-roce.log": (
        "NCCL_IB_HCA set to rxe0, a software RDMA device",
        lambda L, D: L.ib_hca == "rxe0" and L.net_devices == {"rxe0:1": "RoCE"} and _has(D, "rxe0", "software RDMA")),
    "fastsafetensors-36-ray-double-prefix-2-nodes.log": (
        "2 ranks on 2 nodes through double Ray prefixes",
        lambda L, D: (L.ranks, L.nodes) == (2, 2) and L.hosts == {"spark2"}),
    "nccl-tests-166-shm-socket-connect-abort-chain.log": (
        "failure rooted in the connect to 10.0.0.2; SHM inside the node",
        lambda L, D: L.transports == {"SHM/direct/direct": 2}
        and D[0].startswith("connection to a peer failed") and "line 5," in D[0] and "Connect to 10.0.0.2" in L.failures[0].root
        and not _has(D, "link-local or loopback")
        and L.failures[0].frames == 6),
    "ray-46795-megatron-actor-prefix-p2p-ipc-read.log": (
        "P2P/IPC/read through the Ray prefix",
        lambda L, D: L.transports == {"P2P/IPC/read": 9} and L.hosts == {"t-20240725161813-n7hxb-worker-1"}),
    "horovod-584-lo-and-link-local-interfaces-bootstrap-refused.log": (
        "lo and a link-local address among NCCL's interfaces; bootstrap connection refused",
        lambda L, D: _has(D, "lo is a loopback") and _has(D, "eth1", "link-local")
        and _has(D, "Connection refused", "bootstrap.cu")),
    "nccl-367-docker-bridge-bootstrap-172-17.log": (
        "bootstrap on Docker's bridge address 172.17.0.2; sockets because libibverbs is missing",
        lambda L, D: _has(D, "172.17.0.2", "Docker's default bridge") and _has(D, "TCP sockets", "libibverbs")
        and L.hosts == {"c6ad99331184", "26a46eb2b1d3"} and not _has(D, "if the job spans several hosts")),
    "nccl-857-libibverbs-missing-socket-eth0.log": (
        "sockets over eth0 because libibverbs is missing",
        lambda L, D: L.network == "Socket" and L.ibverbs_missing and _has(D, "TCP sockets", "libibverbs")),
    "nccl-733-k8s-pod-box-prefix-ib-three-hcas.log": (
        "IB with mlx5_0..2 through terminal prefixes",
        lambda L, D: L.network == "IB" and set(L.net_devices) == {"mlx5_0:1", "mlx5_1:1", "mlx5_2:1"}
        and L.bootstrap == {"eth0": {"172.17.80.45"}}),
    "pytorch-68893-ansi-prefix-veth-link-local-socket.log": (
        "veth with a link-local address in NCCL's interfaces",
        lambda L, D: "veth75fa783" in L.net_devices and _has(D, "veth75fa783", "container, bridge or tunnel")
        and L.transports == {"NET/Socket": 1}),
    "lightning-14986-bootstrap-root-rank-already-checked-in.log": (
        "bootstrap root: rank 1 of 8 already checked in",
        lambda L, D: _has(D, "rank 1 of 8 ranks has already checked in") and L.net_devices == {"mlx5_0:1": "IB"}),
    "espnet-1940-line-numbers-ib-disabled-ring-net-socket.log": (
        "NCCL_IB_DISABLE=1 -> sockets over eth0",
        lambda L, D: L.env.get("NCCL_IB_DISABLE") == "1" and L.transports == {"NET/Socket": 2}
        and _has(D, "TCP sockets", "NCCL_IB_DISABLE=1")),
    "nccl-529-ip6tnl0-tunnel-and-veth-socket-interfaces.log": (
        "ip6tnl0 (link-local) and veth0 chosen as socket interfaces",
        lambda L, D: list(L.net_devices) == ["ip6tnl0", "veth0"] and _has(D, "ip6tnl0", "link-local")
        and _has(D, "veth0", "container, bridge or tunnel")),
    "nccl-975-bootstrap-connect-link-local-ib1.log": (
        "bootstrap connect to a link-local address on ib1 is the one cause",
        lambda L, D: "(line 21," in D[0] and "fe80::966d:ae03:a2:8cf0%ib1" in D[0]
        and _has(D, "further error returns without their WARN") and _has(D, "link-local or loopback address")),
    "nccl-1053-socket-ifname-lo-bgp-unnumbered.log": (
        "NCCL_SOCKET_IFNAME=lo -> 127.0.0.1",
        lambda L, D: L.net_devices == {"lo": "Socket"} and _has(D, "lo (NCCL_SOCKET_IFNAME=lo, set by", "loopback")
        and not L.gdr),  # "GPU Direct RDMA Disabled for HCA 0 'lo'" is NET/Socket's, not an HCA's
    "nccl-1814-bond0-socket-ifname-bootstrap.log": (
        "bootstrap over bond0 (a bond is real fabric)",
        lambda L, D: L.bootstrap == {"bond0": {"172.36.134.184"}} and not _has(D, "bond0 is a")),
    "uccl-172-rdma-plugin-network-comm-init-16-ranks.log": (
        "network plugin RDMA_Plugin; one 16-rank communicator",
        lambda L, D: L.network == "RDMA_Plugin" and list(L.comms) == ["0xcca15dfb770775be"]
        and L.comms["0xcca15dfb770775be"]["nranks"] == 16 and _has(D, "network plugin 'RDMA_Plugin'")),
    "nccl-1652-gcp-a3-tcpx-rx-ctrl-timeout.log": (
        "TCPX plugin rx ctrl timeouts on enp12s0/enp134s0",
        lambda L, D: "GPUDirect-TCPX" in L.plugins and _has(D, "rx ctrl timeout", "enp12s0") and L.warning_count == 2),
    "nccl-1291-gh200-bootstrap-ib0-link-local-vs-bond0.log": (
        "hosts bootstrap over different interfaces, one link-local",
        lambda L, D: _has(D, "different interfaces", "gh1: ib0", "gh2: bond0") and _has(D, "ib0", "link-local")
        and not _has(D, "X.X.X.X", "link-local")),  # a masked address is not judged
    "nccl-380-roce-ibv-create-cq-failed.log": (
        "RoCE mlx5_1 without GDRDMA; ibv_create_cq failed",
        lambda L, D: L.net_devices == {"mlx5_1:1": "RoCE"} and L.transports == {"NET/IB": 2}
        and _has(D, "ibv_create_cq failed")),
    "nccl-tests-185-dgx-h100-roce-mlx5-10-11.log": (
        "RoCE mlx5_10 and mlx5_11; bootstrap enp220s0np0",
        lambda L, D: L.net_devices == {"mlx5_10:1": "RoCE", "mlx5_11:1": "RoCE"} and L.version == "2.19.3"
        and L.bootstrap == {"enp220s0np0": {"11.1.128.128", "11.1.128.136"}}),
    "nccl-tests-228-ib-hca-set-to-prefix-list.log": (
        "NCCL_IB_HCA set to a prefix list",
        lambda L, D: L.ib_hca == "mlx5_2:1,mlx5_0:1" and _has(D, "entries are prefixes")
        and set(L.net_devices) == {"mlx5_0:1", "mlx5_2:1"}),
    "nccl-1538-nvls-multicast-available.log": (
        "NVLS multicast available",
        lambda L, D: L.nvls == {0: True, 2: True, 5: True, 6: True, 7: True} and not _has(D, "NVLS")),
    "aws-ofi-nccl-715-sagemaker-timestamps-nvls-not-available.log": (
        "NVLS multicast not available",
        lambda L, D: set(L.nvls) == {1, 2, 3, 5, 6, 7} and not any(L.nvls.values())
        and _has(D, "NVLS", "not available", "1, 2, 3, 5, 6, 7")),
    "nccl-1405-ib-plugin-completion-error-status-12.log": (
        "NET/IB completion errors status 12 from one peer",
        lambda L, D: L.warning_count == 3 and _has(D, "status=12", "10.216.210.236", "proxy.cc")),
    "nv-peer-memory-56-ib-oob-ib0-ib-disable-0.log": (
        "IB mlx5_0 with OOB on IPoIB ib0",
        lambda L, D: L.net_devices == {"mlx5_0:1": "IB"} and L.oob == {"ib0": {"192.168.11.1"}}
        and L.env == {"NCCL_IB_DISABLE": "0"}),
    "corpus-2node-16rank-roce-gdrdma-pxn.log": (
        "16 ranks on 2 nodes, GDRDMA inter-node, debugging variables set",
        lambda L, D: (L.ranks, L.nodes) == (16, 2) and set(L.transports) == {"P2P/IPC", "NET/IB/GDRDMA"}
        and _has(D, "NCCL_NET_GDR_LEVEL=PIX")),
    # -- failures first: the first finding names the cause the thread established --------------------
    "nccl-342-shm-posix-fallocate-no-prefix.log": (
        "/dev/shm too small in Docker, lines without the host prefix",
        lambda L, D: _first(L).family == "shm-full" and "No space left on device" in D[0] and not L.hosts),
    "nccl-525-kubeflow-shm-dev-prefix-only.log": (
        "/dev/shm full in a Kubernetes pod, only the [3] prefix",
        lambda L, D: _first(L).family == "shm-full" and "[3]" in D[0] and "emptyDir" in D[0]),
    "pytorch-ci-infra-490-shm-extend-timestamps.log": (
        "/dev/shm too small in CI pods; socket errors after it are consequences",
        lambda L, D: _first(L).family == "shm-full" and "2026-04-22 21:34:20" in D[0]
        and any("Socket recv failed" in c for c in _first(L).consequences)),
    "nccl-1488-h100-nvls-invalid-argument-fm-restart.log": (
        "NVLS setup fails after a Fabric Manager restart",
        lambda L, D: _first(L).family == "nvls-cuda" and "Fabric Manager" in D[0]),
    "nccl-1338-h800-nvls-invalid-argument-single-node.log": (
        "NVLS setup fails on several GPUs of one node",
        lambda L, D: _first(L).family == "nvls-cuda" and "x4" in D[0]),
    "dcgm-304-nvls-bind-401-function-name-form.log": (
        "NCCL 2.29 WARN form with (function) and a timestamp: NVLS bind 401",
        lambda L, D: _first(L).family == "nvls-bind" and L.failures[0].file == "transport/nvls.cc"),
    "pytorch-177472-distbackenderror-last-error-nvls.log": (
        "PyTorch's Last error: wraps the NVLS failure; no NCCL line",
        lambda L, D: _first(L).family == "nvls-bind" and L.version == "2.29.3" and L.nccl_lines == 0),
    "nccl-1838-cumem-host-without-p2p-l4.log": (
        "cuMem host sharing on GPUs without P2P",
        lambda L, D: _first(L).family == "cuda-p2p-unsupported" and "NCCL_CUMEM_HOST_ENABLE=0" in D[0]),
    "nccl-426-roce-completion-error-12-gid-index.log": (
        "RoCE completion error 12: GID index / traffic class",
        lambda L, D: _first(L).family == "ib-completion-timeout" and "NCCL_IB_GID_INDEX" in D[0]),
    "nccl-296-mismatched-collective-2.4-no-prefix.log": (
        "collective mismatch between ranks (NCCL 2.4, no prefix)",
        lambda L, D: _first(L).family == "net-collective-mismatch" and L.version == "2.4.8"),
    "nccl-969-pdsh-prefix-collective-mismatch.log": (
        "collective mismatch through pdsh prefixes",
        lambda L, D: _first(L).family == "net-collective-mismatch" and L.hosts == {"so-ucloud-10-10-23-10"}),
    "nccl-1176-srun-prefix-bootstrap-message-truncated.log": (
        "bootstrap message truncated through srun prefixes",
        lambda L, D: _first(L).family == "bootstrap-truncated" and host_count(L) == 2),
    "nccl-1235-oom-on-rank-3-connection-closed-on-rank-0.log": (
        "OOM on rank 3 first, the closed connection printed before it folded beneath",
        lambda L, D: _first(L).family == "cuda-oom" and any("Connection closed" in c for c in _first(L).consequences)),
    "nccl-210-2.4-warn-socket-creation-no-interface.log": (
        "early-2.x WARN without the NCCL word: no IP interface for bootstrap",
        lambda L, D: L.legacy and _first(L).family == "bootstrap-no-interface"),
    "nccl-tests-15-nccl-2.2-legacy-connect-timed-out.log": (
        "NCCL 2.2 log without the NCCL word: sockets over enp3s0, connect timed out",
        lambda L, D: L.legacy and L.version == "2.2.13" and L.network == "Socket" and L.net_devices == {"enp3s0": "Socket"}
        and _first(L).family == "connect-failed" and "Connection closed" in " ".join(_first(L).consequences)),
    "nccl-1837-socket-ifname-missing-interface-last-error.log": (
        "NCCL_SOCKET_IFNAME names a missing interface; failure in PyTorch's Last error",
        lambda L, D: _first(L).family == "bootstrap-no-interface" and L.env["NCCL_SOCKET_IFNAME"] == "eth2"),
    "aws-ofi-nccl-785-p5-static-topology-arch-not-found.log": (
        "stale static topology file of aws-ofi-nccl on a subset of p5 GPUs",
        lambda L, D: _first(L).family == "topo-file" and "aws-ofi-nccl" in D[0]),
    "horovod-3929-mpirun-prefix-duplicate-gpu.log": (
        "every rank on CUDA device 1000",
        lambda L, D: _first(L).family == "duplicate-gpu" and next(e for e in L.failures if e.kind == "warn").count == 4),
    "d-fine-289-pytorch-wrapped-duplicate-gpu.log": (
        "duplicate GPU only in PyTorch's Last error",
        lambda L, D: _first(L).family == "duplicate-gpu" and L.version == "2.19.3"),
    "nccl-tests-206-ibv-reg-mr-memlock-one-line.log": (
        "memory registration refused: the locked-memory limit",
        lambda L, D: _first(L).family == "memlock-limit" and "ulimit -l" in D[0]),
    "dlc-2675-g5-single-container-ofi-only-efa-socket-lo.log": (
        "one container's log without EFA: the plugin's WARN explained; hosts unproven, so no cross-host claim stated "
        "as fact",
        lambda L, D: _first(L).family == "ofi-no-efa" and host_count(L) is None
        and not any(f.severity != "info" for f in diagnose(L, None)[2:])
        and _has(D, "if the job spans several hosts, bootstrap interface lo is a loopback")),
    "llamafactory-7396-watchdog-timeout-allreduce.log": (
        "watchdog timeouts only: the cause is on no rank of this log",
        lambda L, D: _first(L).family == "watchdog-timeout" and "not in this log" in D[0] and "NCCL_DEBUG_SUBSYS" in D[0]),
    "pytorch-118369-watchdog-rank-7-behind.log": (
        "rank 7 is behind (SeqNum 64088 against 96125)",
        lambda L, D: _first(L).family == "watchdog-timeout" and "rank 7 is behind" in D[0]),
    "nccl-451-docker-ib-open-device-roce-bond.log": (
        "the container cannot open the host's RoCE bond; sockets over bond0 (no host prefix)",
        lambda L, D: _first(L).family == "ib-open-device" and L.network == "Socket"
        and L.bootstrap == {"bond0": {"200.1.93.2"}} and not L.hosts),
    "nccl-879-nccl-hostid-ring-does-not-loop-back.log": (
        "NCCL_HOSTID set: the ring does not loop back, behind a 'pytorch ' prefix",
        lambda L, D: _first(L).family == "topo-search" and L.hosts == {"card-16-final-4509-master-0"}
        and "NCCL_HOSTID" in _first(L).remedy),
    "nccl-905-ib-async-port-error-flapping-link.log": (
        "a port error async event quoted alone: a flapping link",
        lambda L, D: _first(L).family == "ib-async-fatal" and "cable" in _first(L).remedy),
    "nccl-976-h100-nvls-invalid-argument-fabric-manager-restarted.log": (
        "NVLS setup fails after a Fabric Manager restart (no host prefix)",
        lambda L, D: _first(L).family == "nvls-cuda" and L.version == "2.18.5" and L.failures[0].frames == 4),
    "nccl-tests-14-legacy-docker-no-ip-interface.log": (
        "NCCL 2.2-era WARNs in a container: no usable IP interface; libibverbs is only a note",
        lambda L, D: L.legacy and _first(L).family == "bootstrap-no-interface"
        and any(f.family == "ibverbs-missing" and f.severity == "warn" for f in diagnose(L, None))),
    "nccl-928-ib-completion-error-4-acs.log": (
        "completion error 4 (local protection): ACS",
        lambda L, D: _first(L).family == "ib-completion-remote" and "ACS" in _first(L).remedy),
    "nccl-778-ibv-reg-dmabuf-mr-not-supported.log": (
        "DMA-BUF registration refused by the RDMA stack",
        lambda L, D: _first(L).family == "ib-dmabuf-unsupported" and "NCCL_DMABUF_ENABLE=0" in _first(L).remedy),
    "nccl-573-wsl2-gpu-pci-path-missing-from-sysfs.log": (
        "a GPU's PCI path missing from sysfs (WSL2) fails init; its error returns make it a failure, not a note",
        lambda L, D: _first(L).family == "sysfs-missing" and _first(L).severity == "fail"
        and next(e for e in L.failures if e.family == "sysfs-missing").frames == 6 and L.version == "2.7.8"),
    "nccl-1066-each-rank-sees-only-its-gpu-nvml-not-found.log": (
        "each rank sees only its own GPU: NVML cannot find the other, on 2 processes",
        lambda L, D: _first(L).family == "nvml-gpu-not-visible" and "x2 on 2 processes" in D[0]
        and _has(D, "InfiniBand and RoCE together")),
    "nccl-1529-two-containers-one-node-nvml-not-found.log": (
        "two containers counted as one host: NVML cannot find the other container's GPU",
        lambda L, D: _first(L).family == "nvml-gpu-not-visible" and L.comms["0xc928078d70c6fe2c"]["nranks"] == 8
        and L.failures[0].last_frame == "graph/xml.cc"),
    "xgboost-5963-docker-shm-64mb-posix-fallocate-markdown-bold.log": (
        "/dev/shm of 64 MB in Docker; one WARN wrapped in markdown bold",
        lambda L, D: _first(L).family == "shm-full" and "x2 on 2 processes" in D[0] and L.hosts == {"7635c25c81cd"}),
    "nccl-2013-ibv-modify-qp-timeout-rail-only-cross-nic.log": (
        "modify QP timed out (errno 110) on a rail-only fabric: NCCL_CROSS_NIC=0",
        lambda L, D: _first(L).family == "ib-modify-qp" and "NCCL_CROSS_NIC=0" in _first(L).remedy
        and "2026-03-13 22:26:02" in D[0]),
    "nccl-626-net-socket-message-truncated-wrapped.log": (
        "socket message truncated (the WARN wrapped onto the next line): a mismatch between ranks",
        lambda L, D: _first(L).family == "net-collective-mismatch" and "192.168.161.30" in D[0]),
    "verl-161-ray-duplicate-gpu-last-error.log": (
        "duplicate GPU on the line after PyTorch's bare 'Last error:'",
        lambda L, D: _first(L).family == "duplicate-gpu" and L.version == "2.20.5" and L.nccl_lines == 0),
    "awsome-distributed-203-ofi-register-memory-efa-installer.log": (
        "aws-ofi-nccl memory registration RC -22: the EFA installer's libfabric bug",
        lambda L, D: _first(L).family == "ofi-mr" and "FI_EFA_SET_CUDA_SYNC_MEMOPS=0" in _first(L).remedy),
    "nccl-docs-docker-shm-failed-to-extend.log": (
        "the user guide's /dev/shm message",
        lambda L, D: _first(L).family == "shm-full" and "--shm-size" in _first(L).remedy),
    "nccl-docs-systemd-removeipc-unlink-shm.log": (
        "the user guide's systemd message: a segment removed under NCCL is a cause, not cleanup noise",
        lambda L, D: _first(L).family == "shm-removed" and _first(L).severity == "fail" and "RemoveIPC=no" in D[0]),
    "open-r1-multimodal-7-socket-ifname-eth0-last-error.log": (
        "NCCL_SOCKET_IFNAME names an interface the host lacks: PyTorch's bare 'Last error:' behind [rank0]: prefixes",
        lambda L, D: _first(L).family == "bootstrap-no-interface" and L.version == "2.21.5"
        and L.events[0].rank == "rank 0"),
    "pytorch-81628-ib-completion-12-gid-index-switches.log": (
        "completion error 12 right away: the NICs cannot reach each other (GID index across switches)",
        lambda L, D: _first(L).family == "ib-completion-timeout" and "NCCL_IB_GID_INDEX" in D[0]
        and "192.168.17.147" in D[0]),
    "nccl-902-ib-completion-12-nics-cannot-talk.log": (
        "completion error 12 without a peer: a timeout",
        lambda L, D: _first(L).family == "ib-completion-timeout" and L.warning_count == 1),
    "nccl-1634-net-plugin-on-part-of-the-nodes-hang.log": (
        "a network plugin on part of the nodes: the hosts load different plugins",
        lambda L, D: _first(L).family == "setting-mismatch" and "HGX-H100-11" in D[0] and "HGX-H100-04" in D[0]
        and L.net_plugin_by_host == {"HGX-H100-11": "internal",
                                     "HGX-H100-04": "/opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so"}),
    "nccl-653-nccl-algo-collnet-no-algorithm-available.log": (
        "NCCL_ALGO=CollNet leaves no algorithm: five ranks behind srun prefixes, NCCL's host name empty",
        lambda L, D: _first(L).family == "algo-proto-env" and "x5 on 5 processes" in D[0] and not L.hosts),
    "cuml-5961-cuda-driver-insufficient.log": (
        "the driver is older than the CUDA runtime",
        lambda L, D: _first(L).family == "cuda-driver-too-old" and L.hosts == {"VM-192-150-centos"}),
    "nccl-tests-276-h200-nvls-cuda-999-fabric-manager.log": (
        "NVLS setup CUDA 999 after a Fabric Manager restart without a GPU reset",
        lambda L, D: _first(L).family == "nvls-cuda" and "Fabric Manager" in D[0]),
    "nccl-tests-264-system-not-yet-initialized-fabric-manager.log": (
        "nccl-tests' own 'Test CUDA failure' line: CUDA 802, the Fabric Manager not running",
        lambda L, D: _first(L).family == "cuda-system-not-ready" and L.nccl_lines == 0
        and "nvidia-fabricmanager" in _first(L).remedy),
    "vllm-production-stack-276-pod-shm-64mb-last-error.log": (
        "/dev/shm of 64 MB in a pod, only in PyTorch's Last error inside markdown backticks",
        lambda L, D: _first(L).family == "shm-full" and L.version == "2.21.5" and L.nccl_lines == 0
        and "emptyDir" in _first(L).remedy),
    # -- shapes and false alarms ---------------------------------------------------------------------
    "nccl-1637-rtx5090-single-host-network-socket.log": (
        "single host with 'Using network Socket': no sockets-between-hosts claim",
        lambda L, D: host_count(L) == 1 and _has(D, "none needed") and not _has(D, "between hosts over TCP")
        and not any(f.severity == "fail" for f in diagnose(L, None))),
    "nccl-tests-373-merged-nic-syntax-ibext-plugin.log": (
        "merged-NIC syntax read; 3 nodes on the IBext_v8 plugin",
        lambda L, D: set(L.net_devices) == {"mlx5_0:1", "mlx5_1:1", "mlx5_2:1", "mlx5_3:1"} and L.network == "IBext_v8"
        and (L.ranks, L.nodes) == (3, 3)),
    "nccl-2057-vm-eth0-172-17-not-docker-p2p-shm-disabled.log": (
        "172.17.16.64 on a VM's eth0 is not Docker's bridge",
        lambda L, D: L.bootstrap == {"eth0": {"172.17.16.64"}} and not _has(D, "Docker")),
    "corpus-net-ib-completion-status4-hang.log": (
        "NET/IB completion status 4 (twice) through application timestamps",
        lambda L, D: L.warning_count == 2 and L.failures[0].count == 2 and _has(D, "status=4", "x2 on 2 processes")),
    "corpus-rccl-docker-socket-eth0.log": (
        "RCCL in Docker on one host: invalid device pointer first; no cross-host claim about the socket network",
        lambda L, D: L.flavour == "RCCL" and "invalid device pointer" in D[0] and _has(D, "none needed")
        and not _has(D, "Docker's default bridge") and not _has(D, "between hosts over TCP")),
}


def _cause(name: str) -> str | None:
    for line in (LOGS / name).read_text().splitlines()[:7]:
        if line.startswith("# cause: "):
            return line[9:].strip()
    return None


def test_every_fixture_has_a_case_and_a_source_header():
    """Each real log names its source and either the cause its thread established (``# cause:``, a family of the
    catalogue) or why the log shows none (``# no cause:``); at least 60 name a cause."""
    from ccdiag.nccl.catalogue import by_id

    files = {p.name for p in LOGS.glob("*.log")}
    assert files == set(CASES) and len(files) >= 60
    for name in files:
        head = (LOGS / name).read_text().splitlines()[:7]
        assert head[0].startswith(("# source:", "#ccdiag-source:")), name
        assert any(l.startswith(("# cause: ", "# no cause: ")) for l in head), name
        cause = _cause(name)
        assert cause in (None, "none") or cause in by_id(), (name, cause)
    assert len([n for n in files if _cause(n) not in (None, "none")]) >= 60


@pytest.mark.parametrize("name", sorted(CASES))
def test_real_log_gives_its_threads_key_fact(name):
    log = read_nccl_log(str(LOGS / name))
    diffs = compare(log, None)
    fact, predicate = CASES[name]
    assert predicate(log, diffs), f"{name}: {fact}\n" + "\n".join(diffs)


CAUSED = sorted(n for n in CASES if _cause(n) is not None)


@pytest.mark.parametrize("name", CAUSED)
def test_the_first_finding_names_the_threads_cause(name):
    """The first finding of each log is the cause its thread established (a family of the catalogue), or,
    where the log holds no failure, no finding is a failure."""
    cause = _cause(name)
    found = diagnose(read_nccl_log(str(LOGS / name)), None)
    if cause == "none":
        assert not any(f.severity == "fail" for f in found), [f.render() for f in found]
    else:
        assert found and found[0].family == cause, f"{name}: " + "\n".join(f.render() for f in found)
        assert found[0].meaning and found[0].remedy


def test_streamed_file_and_pasted_text_read_the_same(tmp_path):
    from ccdiag.nccl.logread import parse_nccl_log

    text = "\n".join((LOGS / n).read_text() for n in sorted(CASES))
    path = tmp_path / "all.log"
    path.write_text(text)
    a, b = read_nccl_log(str(path)).to_json(), parse_nccl_log(text).to_json()
    assert a.pop("files") == [str(path)] and b.pop("files") == []
    assert a == b and a["nccl_lines"] == b["nccl_lines"] > 0


def test_a_line_longer_than_a_chunk_is_cut_and_the_lines_after_it_are_read(tmp_path, monkeypatch):
    """SYNTHESIZED junk line (no NCCL text) between two real lines, longer than the reader's chunk."""
    from ccdiag.nccl import logread

    monkeypatch.setattr(logread, "CHUNK", 1 << 12)
    real = (LOGS / "nccl-447-gcp-slurm-socket-eth0-hang.log").read_text().splitlines()
    lines = [l for l in real if not l.startswith("#")]
    path = tmp_path / "long.log"
    path.write_text(lines[0] + "\n" + "x" * (1 << 16) + "\n" + "\n".join(lines[1:]) + "\n")
    log = read_nccl_log(str(path))
    assert log.network == "Socket" and log.bootstrap == {"eth0": {"10.0.0.33", "10.0.0.34"}}


def test_ib_hca_prefix_names_the_hcas_it_also_catches_on_the_node():
    """The real log's NCCL_IB_HCA=mlx5_2:1,mlx5_0:1 against a node (SYNTHESIZED rails) that has mlx5_20."""
    from ccdiag.nccl.knobs import SET, Knob, Recommendation

    rails = {f"mlx5_{i}": [f"GPU{i}"] for i in (0, 1, 2, 20)}
    rec = Recommendation((Knob("NCCL_IB_HCA", SET, "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_20:1", "rails", (),
                               details={"rails": rails, "left_out": {}}),), "node")
    log = read_nccl_log(str(LOGS / "nccl-tests-228-ib-hca-set-to-prefix-list.log"))
    diffs = compare(log, rec)
    assert any("mlx5_2 also selects mlx5_20" in d for d in diffs)
    assert any("rails present on the node but unused by NCCL: mlx5_1, mlx5_20" in d for d in diffs)


def test_log_json_report_validates_against_the_schema():
    import json

    import jsonschema

    from cli_runner import run

    repo = pathlib.Path(__file__).resolve().parent.parent
    schema = json.loads((repo / "ccdiag" / "schema" / "report.schema.json").read_text())
    code, out, _ = run("nccl", "--log", str(LOGS / "nccl-975-bootstrap-connect-link-local-ib1.log"),
                       "--replay", str(repo / "samples" / "hgx-h100-8gpu-healthy.snap.tar.gz"), "--json")
    doc = json.loads(out)
    jsonschema.validate(doc, schema)
    assert code == 0 and doc["nccl_log"]["failures"][0]["root"].startswith("error 2 returned")
    assert any("link-local" in d for d in doc["nccl_log"]["differences"])


@pytest.mark.slow  # every real log through the CLI at two widths (about 10 s)
@pytest.mark.parametrize("width", [80, 60])
def test_every_real_log_explained_fits_the_width(width, monkeypatch):
    """What ``ccdiag nccl --log`` prints for each real log (WARN texts from the log, meanings and
    remedies from the catalogue) fits the terminal; only a word longer than a line stands alone."""
    from cli_runner import run

    from ccdiag.core.textfit import fits

    monkeypatch.setenv("COLUMNS", str(width))
    bad = {}
    for path in sorted(LOGS.glob("*.log")):
        code, out, err = run("nccl", "--log", str(path))
        assert "Traceback" not in err, path.name
        unfit = [line for line in out.splitlines() if not fits(line, width)]
        if unfit:
            bad[path.name] = unfit[:3]
    assert not bad, bad


def test_an_ipoib_interface_in_172_17_is_not_dockers_bridge():
    """SYNTHESIZED from the real lines' form (no public log with such an address was found): two hosts
    bootstrapping over IPoIB ib0 in 172.17.0.0/16 are on a fabric, not on Docker's bridge; the same address on a
    container's eth0 is."""
    from ccdiag.nccl.logread import parse_nccl_log

    ib = parse_nccl_log("gpu1:10:10 [0] NCCL INFO Bootstrap : Using ib0:172.17.0.2<0>\n"
                        "gpu2:20:20 [0] NCCL INFO Bootstrap : Using ib0:172.17.0.3<0>\n")
    assert not any(f.family == "docker-bridge" for f in diagnose(ib, None))
    eth = parse_nccl_log("0123456789ab:10:10 [0] NCCL INFO Bootstrap : Using eth0:172.17.0.2<0>\n"
                         "ba9876543210:20:20 [0] NCCL INFO Bootstrap : Using eth0:172.17.0.2<0>\n")
    assert diagnose(eth, None)[0].family == "docker-bridge"
