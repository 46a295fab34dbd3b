"""The environment a job will run in: NCCL settings that disable transports or name interfaces and
HCAs that are not there, /dev/shm size, and the locked-memory limit RDMA needs.

NCCL list syntax (NCCL_SOCKET_IFNAME, NCCL_IB_HCA) is read by :mod:`ccdiag.nccl.lists`, the same
module the NCCL recommender writes its lists with.
"""

from __future__ import annotations

from typing import Any

from ccdiag.checks import CheckContext, check
from ccdiag.checks.infiniband import all_ports, is_active, port_path
from ccdiag.checks.common import gate, node_component, policy_source
from ccdiag.core.findings import FAIL, PASS, SKIP, UNKNOWN, WARN, Component, Evidence, Finding
from ccdiag.nccl import netif
from ccdiag.nccl.lists import nccl_match, parse_nccl_list
from ccdiag.core.probenames import PROBE_INFINIBAND, PROBE_NETDEV, PROBE_NVML, PROBE_SYSTEM
from ccdiag.probes.registry import UNAVAILABLE

MIB = 1 << 20
GIB = 1 << 30
#: below this /dev/shm is not just small but the container-default trap (Docker gives 64 MiB)
SHM_FAIL_BELOW = 256 * MIB
#: a finite memlock limit below this breaks RDMA memory registration outright
MEMLOCK_FAIL_BELOW = GIB

DISABLE_KNOBS = {
    "NCCL_P2P_DISABLE": "direct GPU-to-GPU transfers (NVLink/PCIe P2P); traffic is staged through host memory",
    "NCCL_IB_DISABLE": "the InfiniBand/RoCE transport; inter-node traffic falls back to TCP sockets",
    "NCCL_SHM_DISABLE": "the shared-memory transport between processes on this node",
}


def _env_comp(var: str) -> Component:
    return Component("env", var)


def _env_ev(ctx: CheckContext, var: str) -> Evidence:
    return Evidence(var, ctx.env.get(var), ctx.env_source)


def _nccl_int(value: str) -> int | None:
    try:
        return int(value.strip(), 0)
    except ValueError:
        return None


# ---------------------------------------------------------------- transport switches

def _rdma_present(ctx: CheckContext) -> bool:
    ib = ctx.data(PROBE_INFINIBAND)
    return bool(ib is not None and all_ports(ib))


def _gpu_count(ctx: CheckContext) -> int | None:
    nvml = ctx.data(PROBE_NVML)
    return len(nvml.gpus) if nvml is not None else None


@check("env.nccl_disable", uses=(PROBE_INFINIBAND, PROBE_NVML))
def nccl_disable(ctx: CheckContext) -> list[Finding]:
    """NCCL_P2P_DISABLE / NCCL_IB_DISABLE / NCCL_SHM_DISABLE switch transports off: debugging knobs
    that quietly cost bandwidth when left in a job script."""
    out: list[Finding] = []
    for var, what in DISABLE_KNOBS.items():
        if var not in ctx.env:
            continue
        val = _nccl_int(ctx.env[var])
        ev = (_env_ev(ctx, var),)
        if val == 0:
            out.append(Finding("env.nccl_disable", PASS, _env_comp(var), f"{var}=0 (transport enabled)", ev))
            continue
        moot = None
        if var == "NCCL_IB_DISABLE" and ctx.runs.get(PROBE_INFINIBAND) and not _rdma_present(ctx) \
                and ctx.runs[PROBE_INFINIBAND].status in ("ok", "partial", UNAVAILABLE):
            moot = "no RDMA devices on this node, so nothing is lost"
        gpu_count = _gpu_count(ctx) if var == "NCCL_P2P_DISABLE" else None
        if gpu_count is not None and gpu_count < 2:
            moot = "fewer than two GPUs, so nothing is lost"
        if moot:
            out.append(Finding("env.nccl_disable", PASS, _env_comp(var), f"{var}={ctx.env[var]}: {moot}", ev))
            continue
        shown = ctx.env[var] if val is None else val
        out.append(Finding(
            "env.nccl_disable", WARN, _env_comp(var), f"{var}={shown} disables {what}", ev,
            expected="unset", expected_source="NCCL user guide: a debugging variable, not for production",
            remedy=f"Remove {var} from the job environment (or {ctx.env_source}) unless you are debugging; "
                   "if it works around a hang, fix the cause (ACS, peermem, topology) instead."))
    if not out:
        out.append(Finding("env.nccl_disable", PASS, _env_comp("NCCL_*_DISABLE"),
                           f"no NCCL transport is disabled in {ctx.env_source}"))
    return out


# ---------------------------------------------------------------- NCCL_SOCKET_IFNAME

@check("env.socket_ifname", uses=(PROBE_NETDEV,))
def socket_ifname(ctx: CheckContext) -> list[Finding]:
    """NCCL_SOCKET_IFNAME selects interfaces that can carry traffic between hosts, judged by the one
    usable-interface rule (:mod:`ccdiag.nccl.netif`) that the NCCL recommender and the cluster run use."""
    var = "NCCL_SOCKET_IFNAME"
    if not ctx.env.get(var, "").strip():
        return [Finding("env.socket_ifname", SKIP, _env_comp(var), f"{var} not set: NCCL chooses interfaces itself")]
    gated = gate(ctx, "env.socket_ifname", "network interfaces", probes=(PROBE_NETDEV,))
    if gated:
        return [gated]
    ifaces = list(ctx.data(PROBE_NETDEV).interfaces)
    verdict = netif.judge_list(ctx.env[var], [netif.from_netdev(i) for i in ifaces])
    ev = (_env_ev(ctx, var), Evidence("interfaces", {i.name: (i.operstate or ("up" if i.up else "down"))
                                                     for i in ifaces}, "/sys/class/net"))
    comp = _env_comp(var)
    if verdict.ok:
        return [Finding("env.socket_ifname", PASS, comp, f"{var}={ctx.env[var]} selects {', '.join(verdict.chosen)}",
                        ev)]
    return [Finding("env.socket_ifname", FAIL, comp, f"{var}={ctx.env[var]}: " + "; ".join(verdict.problems), ev,
                    expected="every entry names an existing interface that is up with an address and is not "
                             "loopback, a container/bridge/tunnel interface or a bridge member",
                    expected_source="NCCL user guide (NCCL_SOCKET_IFNAME syntax)",
                    remedy=f"Fix {var} in {ctx.env_source}; usable interfaces here: "
                           f"{', '.join(verdict.usable) or 'none'}. Prefer exact names (`=eth0`).",
                    details={"usable": list(verdict.chosen)})]


# ---------------------------------------------------------------- NCCL_IB_HCA

def _hca_entry(spec: Any, e: Any, devices: list) -> tuple[str | None, list]:
    """(problem, active (device, port) pairs) of one NCCL_IB_HCA entry."""
    matched = [d for d in devices if nccl_match(spec, e, d.name)]
    if not matched:
        spaces = " (NCCL strips no spaces from list entries)" if e.name != e.name.strip() else ""
        return f"'{e.raw}': no such HCA" + ("" if spec.exact else " (as a prefix)") + spaces, []
    ports = [(d, p) for d in matched for p in d.ports if e.port is None or p.port == e.port]
    if not ports:
        return f"'{e.raw}': {', '.join(d.name for d in matched)} has no port {e.port}", []
    active = [(d, p) for d, p in ports if is_active(p)]
    if not active:
        return f"'{e.raw}': " + ", ".join(f"{d.name} port {p.port} is {p.state or '?'}" for d, p in ports), []
    return None, active


def _prefix_extra(spec: Any, e: Any, devices: list) -> str | None:
    """A prefix entry naming one HCA exactly that also catches others (mlx5_1 -> mlx5_10, mlx5_11)."""
    matched = [d.name for d in devices if nccl_match(spec, e, d.name)]
    if spec.exact or e.name not in matched or len(matched) < 2:
        return None
    return f"'{e.name}' also selects {', '.join(n for n in matched if n != e.name)}"


def _hca_exclude(ctx: CheckContext, spec: Any, devices: list, ev: list) -> Finding:
    var, comp = "NCCL_IB_HCA", _env_comp("NCCL_IB_HCA")
    left = [(d, p) for d in devices for p in d.ports if is_active(p) and not spec.matches(d.name, p.port)]
    if not left:
        return Finding("env.ib_hca", FAIL, comp, f"{var}={ctx.env[var]} excludes every active HCA port", tuple(ev),
                       expected="at least one active HCA port left", expected_source=HCA_SYNTAX,
                       remedy=f"Fix {var}; NCCL would fall back to TCP sockets.")
    return Finding("env.ib_hca", PASS, comp, f"{var}={ctx.env[var]} leaves "
                   + ", ".join(f"{d.name}:{p.port}" for d, p in left), tuple(ev))


def _hca_include(ctx: CheckContext, spec: Any, devices: list, ev: list, usable: bool) -> Finding:
    var, comp = "NCCL_IB_HCA", _env_comp("NCCL_IB_HCA")
    problems, chosen = [], []
    for e in spec.entries:
        why, active = _hca_entry(spec, e, devices)
        if why:
            problems.append(why)
        ev += [Evidence(f"{d.name} port {p.port} state", p.state, port_path(d.name, p.port, "state")) for d, p in active]
        chosen += [f"{d.name}:{p.port}" for d, p in active]
    if problems:
        active_all = ", ".join(f"{d.name}:{p.port}" for d in devices for p in d.ports if is_active(p))
        return Finding("env.ib_hca", FAIL, comp, f"{var}={ctx.env[var]}: " + "; ".join(problems), tuple(ev),
                       expected="every entry names an existing HCA (and port) that is ACTIVE",
                       expected_source=HCA_SYNTAX,
                       remedy=f"Fix {var} in {ctx.env_source} to the active HCAs: "
                              + ((active_all or "none") if usable else "none on this node")
                              + " (use `=` for exact names).",
                       details={"usable": chosen})
    extra = [x for e in spec.entries for x in [_prefix_extra(spec, e, devices)] if x]
    if extra:
        return Finding("env.ib_hca", WARN, comp, f"{var}={ctx.env[var]}: entries are prefixes; " + "; ".join(extra),
                       tuple(ev), expected="exact names", expected_source=HCA_SYNTAX,
                       remedy=f"Prefix the list with '=' ({var}={'=' + ctx.env[var]}) so each entry selects one HCA.",
                       details={"selected": chosen})
    return Finding("env.ib_hca", PASS, comp, f"{var}={ctx.env[var]} selects {', '.join(chosen)}", tuple(ev))


HCA_SYNTAX = "NCCL user guide (NCCL_IB_HCA syntax)"


@check("env.ib_hca", uses=(PROBE_INFINIBAND,))
def ib_hca(ctx: CheckContext) -> list[Finding]:
    """NCCL_IB_HCA names HCAs and ports that exist and are active (and no prefix catches extra HCAs)."""
    var = "NCCL_IB_HCA"
    if not ctx.env.get(var, "").strip():
        return [Finding("env.ib_hca", SKIP, _env_comp(var), f"{var} not set: NCCL uses every active HCA")]
    run = ctx.runs.get(PROBE_INFINIBAND)
    if run is None or not (run.usable or run.status == UNAVAILABLE):
        return [gate(ctx, "env.ib_hca", "RDMA devices", probes=(PROBE_INFINIBAND,)) or
                Finding("env.ib_hca", UNKNOWN, node_component(), "RDMA devices not read")]
    devices = list(ctx.data(PROBE_INFINIBAND).devices) if run.usable else []
    spec = parse_nccl_list(ctx.env[var])
    ev = [_env_ev(ctx, var), Evidence("HCAs", {d.name: {p.port: p.state for p in d.ports} for d in devices},
                                      "/sys/class/infiniband/*/ports/*/state")]
    if spec.exclude:
        return [_hca_exclude(ctx, spec, devices, ev)]
    return [_hca_include(ctx, spec, devices, ev, run.usable)]


# ---------------------------------------------------------------- /dev/shm and memlock

def _size(n: int) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"


def _policy_or_default(ctx: CheckContext, key: str, default_why: str) -> str:
    return policy_source(ctx, key) if ctx.policy.source else f"built-in default ({default_why})"


@check("env.shm", needs=(PROBE_SYSTEM,), what="/dev/shm size")
def shm(ctx: CheckContext) -> list[Finding]:
    """/dev/shm large enough for NCCL's shared-memory buffers (containers default to 64 MiB)."""
    comp = Component("limit", "/dev/shm")
    size = ctx.data(PROBE_SYSTEM).shm_bytes
    want = ctx.policy.min_shm_bytes
    if size is None:
        return [Finding("env.shm", UNKNOWN, comp, "/dev/shm size could not be read")]
    ev = (Evidence("size", size, "statvfs(/dev/shm)"),)
    src = _policy_or_default(ctx, "min_shm_bytes", "NVIDIA container guidance: --shm-size=1g")
    if size >= want:
        return [Finding("env.shm", PASS, comp, f"/dev/shm is {_size(size)}", ev,
                        expected=f">= {_size(want)}", expected_source=src)]
    return [Finding(
        "env.shm", FAIL if size < SHM_FAIL_BELOW else WARN, comp,
        f"/dev/shm is only {_size(size)}" + (" (the Docker default)" if size == 64 * MIB else ""), ev,
        expected=f">= {_size(want)}", expected_source=src,
        remedy="NCCL puts its intra-node buffers in /dev/shm and crashes or fails to initialise when it is "
               "full. In a container use `--shm-size=1g` (or more) / a Kubernetes emptyDir with medium Memory; "
               "on the host remount larger (`mount -o remount,size=... /dev/shm`).")]


@check("env.memlock", uses=(PROBE_SYSTEM, PROBE_INFINIBAND))
def memlock(ctx: CheckContext) -> list[Finding]:
    """Locked-memory limit high enough for RDMA memory registration (unlimited unless the policy says)."""
    comp = Component("limit", "memlock (RLIMIT_MEMLOCK)")
    if not _rdma_present(ctx):
        run = ctx.runs.get(PROBE_INFINIBAND)
        stopped = gate(ctx, "env.memlock", "RDMA devices", probes=(PROBE_INFINIBAND,)) \
            if run is not None and run.status not in ("ok", "partial", UNAVAILABLE) else None
        if stopped is not None:
            return [stopped]
        return [Finding("env.memlock", SKIP, comp, "no RDMA devices: the locked-memory limit does not matter")]
    gated = gate(ctx, "env.memlock", "locked-memory limit", probes=(PROBE_SYSTEM,))
    if gated:
        return [gated]
    s = ctx.data(PROBE_SYSTEM)
    ev = (Evidence("memlock soft/hard", {"soft": s.memlock_soft_bytes, "hard": s.memlock_hard_bytes,
                                         "unlimited": s.memlock_unlimited}, "RLIMIT_MEMLOCK of the ccdiag process"),)
    want = ctx.policy.min_memlock_bytes
    if s.memlock_unlimited:
        return [Finding("env.memlock", PASS, comp, "memlock unlimited", ev)]
    soft = s.memlock_soft_bytes
    if soft is None:
        return [Finding("env.memlock", UNKNOWN, comp, "locked-memory limit could not be read", ev)]
    remedy = ("RDMA pins buffers and fails registration (`ibv_reg_mr`: Cannot allocate memory) beyond this "
              "limit. Set `ulimit -l unlimited` for jobs: LimitMEMLOCK=infinity for slurmd/dockerd, "
              "`--ulimit memlock=-1` for containers, or memlock in /etc/security/limits.conf. This is the limit "
              "of the process that ran ccdiag; jobs inherit theirs from their launcher.")
    if want is not None:
        if soft >= want:
            return [Finding("env.memlock", PASS, comp, f"memlock {_size(soft)}", ev, expected=f">= {_size(want)}",
                            expected_source=policy_source(ctx, "min_memlock_bytes"))]
        return [Finding("env.memlock", FAIL, comp, f"memlock is {_size(soft)}, below {_size(want)}", ev,
                        expected=f">= {_size(want)}", expected_source=policy_source(ctx, "min_memlock_bytes"),
                        remedy=remedy)]
    return [Finding("env.memlock", FAIL if soft < MEMLOCK_FAIL_BELOW else WARN, comp,
                    f"memlock is {_size(soft)}, not unlimited, on a node with RDMA devices", ev,
                    expected="unlimited", expected_source="RDMA memory registration (NVIDIA container guidance: "
                                                          "--ulimit memlock=-1)",
                    remedy=remedy)]
