"""``ccdiag cluster check``: every host's node check, gathered into one cluster report.

Why: a fleet problem is often invisible from any single host: one node on an older driver or
firmware, one with a GPU fewer, one whose links trained slower, one running another ccdiag. Each
host runs the ordinary node check (:func:`ccdiag.run.checkrun.evaluate`, bounded by its own timeout
inside the run's budget); one rank per host does it (the lowest rank there), so a host with eight
ranks is checked once. Rank 0 receives compact summaries (verdict, failures, the facts compared
across hosts), never the whole reports, so the gather stays small at any scale; ``--reports-dir``
keeps every host's full JSON report for ``ccdiag compare``.
"""

from __future__ import annotations

import os
from collections import Counter

from ccdiag import __version__
from ccdiag.cluster import reportfields as rf
from ccdiag.cluster.mpictx import Deadline, bcast_obj, gather_to_root
from ccdiag.core.findings import FAIL, PASS, WARN, Component, Evidence, Finding
from ccdiag.core.probenames import PROBE_INFINIBAND, PROBE_NETDEV, PROBE_NVML

#: facts compared across hosts (by key prefix), and how bad a difference from the majority is
FACT_SEVERITY = {
    "ccdiag_version": WARN,
    "driver_version": FAIL,
    "cuda_driver_version": WARN,
    "gpu_count": FAIL,
    "gpu_usable": FAIL,
    "gpu_models": FAIL,
    # a host whose NVML data is missing (no driver, a probe that failed) among hosts that have it
    "gpu_data": FAIL,
    "ib_firmware": WARN,
    "ib_port_rate_gbit_s": FAIL,
    # the fabric's identity: a different MTU drops large frames (size-dependent loss, RoCE
    # failing while small messages pass), a different GID layout makes one NCCL_IB_GID_INDEX wrong
    # on that host, another subnet prefix or partition key puts it on another fabric
    "mtu": FAIL,
    "ib_gid_types": FAIL,
    "ib_gid_prefix": FAIL,
    "ib_pkeys": FAIL,
    "pcie_link": WARN,
    "kernel": WARN,
}


def severity(key: str) -> str:
    return FACT_SEVERITY.get(key.split(" ", 1)[0], WARN)


def facts_from_report(doc: dict) -> dict:
    """The facts a fleet should agree on, from one ``ccdiag check --json`` document, as flat
    keys (``pcie_link GPU3 <- 0000:5c:00.0``, ``ib_port_rate_gbit_s mlx5_4/1``, ``mtu eth0``) so a
    difference names the one link, port or interface that differs. Every field is read by its type
    (:mod:`ccdiag.cluster.reportfields`): a wrong-typed one is a FieldError naming its path."""
    probes = rf.obj(doc.get("probes"), "probes")
    nvml_run = rf.obj(probes.get(PROBE_NVML), f"probes/{PROBE_NVML}")
    nvml = rf.obj(nvml_run.get("data"), f"probes/{PROBE_NVML}/data")
    gpus = rf.objs(nvml.get("gpus"), f"probes/{PROBE_NVML}/data/gpus")
    topo = rf.obj(doc.get("topology"), "topology")
    topo_gpus = topo.get("gpus")
    facts = {
        "ccdiag_version": rf.text(rf.obj(doc.get("tool"), "tool").get("version"), "tool/version"),
        "kernel": rf.text(rf.obj(doc.get("host"), "host").get("kernel"), "host/kernel"),
        "driver_version": rf.text(nvml.get("driver_version"), "nvml/data/driver_version"),
        "cuda_driver_version": rf.text(nvml.get("cuda_driver_version"), "nvml/data/cuda_driver_version"),
        "gpu_count": (len(topo_gpus) if isinstance(topo_gpus, list)
                      else rf.number(nvml.get("device_count"), "nvml/data/device_count")),
        "gpu_usable": sum(1 for g in gpus if not g.get("failed")) if gpus else None,
        "gpu_models": ",".join(sorted({rf.text(g.get("name"), "nvml/data/gpus/name") or "" for g in gpus} - {""}))
        or None,
        "gpu_data": "present" if nvml_run.get("data") is not None else "missing",
    }
    facts.update(_ib_facts(probes))
    facts.update(_mtu_facts(probes))
    for i, link in enumerate(rf.objs(topo.get("links"), "topology/links")):
        desc = rf.text(link.get("current_desc"), f"topology/links/{i}/current_desc")
        if link.get("kind") == "pcie" and desc:
            facts[f"pcie_link {rf.text(link.get('name'), f'topology/links/{i}/name')}"] = desc
    return {k: v for k, v in facts.items() if v is not None}


def _ib_facts(probes: dict) -> dict:
    """Per RDMA device: firmware; per port: rate, the type of each GID index (RoCE v1/v2: one
    ``NCCL_IB_GID_INDEX`` for every host needs the same layout), the InfiniBand subnet prefix."""
    base = f"probes/{PROBE_INFINIBAND}/data"
    data = rf.obj(rf.obj(probes.get(PROBE_INFINIBAND), f"probes/{PROBE_INFINIBAND}").get("data"), base)
    facts: dict = {}
    for i, d in enumerate(rf.objs(data.get("devices"), f"{base}/devices")):
        where = f"{base}/devices/{i}"
        name = rf.text(d.get("name"), f"{where}/name")
        fw = rf.text(d.get("fw_ver"), f"{where}/fw_ver")
        if fw:
            facts[f"ib_firmware {name}"] = f"{rf.text(d.get('hca_type'), f'{where}/hca_type')} {fw}"
        for j, port in enumerate(rf.objs(d.get("ports"), f"{where}/ports")):
            pw = f"{where}/ports/{j}"
            label = f"{name}/{rf.text(port.get('port'), f'{pw}/port')}"
            rate = rf.number(port.get("rate_gbit_s"), f"{pw}/rate_gbit_s")
            if rate is not None:
                facts[f"ib_port_rate_gbit_s {label}"] = rate
            gids = rf.objs(port.get("gids"), f"{pw}/gids")
            types = [f"{rf.text(g.get('index'), f'{pw}/gids/index')}:{rf.text(g.get('type'), f'{pw}/gids/type')}"
                     for g in gids if g.get("type")]
            if types:
                facts[f"ib_gid_types {label}"] = ",".join(types)
            first = next((rf.text(g.get("gid"), f"{pw}/gids/gid") for g in gids if g.get("index") == 0), None)
            if first and rf.text(port.get("link_layer"), f"{pw}/link_layer") == "InfiniBand":
                facts[f"ib_gid_prefix {label}"] = ":".join(first.split(":")[:4])
    return facts


def _mtu_facts(probes: dict) -> dict:
    """The MTU of each interface that can carry traffic between hosts (up, a routable IPv4
    address, not loopback or a container/bridge interface by the one usable-interface rule)."""
    from ccdiag.nccl.netif import name_problem, routable

    base = f"probes/{PROBE_NETDEV}/data"
    data = rf.obj(rf.obj(probes.get(PROBE_NETDEV), f"probes/{PROBE_NETDEV}").get("data"), base)
    facts: dict = {}
    for i, iface in enumerate(rf.objs(data.get("interfaces"), f"{base}/interfaces")):
        where = f"{base}/interfaces/{i}"
        name = rf.text(iface.get("name"), f"{where}/name")
        mtu = rf.number(iface.get("mtu"), f"{where}/mtu")
        addrs = [rf.text(a.get("address"), f"{where}/addresses/address")
                 for a in rf.objs(iface.get("addresses"), f"{where}/addresses") if a.get("family") == "inet"]
        if name and mtu is not None and iface.get("up") is True and name_problem(name) is None \
                and any(a and routable(a) for a in addrs):
            facts[f"mtu {name}"] = mtu
    return facts


def check_body(comm, work: Deadline, ident: dict, replay: str | None, timeout_s: float, reports_dir: str | None,
               policy_file: str | None = None) -> dict | None:
    """This rank's part: the node check when it leads its host, else nothing."""
    from ccdiag.cluster.pairs import plan

    got = gather_to_root(comm, ident.get("host", "?"), work.sooner(max(1.0, work.left_s() / 4)))
    the_plan = None
    extra: dict = {}
    if comm.rank == 0:
        assert got is not None  # the root holds every rank's answer
        the_plan = dict(plan(got.objs), absent=got.missing) if got.missing else plan(got.objs)
        extra = {"rank_hosts": dict(got.objs)}
    the_plan = bcast_obj(comm, the_plan, work, "cluster check set-up")
    if comm.rank not in the_plan["leaders"]:
        return {"leader": False, **extra}
    _injected_stall(comm.rank)
    return {"leader": True, **extra, **run_node_check(ident, comm.rank, replay, min(timeout_s, max(1.0, work.left_s() - 1)),
                                            reports_dir, policy_file)}


def _injected_stall(rank: int) -> None:
    """Fault injection for the tests: ``CCDIAG_CLUSTER_STALL=RANK:SECONDS`` makes that rank sit
    still before its node check, so a test can stop it (SIGSTOP) at a known point. Never set in
    production; ignored when malformed."""
    raw = os.environ.get("CCDIAG_CLUSTER_STALL", "")
    try:
        who, secs = raw.split(":")
        if int(who) == rank:
            import time

            time.sleep(float(secs))
    except ValueError:
        return


def _make_host(path: str | None):
    """The live machine, or a snapshot (a bad one is a :class:`ccdiag.host.snapshot.SnapshotError`, a
    user-input error naming the file)."""
    from ccdiag.host.door import LiveHost, ReplayHost

    return ReplayHost(path) if path else LiveHost("/")


def run_node_check(ident: dict, rank: int, replay: str | None, timeout_s: float, reports_dir: str | None,
                   policy_file: str | None) -> dict:
    from ccdiag.cluster.pkeys import pkey_facts
    from ccdiag.run.checkrun import close_host, evaluate
    from ccdiag.core.errors import CcdiagError
    from ccdiag.report.document import build_report

    host_name = ident.get("host", "?")
    path = replay.replace("{host}", host_name).replace("{rank}", str(rank)) if replay else None
    try:
        policy = None
        if policy_file:
            from ccdiag.inputs.policy import load_policy

            policy = load_policy(policy_file)
        host = _make_host(path)
    except CcdiagError as exc:
        return {"host": host_name, "exit_code": int(exc.exit_code), "error": str(exc), "facts": {}}
    except Exception as exc:  # noqa: BLE001 - one host's bad input is reported, not raised
        return {"host": host_name, "exit_code": 2, "error": f"{type(exc).__name__}: {exc}", "facts": {}}
    result = None
    try:
        result = evaluate(host, policy, deadline_s=timeout_s, load_links=False)
        nccl, nccl_full = _nccl_settings(host, result)
        pkeys = pkey_facts(host)
    finally:
        close_host(host, result=result)
    # the full recommendation rides in the host's own report only (``ccdiag compare`` reads its settings)
    doc = build_report("check", result.meta, runs=result.runs, topology=result.topology, findings=result.findings,
                       exit_code=result.exit_code, run_info=result.run_info(path), extra={"nccl": nccl_full})
    doc["tool"]["version"] = __version__
    # the host the rank ran on (a replayed snapshot carries the recorded machine's own name)
    doc["host"]["rank_host"] = host_name
    write_error = _write_report(reports_dir, host_name, doc) if reports_dir else None
    fails = [f for f in result.findings if f.status == FAIL]
    return {"host": host_name, "exit_code": int(result.exit_code), "status": result.status,
            **({"error": write_error, "exit_code": 2} if write_error else {}),
            "reason": doc.get("verdict", {}).get("reason"), "timed_out": bool(result.timed_out),
            "failures": [f"{f.check} {f.component.name}: {f.summary}" for f in fails[:20]],
            "failure_count": len(fails), "facts": {**facts_from_report(doc), **pkeys}, "nccl": nccl}


def _nccl_settings(host, result) -> tuple[dict, dict | None]:
    """The NCCL settings this host would write, or why not, and the whole recommendation
    (:func:`ccdiag.cluster.nccl_agree.node_recommendation`)."""
    from ccdiag.cluster.nccl_agree import node_recommendation

    if result.timed_out and result.topology is None:
        return {"error": "the node check ran out of time"}, None
    try:
        return node_recommendation(host, result.runs, result.topology)
    except Exception as exc:  # noqa: BLE001 - one host's failure is its finding, the others are still compared
        return {"error": f"ccdiag could not compute it ({type(exc).__name__}: {exc})"}, None


def _write_report(reports_dir: str, host_name: str, doc: dict) -> str | None:
    """Write this host's full report to ``reports_dir``; the reason when it could not be written
    (the host's line then says so: a report asked for and silently missing is never a pass)."""
    from ccdiag.core.output import write_atomic
    from ccdiag.report.document import dumps

    path = os.path.join(reports_dir, f"{host_name}.json")
    try:
        os.makedirs(reports_dir, exist_ok=True)
        write_atomic(path, dumps(doc) + "\n")
    except OSError as exc:
        return f"--reports-dir: cannot write {path}: {exc.strerror or exc}"
    return None


def consistency(facts_by_host: dict[str, dict]) -> list[Finding]:
    """One finding per fact where some hosts differ from the majority, naming them and both
    values. Needs three hosts to have a majority; with two, a difference is reported for both."""
    out: list[Finding] = []
    keys = sorted({k for f in facts_by_host.values() for k in f})
    for key in keys:
        values = {h: f.get(key) for h, f in facts_by_host.items()}
        counts = Counter(v for v in values.values())
        if len(counts) <= 1:
            continue
        (major, nmaj), = counts.most_common(1)
        tie = len(facts_by_host) < 3 or list(counts.values()).count(nmaj) > 1
        odd = {h: v for h, v in values.items() if v != major or tie}
        sev = severity(key)
        for h, v in sorted(odd.items()):
            out.append(Finding(
                check=f"cluster.consistency.{key}", status=sev, component=Component(kind="node", name=h),
                summary=(f"{h}: {key} is {v!r}; {nmaj} of {len(values)} hosts have {major!r}" if not tie else
                         f"{h}: {key} is {v!r}; the hosts disagree ({dict(counts)})"),
                evidence=(Evidence(key, v, f"ccdiag check on {h}"),
                          Evidence(f"{key} of the majority", major, f"{nmaj} of {len(values)} hosts")),
                expected=f"the same {key} as the rest of the job's hosts", expected_source="cluster majority",
                remedy="bring the host in line with the fleet (driver/firmware/ccdiag install) or leave it out "
                       "of the job",
                details={"key": key, "value": v, "majority": major, "hosts_with_majority": nmaj}))
    return out


def _nccl_agreement(summaries: dict[int, dict]) -> list[Finding]:
    """Hosts whose NCCL recommendation differs from the majority's (:mod:`ccdiag.cluster.nccl_agree`).
    A host whose check could not run has no facts and is left to its own ``cluster.host_check`` finding."""
    from ccdiag.cluster.nccl_agree import agreement

    settings: dict[str, dict] = {}
    errors: dict[str, str] = {}
    for rank, s in sorted(summaries.items()):
        if not s or not s.get("leader") or not s.get("facts"):
            continue
        h = s.get("host", f"rank {rank}")
        nccl = s.get("nccl") or {"error": "this host's ccdiag did not report one (an older version?)"}
        if isinstance(nccl.get("settings"), dict):
            settings[h] = nccl["settings"]
        else:
            errors[h] = str(nccl.get("error") or "no settings reported")
    return agreement(settings, errors)


def cluster_findings(summaries: dict[int, dict], missing: list[int], idents: dict[int, dict]) -> list[Finding]:
    """Per-host verdicts as findings, the consistency findings, and one per silent rank."""
    out: list[Finding] = []
    facts: dict[str, dict] = {}
    for rank, s in sorted(summaries.items()):
        if not s or not s.get("leader"):
            continue
        h = s.get("host", f"rank {rank}")
        if s.get("facts"):
            # a host with no facts (its check could not run) is that host's one finding below,
            # not a difference on every fact the others agree on
            facts[h] = s["facts"]
        code = s.get("exit_code", 3)
        status = PASS if code == 0 else FAIL if code == 1 else "unknown"
        why = s.get("error") or s.get("reason") or ("; ".join(s.get("failures", [])[:3]))
        out.append(Finding(check="cluster.host_check", status=status, component=Component(kind="node", name=h),
                           summary=f"{h}: {'passes' if code == 0 else why or 'could not be evaluated'}",
                           evidence=(Evidence("exit code", code, f"ccdiag check on {h} (rank {rank})"),),
                           details={"rank": rank, "failures": s.get("failures", []),
                                    "failure_count": s.get("failure_count", 0)}))
    out += consistency(facts)
    out += _nccl_agreement(summaries)
    for r in missing:
        host = idents.get(r, {}).get("host", "unknown host")
        out.append(Finding(check="cluster.rank_silent", status="unknown",
                           component=Component(kind="node", name=f"rank {r}"),
                           summary=f"rank {r} ({host}) did not answer by the deadline: dead, hung or unreachable"))
    return out


def failing(f: Finding) -> bool:
    """What fails a cluster: a host that fails its own check, and a host that differs from the
    majority (WARN on a fact); a host's own warnings stay its own."""
    return f.status == FAIL or (f.status == WARN and f.check != "cluster.host_check")


def exit_code(findings: list[Finding], unevaluated: bool) -> int:
    """``cluster check``'s exit: a failure decides, whatever else is UNKNOWN (a GPU-less host, a
    silent rank) (:mod:`ccdiag.cluster.verdict`)."""
    from ccdiag.cluster import verdict

    return verdict.exit_code(findings, unevaluated=unevaluated, failing=failing)
