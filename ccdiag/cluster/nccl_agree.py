"""Each host's NCCL recommendation, compared across the job's hosts: who differs from the majority.

Why: ``ccdiag nccl --format env`` writes settings meant for every healthy node of one kind, and a
Slurm prolog or job script sources that one file on every node. A node's own faults (a rail down)
never change those settings (:func:`ccdiag.nccl.recommend.node_faults`), so healthy and degraded
nodes of one kind write the same file. A node that would write *another* file differs from its peers
in hardware or configuration: a different ``NCCL_IB_HCA`` list is an HCA missing, renamed or moved
away from its GPU; another ``NCCL_SOCKET_IFNAME`` is an interface named differently; another
``NCCL_TOPO_FILE`` a provider file absent. The shared settings are wrong for that node, so it is named
with each setting that differs (its value against the majority's) and told to be fixed or drained.

Only the settings are compared (:meth:`ccdiag.nccl.knobs.Recommendation.settings`), never the
reasons or evidence, which name each node's own bus ids and counters. A majority is more than half of
the hosts whose recommendation was computed; with a tie, or one host, nothing can be said about who is
right, and the finding says so (``unknown`` / ``skip``), never ``pass``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Mapping

from ccdiag.core.findings import FAIL, PASS, SKIP, UNKNOWN, WARN, Component, Evidence, Finding

if TYPE_CHECKING:
    from ccdiag.host.door import Host
    from ccdiag.topology.model import Topology

CHECK = "cluster.nccl_recommendation"
#: settings whose difference means the node's rails differ (a job on it would use other NICs)
RAIL_SETTINGS = ("NCCL_IB_HCA", "NCCL_SOCKET_IFNAME")
#: what a difference in each setting usually means, for the remedy
MEANING = {
    "NCCL_IB_HCA": "a different NCCL_IB_HCA list means an HCA missing, renamed (another mlx5_N numbering) or "
                   "not beside the GPU it serves on its peers",
    "NCCL_SOCKET_IFNAME": "a different NCCL_SOCKET_IFNAME means its fastest interfaces are named or addressed "
                          "differently",
    "NCCL_TOPO_FILE": "a different NCCL_TOPO_FILE means its PCI tree (or its provider topology file) differs",
}


def node_settings(host: Host, runs: Mapping[str, Any], topology: Topology | None) -> dict:
    """``{"settings": {...}, "source": ...}``: the settings ``ccdiag nccl --format env`` would write for this
    host, from the probe runs and topology of its check; or ``{"error": why}`` when none can be computed."""
    return node_recommendation(host, runs, topology)[0]


def node_recommendation(host: Host, runs: Mapping[str, Any], topology: Topology | None) -> tuple[dict, dict | None]:
    """:func:`node_settings`'s answer, and the whole recommendation as ``ccdiag nccl --json`` gives it
    (each setting's reason and evidence; None when there is none). The first is small and travels to
    rank 0; the second goes only into the host's own report (``cluster check --reports-dir``)."""
    from ccdiag.nccl.recommend import recommend
    from ccdiag.run.observe import nccl_settings_seen

    if topology is None:
        return {"error": "the check ran out of time before the topology was built"}, None
    if not topology.gpus() and not topology.nics():
        return {"error": "no GPU and no NIC was read, so there is nothing to recommend"}, None
    seen = nccl_settings_seen(host)
    rec = recommend(topology, runs, env=seen.env, env_source=seen.source, env_unread=seen.unread)
    return {"settings": rec.settings(), "source": seen.source}, rec.to_json()


def _key(settings: Mapping[str, str]) -> str:
    return json.dumps(dict(settings), sort_keys=True)


def differences(mine: Mapping[str, str], theirs: Mapping[str, str]) -> dict[str, tuple[str | None, str | None]]:
    """Setting -> (this host's value, the other's), for every setting that differs (None: not set)."""
    return {k: (mine.get(k), theirs.get(k)) for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k)}


def _shown(v: str | None) -> str:
    return "unset" if v is None else repr(v)


def agreement(settings_by_host: Mapping[str, Mapping[str, str]], errors: Mapping[str, str]) -> list[Finding]:
    """The findings of the comparison: one ``pass`` when every host agrees, one per minority host
    when a majority exists, one ``unknown`` on a tie, one ``skip`` for a single host; plus one
    ``unknown`` per host (in ``errors``) whose recommendation could not be computed."""
    out = [_not_computed(h, why) for h, why in sorted(errors.items())]
    groups: dict[str, list[str]] = {}
    for h, s in settings_by_host.items():
        groups.setdefault(_key(s), []).append(h)
    n = len(settings_by_host)
    if n == 0:
        return out
    ranked = sorted(groups.items(), key=lambda kv: (-len(kv[1]), sorted(kv[1])))
    major_key, major_hosts = ranked[0]
    majority = json.loads(major_key)
    if n == 1:
        (h,) = settings_by_host
        return out + [Finding(CHECK, SKIP, Component("cluster", "nccl"),
                              f"only {h}'s NCCL recommendation was computed: no other host to compare it with",
                              details={"hosts": [h], "settings": majority})]
    if len(groups) == 1:
        return out + [Finding(CHECK, PASS, Component("cluster", "nccl"),
                              f"all {n} hosts would write the same NCCL settings ({len(majority)} variables)",
                              evidence=(Evidence("NCCL settings", majority, f"ccdiag nccl on each of {n} hosts"),),
                              details={"hosts": sorted(major_hosts), "settings": majority})]
    if len(major_hosts) * 2 <= n:
        return out + [_tie(ranked, n)]
    for key, hosts in ranked[1:]:
        for h in sorted(hosts):
            out.append(_minority(h, json.loads(key), majority, len(major_hosts), n))
    return out


def _not_computed(host: str, why: str) -> Finding:
    return Finding(CHECK, UNKNOWN, Component("node", host),
                   f"{host}: its NCCL recommendation could not be computed ({why}), so it was not compared",
                   remedy=f"run `ccdiag nccl` on {host} to see what it reads; re-run the cluster check once it does")


def _minority(host: str, mine: dict, majority: dict, nmaj: int, n: int) -> Finding:
    diff = differences(mine, majority)
    rails = [k for k in diff if k in RAIL_SETTINGS]
    said = "; ".join(f"{k} {_shown(a)} here, {_shown(b)} on {nmaj} of {n} hosts" for k, (a, b) in diff.items())
    meanings = [MEANING[k] for k in diff if k in MEANING]
    return Finding(
        CHECK, FAIL if rails else WARN, Component("node", host),
        f"{host}: its NCCL recommendation differs from the majority's ({nmaj} of {n} hosts): {said}",
        evidence=tuple(Evidence(k, a, f"ccdiag nccl on {host}") for k, (a, _) in diff.items()) +
        tuple(Evidence(f"{k} of the majority", b, f"{nmaj} of {n} hosts") for k, (_, b) in diff.items()),
        expected="the same NCCL settings as the other hosts of the job", expected_source="cluster majority",
        remedy=(f"{host} differs in hardware or configuration from its peers" +
                (f" ({'; '.join(meanings)})" if meanings else "") +
                f": fix it, or drain it from jobs that use the shared settings, before they are used; "
                f"`ccdiag nccl` on {host} names what it read"),
        details={"differences": {k: {"host": a, "majority": b} for k, (a, b) in diff.items()},
                 "hosts_with_majority": nmaj, "hosts_compared": n})


def _tie(ranked: list[tuple[str, list[str]]], n: int) -> Finding:
    groups = [{"hosts": sorted(hosts), "settings": json.loads(key)} for key, hosts in ranked]
    first = groups[0]["settings"]
    keys = sorted({k for g in groups[1:] for k in differences(g["settings"], first)})
    said = "; ".join(f"{', '.join(g['hosts'])}: " + ", ".join(f"{k}={_shown(g['settings'].get(k))}" for k in keys)
                     for g in groups)
    return Finding(CHECK, UNKNOWN, Component("cluster", "nccl"),
                   f"the {n} hosts' NCCL recommendations split {'/'.join(str(len(g['hosts'])) for g in groups)} "
                   f"with no majority, so no host can be named as the odd one: {said}",
                   expected="one NCCL recommendation shared by more than half of the hosts",
                   remedy="compare `ccdiag nccl --json` of the groups' hosts, or run the check with more hosts of "
                          "the same kind so that a majority shows which group is the odd one",
                   details={"groups": groups})


__all__ = ["CHECK", "agreement", "differences", "node_recommendation", "node_settings"]
