"""Transfers that never completed within their share of the budget: findings on the pair or the host.

Why: a path that black-holes large frames (an MTU mismatch: a switch port, a tunnel or one host's
interface configured for smaller frames than the rest; path-MTU discovery blocked) lets the small
messages of MPI's set-up through, then swallows the first large one, and the transfer waits
forever. A benchmark that waits with it prints nothing, or a matrix with empty cells under a PASS.
Here every transfer has its share of the budget; one that does not complete in it is a failed
transfer of its pair, in its direction, and this module says what that means:

* by the same rule that tells a slow host from a slow link (:func:`ccdiag.core.outliers.classify_flags`):
  every pair of one host failed while other pairs did not -> the host; else each failed pair;
* size-dependent (each pair first exchanges a small message, then a large one: the small one
  arrived, the large one did not, in at least half the failed directions) -> likely an MTU or
  fragmentation fault, naming the host whose
  interface MTU differs from its peers' when one does, else the path (all MTUs agree: a device on
  the path has a smaller one);
* nothing arrived, not even the small message -> the host is unreachable over that interface, or
  its rank is stopped.

Pure: the callers hand the failed directions (``(src, dst) -> {"small_ok", "stage", "share_s"}``),
the hosts in plan order and each host's MTU on the interface.
"""

from __future__ import annotations

from collections import Counter

from ccdiag.cluster.pairmatrix import check_id
from ccdiag.core import outliers
from ccdiag.core.findings import FAIL, Component, Evidence, Finding

#: the first message of every pair: small enough for any MTU (it fits one 576-byte IPv4 datagram)
SMALL_BYTES = 256


def _mtu_hint(focus: list[str], mtus: dict[str, int | None], iface: str) -> str:
    """Which host's MTU differs (from the majority's), for the hosts in ``focus`` first."""
    known = {h: m for h, m in mtus.items() if m}
    if len(known) < 2:
        return f"compare the MTU of every device on the path over {iface} (the hosts' interfaces, switch ports, tunnels)"
    (major, _), = Counter(known.values()).most_common(1)
    odd = {h: m for h, m in known.items() if m != major}
    if not odd:
        return (f"every host's {iface} has MTU {major}: a device on the path (a switch port, a tunnel) with a "
                f"smaller MTU drops the large frames; path-MTU discovery is not working (blocked ICMP?)")
    first = sorted(odd, key=lambda h: (h not in focus, h))
    named = ", ".join(f"{h} {odd[h]}" for h in first)
    return f"the MTU of {iface} differs: {named}, against {major} on the other hosts; set one MTU on every host and port"


def _words(entries: list[dict], iface: str, focus: list[str], mtus: dict[str, int | None]) -> tuple[str, str, bool]:
    """(what happened, what to do, size-dependent) for the failed directions ``entries``."""
    share = max((e.get("share_s") or 0.0) for e in entries)
    big = max((e.get("bytes") or 0) for e in entries)
    known = [bool(e["small_ok"]) for e in entries if e.get("small_ok") is not None]
    if known and any(known) and sum(known) >= len(known) - sum(known):
        what = (f"{SMALL_BYTES}-byte messages arrive, {_size(big)} ones do not within {share:.1f} s: "
                f"size-dependent loss, likely an MTU or fragmentation fault")
        return what, _mtu_hint(focus, mtus, iface), True
    if not known:
        what = (f"nothing completed within {share:.1f} s (only the senders reported: whether small messages "
                f"arrive is not known)")
        return what, (f"check that {' and '.join(focus)} can be reached over {iface}, and the MTU on the way: "
                      + _mtu_hint(focus, mtus, iface)), False
    what = f"not even a {SMALL_BYTES}-byte message arrived within {share:.1f} s"
    todo = (f"check that {' and '.join(focus)} can be reached over {iface} (link state, addresses, routes, "
            f"firewall) and that its rank runs (not stopped, not swapping)")
    return what, todo, False


def _size(n: int) -> str:
    if n >= 1 << 20:
        return f"{n / (1 << 20):g} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):g} KiB"
    return f"{n}-byte"


def findings(failed: dict[tuple[str, str], dict], measured: set[tuple[str, str]], hosts: list[str], iface: str,
             mtus: dict[str, int | None] | None = None, prefix: str = "cluster") -> list[Finding]:
    """One finding per host all of whose pairs failed, one per other failed pair.

    ``failed``: ``(src, dst)`` -> what is known of the failed direction; ``measured``: the
    unordered pairs (``(a, b)`` in plan order) that completed in both directions; ``prefix``:
    ``cluster`` for MPI's matrix, ``cluster.iface`` for a TCP matrix (:func:`check_id`)."""
    if not failed:
        return []
    idx = {h: i for i, h in enumerate(hosts)}
    mtus = mtus or {}

    def key(a: str, b: str) -> tuple[str, str]:
        return (a, b) if idx.get(a, 0) <= idx.get(b, 0) else (b, a)

    by_pair: dict[tuple[str, str], list[dict]] = {}
    for (src, dst), e in failed.items():
        by_pair.setdefault(key(src, dst), []).append(dict(e, src=src, dst=dst))
    flags = {p: True for p in by_pair}
    flags.update({key(*p): False for p in measured if key(*p) not in by_pair})
    cls = outliers.classify_flags(flags)
    out: list[Finding] = []
    for h in cls.slow_members:
        entries = [e for p, es in by_pair.items() if h in p for e in es]
        peers = sorted({p[0] if p[1] == h else p[1] for p in by_pair if h in p}, key=lambda x: idx.get(x, 0))
        what, todo, sized = _words(entries, iface, [h], mtus)
        out.append(Finding(
            check=check_id(prefix, "host_transfers_failed"), status=FAIL, component=Component(kind="node", name=h, device=iface),
            summary=f"host {h}: no transfer with any of its {len(peers)} peers over {iface} completed: {what}",
            evidence=tuple(Evidence(f"{e['src']}->{e['dst']}", e.get("stage") or "did not complete", "ccdiag pairs")
                           for e in entries[:8]),
            expected="every transfer completes within its share of the budget", expected_source="--budget",
            remedy=todo, details={"host": h, "iface": iface, "peers": peers, "size_dependent": sized,
                                  "mtus": {k: v for k, v in mtus.items() if v}, "failed": entries}))
    for p in cls.slow_pairs:
        entries = by_pair[p]
        a, b = p
        what, todo, sized = _words(entries, iface, [a, b], mtus)
        dirs = ", ".join(sorted(f"{e['src']}->{e['dst']}" for e in entries))
        out.append(Finding(
            check=check_id(prefix, "transfer_failed"), status=FAIL,
            component=Component(kind="host_link", name=f"{a} <-> {b} ({iface})", device=iface, peer=b),
            summary=f"transfer {dirs} over {iface} did not complete: {what}",
            evidence=tuple(Evidence(f"{e['src']}->{e['dst']}", e.get("stage") or "did not complete", "ccdiag pairs")
                           for e in entries),
            expected="every transfer completes within its share of the budget", expected_source="--budget",
            remedy=todo, details={"a": a, "b": b, "iface": iface, "size_dependent": sized,
                                  "mtus": {k: v for k, v in mtus.items() if v}, "failed": entries}))
    return out
