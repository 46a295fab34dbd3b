"""A ring order of hosts that maximises the ring's bottleneck hop, and the hostfiles that apply it.

Why the bottleneck: a ring allreduce moves every byte over every hop, so its bus bandwidth is the
slowest hop's bandwidth; the best order is a Hamiltonian cycle whose weakest directed edge is as
strong as possible (the bottleneck travelling-salesman problem). Exact by enumeration up to
:data:`EXACT_MAX` hosts; beyond that, greedy "strongest next hop" tours from every start, improved
by 2-opt moves that raise the bottleneck (then the sum as a tie-break).

A slow *host* (slow with every peer) cannot be avoided by ordering: every ring position gives it
an incoming and an outgoing hop. 'Avoid' then means two things, both reported: the order that
puts it between the peers it reaches best (where it costs least), and the order without it with
the busbw that would buy.
"""

from __future__ import annotations

import itertools
import os
import time

EXACT_MAX = 9
#: a reordering is advised only when its predicted bottleneck beats the current order's by more than
#: this: two runs of one healthy pair differ by up to ~10 % on a loaded node, so a smaller "gain" is
#: noise, and a hostfile that reshuffles a healthy fleet for it only costs the user a restart
MIN_GAIN = 0.15
HEURISTIC_TIME_S = 5.0


def bottleneck(order: list[int], m) -> float:
    """The weakest directed hop of the ring ``order`` (indices into ``m``)."""
    n = len(order)
    if n < 2:
        return float("inf")
    return min(_w(m, order[k], order[(k + 1) % n]) for k in range(n))


def _w(m, a: int, b: int) -> float:
    v = m[a][b]
    return 0.0 if v is None else float(v)


def _score(order: list[int], m) -> tuple[float, float]:
    n = len(order)
    edges = [_w(m, order[k], order[(k + 1) % n]) for k in range(n)]
    return (min(edges), sum(edges))


def best_order(m, nodes: list[int]) -> list[int]:
    """Indices ``nodes`` in the ring order with the largest bottleneck hop of ``m``."""
    if len(nodes) <= 3 and len(nodes) <= 2:
        return list(nodes)
    if len(nodes) <= EXACT_MAX:
        first, rest = nodes[0], nodes[1:]
        best: list[int] = list(nodes)
        best_s: tuple[float, float] | None = None
        for perm in itertools.permutations(rest):
            order = [first, *perm]
            s = _score(order, m)
            if best_s is None or s > best_s:
                best, best_s = order, s
        return best
    return _heuristic(m, nodes)


def _heuristic(m, nodes: list[int]) -> list[int]:
    t_end = time.monotonic() + HEURISTIC_TIME_S
    best: list[int] = list(nodes)
    best_s: tuple[float, float] | None = None
    for start in nodes:
        order, left = [start], set(nodes) - {start}
        while left:
            cur = order[-1]
            nxt = max(left, key=lambda x: (_w(m, cur, x), -x))
            order.append(nxt)
            left.discard(nxt)
        s = _score(order, m)
        if best_s is None or s > best_s:
            best, best_s = order, s
        if time.monotonic() > t_end:
            break
    improved = True
    n = len(best)
    assert best_s is not None  # nodes is never empty here
    while improved and time.monotonic() < t_end:
        improved = False
        for i in range(1, n - 1):
            for j in range(i + 1, n):
                cand = best[:i] + best[i:j + 1][::-1] + best[j + 1:]
                s = _score(cand, m)
                if s > best_s:
                    best, best_s, improved = cand, s, True
            if time.monotonic() > t_end:
                break
    return best


def recommend(m, hosts: list[str], slow_hosts: list[str] | None = None) -> dict:
    """The current (rank) order against the best one, with predicted busbw (= bottleneck hop), and
    for slow hosts the best order without them."""
    n = len(hosts)
    idx = list(range(n))
    best = best_order(m, idx)
    cur_bw = bottleneck(idx, m) if n > 1 else 0.0
    best_bw = bottleneck(best, m) if n > 1 else 0.0
    if best_bw < cur_bw * (1 + MIN_GAIN):
        # no order beats the current one by more than the measurement's noise: keep it
        best, best_bw = idx, cur_bw
    out = {
        "current_order": hosts,
        "current_busbw_gbyte_s": cur_bw,
        "order": [hosts[i] for i in best],
        "predicted_busbw_gbyte_s": best_bw,
        "method": ("current order kept (no order gains more than "
                   f"{MIN_GAIN:.0%})" if best == idx else "exact" if n <= EXACT_MAX else "greedy + 2-opt"),
        "weakest_hop": _weakest(best, m, hosts),
    }
    slow = [h for h in (slow_hosts or []) if h in hosts]
    if slow and n - len(slow) >= 2:
        keep = [i for i in idx if hosts[i] not in slow]
        wo = best_order(m, keep)
        pos = {h: best.index(hosts.index(h)) for h in slow}
        out["slow_hosts"] = {
            h: {"between": [hosts[best[(pos[h] - 1) % n]], hosts[best[(pos[h] + 1) % n]]]} for h in slow}
        out["without_slow_hosts"] = {"order": [hosts[i] for i in wo], "predicted_busbw_gbyte_s": bottleneck(wo, m)}
    return out


def _weakest(order: list[int], m, hosts: list[str]) -> dict | None:
    n = len(order)
    if n < 2:
        return None
    k = min(range(n), key=lambda k: _w(m, order[k], order[(k + 1) % n]))
    a, b = order[k], order[(k + 1) % n]
    return {"src": hosts[a], "dst": hosts[b], "gbyte_s": _w(m, a, b)}


def format_recommendation(rec: dict) -> str:
    lines = [f"# ring order: current {' -> '.join(rec['current_order'])}: bottleneck "
             f"{rec['current_busbw_gbyte_s'] * 1000:.1f} MB/s",
             f"# recommended ({rec['method']}): {' -> '.join(rec['order'])}: predicted busbw "
             f"{rec['predicted_busbw_gbyte_s'] * 1000:.1f} MB/s"]
    for h, info in rec.get("slow_hosts", {}).items():
        lines.append(f"# slow host {h} cannot be ordered away (every position has a hop into it); placed "
                     f"between {info['between'][0]} and {info['between'][1]}, where it costs least")
    wo = rec.get("without_slow_hosts")
    if wo:
        lines.append(f"# without the slow host(s): {' -> '.join(wo['order'])}: predicted busbw "
                     f"{wo['predicted_busbw_gbyte_s'] * 1000:.1f} MB/s")
    return "\n".join(lines)


def write_hostfiles(path: str, order: list[str], slots: dict | None = None, note: str = "") -> list[str]:
    """``path``: an OpenMPI hostfile (``host slots=K`` in ring order; mpirun's default by-slot
    mapping then numbers ranks along the ring); ``path.slurm``: a SLURM_HOSTFILE (one line per
    task) for ``srun --distribution=arbitrary``. Returns the paths written."""
    from ccdiag.core.errors import InputError
    from ccdiag.core.output import write_atomic

    slots = slots or {}
    head = f"# {note}\n" if note else ""
    ompi = head + "".join(f"{h} slots={int(slots.get(h, 1))}\n" for h in order)
    slurm = "".join(f"{h}\n" * int(slots.get(h, 1)) for h in order)
    written = []
    for p, text in ((path, ompi), (path + ".slurm", slurm)):
        try:
            write_atomic(p, text)
        except OSError as exc:
            raise InputError(f"cannot write hostfile {p}: {exc.strerror or exc}") from None
        written.append(os.path.abspath(p))
    return written
