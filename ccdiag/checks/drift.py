"""Drift from a known-good set: the node's versions against its machine type's in the policy.

A node of a fleet reimaged with an older driver, a card replaced with older firmware, an NCCL
package left behind: each still passes every check of its own, and a job spanning it and its
neighbours fails or slows. The policy's ``[[known_good]]`` tables (``ccdiag policy init`` on a node
known to be good; ``ccdiag/inputs/knowngood.py``) hold each machine type's versions; this check
names each value of this node that differs from its type's set, with both values. A difference is a
warning (``on_drift = "fail"`` in the set makes it a failure that drains); a value the set names and
the node did not give (an older snapshot without VBIOS, a probe that failed) is unknown, never a pass.
"""

from __future__ import annotations

from typing import Any

from ccdiag.checks import CheckContext, check
from ccdiag.checks.common import NODE
from ccdiag.core.findings import FAIL, PASS, SKIP, UNKNOWN, WARN, Evidence, Finding
from ccdiag.core.probenames import PROBE_INFINIBAND, PROBE_NVML, PROBE_PLATFORM, PROBE_SYSTEM
from ccdiag.inputs.knowngood import KEYS, data_of_runs, differences, machine_type, pick, versions

CHECK = "drift.known_good"


def _show(value: Any) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, list):
        return ", ".join(value) if value else "(none)"
    return str(value)


@check(CHECK, uses=(PROBE_NVML, PROBE_SYSTEM, PROBE_INFINIBAND, PROBE_PLATFORM),
       what="driver, firmware and NCCL versions against the policy's known-good set")
def known_good(ctx: CheckContext):
    sets = ctx.policy.known_good
    source = f"policy {ctx.policy.source}" if ctx.policy.source else "policy"
    if not sets:
        yield Finding(check=CHECK, status=SKIP, component=NODE,
                      summary="the policy names no known-good versions to hold this node to",
                      remedy="`ccdiag policy init` on a node known to be good records its machine type's versions.")
        return
    data = data_of_runs(ctx.runs)
    mtype = machine_type(data)
    known = pick(sets, mtype)
    if known is None:
        types = ", ".join(repr(k.machine_type) for k in sets)
        yield Finding(check=CHECK, status=UNKNOWN, component=NODE,
                      summary=f"no known-good set for this node's machine type {mtype!r} (the policy has {types})",
                      evidence=(Evidence("machine type", mtype, "instance type, GPUs (NVML), DMI product"),),
                      expected_source=source,
                      remedy="Add this machine type's set: `ccdiag policy init` on a good node of the type, then copy "
                             "its [[known_good]] table into the policy.")
        return
    found = versions(data)
    diffs = differences(known, found)
    cls = known.machine_type or "every machine type"
    status = FAIL if known.on_drift == "fail" else WARN
    for d in diffs:
        what = KEYS.get(d.key.split(".", 1)[0], d.key)
        if d.unread:
            yield Finding(check=CHECK, status=UNKNOWN, component=NODE, subject=d.key,
                          summary=f"{d.key} could not be read, so it cannot be held to the known-good "
                                  f"{_show(d.expected)} of {cls}",
                          evidence=(Evidence(d.key, None, what),), expected=_show(d.expected), expected_source=source,
                          remedy="See the probe's own finding for why it was not read; a snapshot recorded by an "
                                 "older ccdiag may lack it.")
            continue
        yield Finding(check=CHECK, status=status, component=NODE, subject=d.key,
                      summary=f"{d.key} {_show(d.found)} differs from the known-good {_show(d.expected)} of {cls}",
                      evidence=(Evidence(d.key, d.found, what),), expected=_show(d.expected), expected_source=source,
                      details={"key": d.key, "found": d.found, "expected": d.expected, "machine_type": known.machine_type},
                      remedy=f"Bring {d.key} to {_show(d.expected)} (the version the fleet's {cls} nodes run), or, "
                             f"if the fleet moved on, record the new set with `ccdiag policy init`.",
                      action="drain" if status == FAIL else "none")
    if not diffs:
        named = ", ".join(k for k in KEYS if k in known.values)
        yield Finding(check=CHECK, status=PASS, component=NODE,
                      summary=f"{named or 'nothing'} as the known-good set of {cls}",
                      evidence=(Evidence("machine type", mtype, "instance type, GPUs (NVML), DMI product"),),
                      expected_source=source)
