"""The pairwise matrix: every host pair, in N-1 rounds of disjoint pairs measured at once.

Why a tournament schedule: N^2 serial pair runs take too long on a big allocation, while a round
of disjoint pairs loads each host's link with exactly one peer, so N-1 rounds (N rounds with a bye
when N is odd; the circle method) measure every pair under the same load. One rank per host (the
lowest rank on it) takes part; the other ranks only keep the rounds' barriers.

Why both directions are kept: a traffic shaper, a bad transceiver or a full switch buffer is often
one-directional. A pair's figure for a ring is its slower direction. A host slow with *every* peer
is a slow host (its NIC, its port, its own shaping); a pair slow while both hosts are fine with
everyone else is a slow link (the path between them).
"""

from __future__ import annotations

import dataclasses
import socket
import statistics
import time

from ccdiag.cluster import ifaces as ifacemod
from ccdiag.cluster.mpictx import Deadline, DeadlineExpired, barrier, bcast_obj, gather_to_root, load_numpy, wait_one
from ccdiag.findings import FAIL, PASS, Component, Evidence, Finding

TAG_PAIR = 5000
#: per round: the partners' candidate lists and per-step listen ports (one tag per round keeps the
#: rounds apart; within a round MPI's non-overtaking order keeps the steps apart)
TAG_IFACE = 20000


def round_robin(n: int) -> list[list[tuple[int, int]]]:
    """Rounds of disjoint pairs covering every pair of ``range(n)`` once (circle method): N-1
    rounds for even N, N rounds with one host resting per round for odd N."""
    if n < 2:
        return []
    ids = list(range(n)) + ([None] if n % 2 else [])
    m = len(ids)
    rounds = []
    for _ in range(m - 1):
        pairs = []
        for k in range(m // 2):
            a, b = ids[k], ids[m - 1 - k]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        rounds.append(sorted(pairs))
        ids = [ids[0], ids[-1], *ids[1:-1]]
    return rounds


def plan(hostnames: dict[int, str]) -> dict:
    """Hosts in order of their first rank, the leader rank and slot count of each, the rounds."""
    hosts: list[str] = []
    leader: dict[str, int] = {}
    slots: dict[str, int] = {}
    for rank in sorted(hostnames):
        h = hostnames[rank]
        if h not in leader:
            hosts.append(h)
            leader[h] = rank
        slots[h] = slots.get(h, 0) + 1
    return {"hosts": hosts, "leaders": [leader[h] for h in hosts], "slots": slots,
            "rounds": round_robin(len(hosts))}


def measure(comm, ident: dict, size_bytes: int, iters: int, warmup: int, work: Deadline,
            per_iface: bool = False, only_ifaces: list[str] | None = None) -> dict:
    """This rank's part of the matrix: as a host's leader, the bandwidth *into* it from each peer
    (bytes / time of its receive, both directions running at once), the fastest of ``iters``.

    With ``per_iface`` the partners of each round then measure TCP between every pair of their
    candidate addresses on a common subnet (:func:`measure_ifaces`), so each candidate network
    gets its own matrix beside MPI's."""
    np = load_numpy()
    got = gather_to_root(comm, ident.get("host", "?"), work.sooner(max(1.0, work.left_s() / 4)))
    the_plan = None
    if comm.rank == 0:
        assert got is not None  # the root holds every rank's answer
        if got.missing:
            from ccdiag.cluster.mpictx import DeadlineExpired

            raise DeadlineExpired("pairs set-up", got.missing, work.budget_s)
        the_plan = plan(got.objs)
    the_plan = bcast_obj(comm, the_plan, work, "pairs set-up")
    hosts, leaders = the_plan["hosts"], the_plan["leaders"]
    me = leaders.index(comm.rank) if comm.rank in leaders else None
    count = max(1, size_bytes // 4)
    sbuf = np.ones(count, dtype=np.float32)
    rbuf = np.empty(count, dtype=np.float32)
    into: dict[str, float] = {}
    mine = ifacemod.local_candidates(only_ifaces) if per_iface and me is not None else []
    tcp_rows: list[dict] = []
    n_rounds = len(the_plan["rounds"])
    for rnd, pairs in enumerate(the_plan["rounds"]):
        barrier(comm, work, f"pairs round {rnd + 1}")
        if me is None:
            continue
        partner = next((b if a == me else a for a, b in pairs if me in (a, b)), None)
        if partner is None:
            continue
        peer = leaders[partner]
        times = []
        for it in range(warmup + iters):
            t0 = time.perf_counter()
            rq = comm.Irecv(rbuf, source=peer, tag=TAG_PAIR + rnd)
            sq = comm.Isend(sbuf, dest=peer, tag=TAG_PAIR + rnd)
            wait_one(rq, peer, work, f"pairs round {rnd + 1}")
            t_recv = time.perf_counter() - t0
            wait_one(sq, peer, work, f"pairs round {rnd + 1}")
            if it >= warmup:
                times.append(t_recv)
        # the fastest exchange: noise only adds time, a slow link is slow every time
        into[hosts[partner]] = size_bytes / min(times) / 1e9
        if per_iface:
            # this round's share of what is left, so one dead interface cannot eat the later rounds
            step_dl = work.sooner(max(0.5, work.left_s() / max(1, n_rounds - rnd)))
            tcp_rows += measure_ifaces(comm, peer, me < partner, hosts[me], hosts[partner], mine, size_bytes,
                                       iters, warmup, step_dl, TAG_IFACE + rnd, f"pairs round {rnd + 1} interfaces",
                                       work=work)
    out = {"host": ident.get("host"), "into_gbyte_s": into, "leader": me is not None}
    if per_iface:
        out["candidates"] = mine
        out["tcp_rows"] = tcp_rows
    if comm.rank == 0:
        out.update(hosts=hosts, rounds=the_plan["rounds"], slots=the_plan["slots"])
        out["matrix"] = True
    return out


def exchange_obj(comm, peer: int, obj, deadline: Deadline, stage: str, tag: int):
    """Send ``obj`` to ``peer`` and receive its object, both ending by ``deadline``.

    Why not ``sendrecv``: it blocks without a deadline; a partner that died would hang this rank.
    Probes (``improbe``) instead of a pickled ``irecv`` whose object cannot be read after a ``Test``."""
    load_numpy()  # the same clear error as the rest of the run when the MPI extras are missing
    sreq = comm.isend(obj, dest=peer, tag=tag)
    spins = 0
    while True:
        msg = comm.improbe(source=peer, tag=tag)
        if msg is not None:
            got = msg.recv()
            break
        spins += 1
        if time.monotonic() >= deadline.end:
            raise DeadlineExpired(stage, [peer], deadline.budget_s)
        time.sleep(0.0002 if spins < 1000 else 0.002)
    wait_one(sreq, peer, deadline, stage)
    return got


_CHUNK_BYTES = 1 << 20


def _left_s(dl: Deadline) -> float:
    """A socket timeout from what is left of ``dl``: never 0 (which would mean non-blocking)."""
    left = dl.left_s()
    if left <= 0:
        raise socket.timeout("the step's share of the budget ran out")
    return max(0.01, left)


def _listen(addr: str) -> socket.socket:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        srv.bind((addr, 0))
        srv.listen(1)
    except OSError:
        srv.close()
        raise
    return srv


def _tcp_receive(srv: socket.socket, blocks: int, size_bytes: int, warmup: int, dl: Deadline) -> float:
    """Accept one connection, read ``blocks`` blocks of ``size_bytes`` and return the fastest timed
    block's bandwidth in MB/s. The first ``warmup`` blocks are left out (TCP slow start); the stream
    stays full between blocks, so a block's time is the link's steady rate. A 1-byte answer at the
    end tells the sender every byte arrived, so the next step starts on an idle link."""
    srv.settimeout(_left_s(dl))
    conn, _ = srv.accept()
    with conn:
        buf = bytearray(_CHUNK_BYTES)
        view = memoryview(buf)
        fastest_s = None
        t_block = time.perf_counter()
        for k in range(blocks):
            got = 0
            while got < size_bytes:
                conn.settimeout(_left_s(dl))
                n = conn.recv_into(view[:min(_CHUNK_BYTES, size_bytes - got)])
                if n == 0:
                    raise ConnectionError(f"the sender closed after {got} of {size_bytes} bytes")
                got += n
            now = time.perf_counter()
            if k >= warmup:
                dt = now - t_block
                fastest_s = dt if fastest_s is None else min(fastest_s, dt)
            t_block = now
        conn.settimeout(_left_s(dl))
        conn.sendall(b"k")
    return size_bytes / max(fastest_s or 1e-9, 1e-9) / 1e6


def _tcp_send(src: dict, dst_addr: str, port: int, blocks: int, size_bytes: int, dl: Deadline) -> None:
    """Connect from ``src``'s address, bound to its interface (SO_BINDTODEVICE, where allowed), so
    the bytes leave through the interface under test even when a route would pick another one."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with s:
        try:
            s.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_BINDTODEVICE", 25), src["name"].encode() + b"\0")
        except OSError:
            pass  # no CAP_NET_RAW: the source address alone still selects the interface on a flat subnet
        s.bind((src["address"], 0))
        s.settimeout(_left_s(dl))
        s.connect((dst_addr, port))
        payload = memoryview(bytes(_CHUNK_BYTES))
        for _ in range(blocks):
            sent = 0
            while sent < size_bytes:
                s.settimeout(_left_s(dl))
                n = min(_CHUNK_BYTES, size_bytes - sent)
                s.sendall(payload[:n])
                sent += n
        s.settimeout(_left_s(dl))
        s.recv(1)


def measure_ifaces(comm, peer: int, first: bool, my_host: str, peer_host: str, mine: list[dict],
                   size_bytes: int, iters: int, warmup: int, round_dl: Deadline, tag: int, stage: str,
                   work: Deadline | None = None) -> list[dict]:
    """TCP between this host and its partner of the round over every common subnet, one direction
    at a time (``first`` sends first), the rows measured *into* this host.

    Every step starts with an MPI exchange (the receiver's listen port), so both hosts walk the
    same steps in lockstep even when a transfer fails or times out on one side only: a failure is
    a row with ``mbyte_s`` None and the error, never a hung rank. Socket waits end at this step's
    share of ``round_dl``; the MPI exchanges end at ``work`` (a silent partner is a fault, named)."""
    work = work or round_dl
    theirs = exchange_obj(comm, peer, mine, work, stage, tag)
    common = ifacemod.common_pairs(mine, theirs if isinstance(theirs, list) else [])
    blocks = warmup + iters
    steps = [(mc, pc, sender_first) for mc, pc in common for sender_first in (True, False)]
    rows = []
    for k, (mc, pc, sender_first) in enumerate(steps):
        step_dl = round_dl.sooner(max(0.2, round_dl.left_s() / (len(steps) - k)))
        i_send = sender_first == first
        net = ifacemod.network_of(mc)
        if i_send:
            reply = exchange_obj(comm, peer, {"step": k, "port": None}, work, stage, tag)
            port = reply.get("port") if isinstance(reply, dict) and reply.get("step") == k else None
            if port:
                try:
                    _tcp_send(mc, pc["address"], int(port), blocks, size_bytes, step_dl)
                except OSError:
                    pass  # the receiver records the failure: its row is the one reported
            continue
        row = {"src_host": peer_host, "dst_host": my_host, "net": net, "src_iface": pc["name"],
               "dst_iface": mc["name"], "src_addr": pc["address"], "dst_addr": mc["address"],
               "bytes": size_bytes, "mbyte_s": None, "error": None}
        srv = None
        try:
            srv = _listen(mc["address"])
            port = srv.getsockname()[1]
        except OSError as exc:
            row["error"] = f"cannot listen on {mc['address']}: {exc}"
            port = None
        exchange_obj(comm, peer, {"step": k, "port": port}, work, stage, tag)
        if srv is not None:
            try:
                row["mbyte_s"] = _tcp_receive(srv, blocks, size_bytes, warmup, step_dl)
            except (OSError, ConnectionError) as exc:
                row["error"] = ("timed out: not done within this step's share of the budget"
                                if isinstance(exc, socket.timeout) else f"{type(exc).__name__}: {exc}")
            finally:
                srv.close()
        rows.append(row)
    return rows


def iface_matrices(results: dict[int, dict], hosts: list[str]) -> list[dict]:
    """One matrix per subnet from the leaders' ``tcp_rows``: the hosts on it (in plan order), the
    interface each uses there, m[i][j] in GB/s from host i to host j (0.0 for a transfer that
    failed: an interface that carries nothing is the slowest there is), and the label findings use
    (the interface name, or ``a|b`` when the hosts name it differently)."""
    rows = [r for res in results.values() if res and res.get("leader") for r in res.get("tcp_rows", [])]
    nets: dict[str, list[dict]] = {}
    for r in rows:
        nets.setdefault(r["net"], []).append(r)
    out = []
    for net in sorted(nets):
        names: dict[str, str] = {}
        for r in nets[net]:
            names.setdefault(r["src_host"], r["src_iface"])
            names.setdefault(r["dst_host"], r["dst_iface"])
        on = [h for h in hosts if h in names]
        idx = {h: i for i, h in enumerate(on)}
        m: list[list[float | None]] = [[None] * len(on) for _ in on]
        for r in nets[net]:
            v = r["mbyte_s"]
            m[idx[r["src_host"]]][idx[r["dst_host"]]] = (v / 1000) if v is not None else 0.0
        label = "|".join(sorted(set(names.values())))
        out.append({"net": net, "label": label, "hosts": on, "ifaces": {h: names[h] for h in on},
                    "matrix_gbyte_s": m, "rows": nets[net]})
    return out


_IFACE_CHECK = {"cluster.host_slow": "cluster.iface_host_slow", "cluster.link_slow": "cluster.iface_link_slow",
                "cluster.pairs": "cluster.iface_pairs"}


def iface_findings(mat: dict, margin: float) -> tuple[dict, list[Finding]]:
    """Slow host vs slow link on one subnet's matrix: the same analysis as MPI's matrix, findings
    under their own check names (``cluster.iface_*``) naming the interface and subnet, so "eth1 is
    slow into nodeh2" stands apart from a healthy eth0 and from MPI's own figures."""
    hosts = mat["hosts"]
    cls = classify(mat["matrix_gbyte_s"], hosts, margin)
    where = f"{mat['label']} ({mat['net']})"
    out = []
    for f in findings(cls, hosts, where, margin):
        details = dict(f.details, net=mat["net"], iface=mat["label"])
        if f.check == "cluster.host_slow":
            details["iface"] = mat["ifaces"].get(f.details.get("host"), mat["label"])
        comp = dataclasses.replace(f.component, name=f"{f.component.name} over {where}", device=mat["label"])
        out.append(dataclasses.replace(f, check=_IFACE_CHECK.get(f.check, f.check), component=comp,
                                       details=details))
    return cls, out


def format_iface_rows(rows: list[dict]) -> str:
    """The failed transfers, one line each (the matrix shows them as 0.0)."""
    return "\n".join(f"# {r['src_host']} ({r['src_addr']}) -> {r['dst_host']} ({r['dst_addr']}) over "
                     f"{r['dst_iface']}: {r['error']}" for r in rows if r.get("error"))


def merge_matrix(results: dict[int, dict], hosts: list[str]) -> list[list[float | None]]:
    """m[i][j]: GB/s from host i to host j, as host j's leader measured its receive."""
    idx = {h: i for i, h in enumerate(hosts)}
    m: list[list[float | None]] = [[None] * len(hosts) for _ in hosts]
    for res in results.values():
        if not res or not res.get("leader"):
            continue
        j = idx.get(res["host"])
        for src, v in res.get("into_gbyte_s", {}).items():
            if j is not None and src in idx:
                m[idx[src]][j] = v
    return m


def classify(m, hosts: list[str], margin: float) -> dict:
    """Slow hosts (slow with every peer) apart from slow links (slow with one peer only).

    The reference is the median of the hosts' own median pair bandwidths, which one bad host cannot
    drag down (it would be half the pairs of a 4-host matrix)."""
    n = len(hosts)

    def pair(a: int, b: int) -> float:
        vals = [v for v in (m[a][b], m[b][a]) if v is not None]
        return min(vals) if vals else 0.0

    per_host = {hosts[a]: statistics.median([pair(a, b) for b in range(n) if b != a]) for a in range(n)} if n > 1 else {}
    ref = statistics.median(per_host.values()) if per_host else 0.0
    floor = ref * (1 - margin)
    slow_pairs = {(a, b) for a in range(n) for b in range(a + 1, n) if pair(a, b) < floor}
    slow_hosts = [hosts[a] for a in range(n)
                  if n >= 3 and all((min(a, b), max(a, b)) in slow_pairs for b in range(n) if b != a)]
    links = []
    for a, b in sorted(slow_pairs):
        if hosts[a] in slow_hosts or hosts[b] in slow_hosts:
            continue
        links.append({"a": hosts[a], "b": hosts[b], "a_to_b_gbyte_s": m[a][b], "b_to_a_gbyte_s": m[b][a]})
    return {"reference_gbyte_s": ref, "floor_gbyte_s": floor, "host_median_gbyte_s": per_host,
            "slow_hosts": slow_hosts, "slow_links": links}


def findings(cls: dict, hosts: list[str], iface: str, margin: float) -> list[Finding]:
    out = []
    ref, floor = cls["reference_gbyte_s"], cls["floor_gbyte_s"]
    for h in cls["slow_hosts"]:
        med = cls["host_median_gbyte_s"][h]
        out.append(Finding(
            check="cluster.host_slow", status=FAIL, component=Component(kind="node", name=h, device=iface),
            summary=(f"host {h} is slow with every peer over {iface}: median {med * 1000:.1f} MB/s per pair "
                     f"vs {ref * 1000:.1f} MB/s for the fleet"),
            evidence=(Evidence("median pair bandwidth", round(med, 6), "ccdiag pairs"),
                      Evidence("fleet reference", round(ref, 6), "median of every host's median")),
            expected=f">= {floor * 1000:.1f} MB/s ({1 - margin:.0%} of the fleet reference)",
            expected_source="pairwise matrix and --margin",
            remedy=f"look at {h} itself: its NIC {iface} (speed, errors, shaping), its switch port, its CPU load; "
                   f"drain it or run without it",
            details={"host": h, "iface": iface, "median_gbyte_s": med, "reference_gbyte_s": ref}))
    for link in cls["slow_links"]:
        a, b = link["a"], link["b"]
        ab, ba = link["a_to_b_gbyte_s"] or 0.0, link["b_to_a_gbyte_s"] or 0.0
        out.append(Finding(
            check="cluster.link_slow", status=FAIL,
            component=Component(kind="host_link", name=f"{a} <-> {b} ({iface})", device=iface, peer=b),
            summary=(f"link {a} <-> {b} over {iface} is slow while both hosts are fine with their other peers: "
                     f"{a}->{b} {ab * 1000:.1f} MB/s, {b}->{a} {ba * 1000:.1f} MB/s vs {ref * 1000:.1f} MB/s"),
            evidence=(Evidence(f"{a}->{b}", round(ab, 6), "ccdiag pairs"),
                      Evidence(f"{b}->{a}", round(ba, 6), "ccdiag pairs"),
                      Evidence("fleet reference", round(ref, 6), "median of every host's median")),
            expected=f">= {floor * 1000:.1f} MB/s", expected_source="pairwise matrix and --margin",
            remedy=f"check the path between {a} and {b} (routing, a switch or uplink between them, per-flow "
                   f"shaping); put them apart in the ring order (--hostfile-out)",
            details=dict(link, iface=iface)))
    if not out:
        out.append(Finding(check="cluster.pairs", status=PASS, component=Component(kind="node", name="all hosts"),
                           summary=f"every pair of {len(hosts)} hosts within {margin:.0%} of "
                                   f"{ref * 1000:.1f} MB/s over {iface}"))
    return out


def format_matrix(m, hosts: list[str], iface: str, size_bytes: int, rounds: int) -> str:
    w = max(8, *(len(h) for h in hosts)) if hosts else 8
    corner = "from/to"
    lines = [f"# pairwise bandwidth (MB/s, row sends to column) over {iface}, {size_bytes} bytes, "
             f"{rounds} rounds of disjoint pairs",
             f"#{corner:<{w}} " + " ".join(f"{h:>{w}}" for h in hosts)]
    for i, h in enumerate(hosts):
        cells = [f"{'-':>{w}}" if v is None else f"{v * 1000:>{w}.1f}" for v in m[i]]
        lines.append(f" {h:<{w}} " + " ".join(cells))
    return "\n".join(lines)


def run(size_bytes: int, iters: int, warmup: int, budget_s: float, as_json: bool, hostfile_out: str | None,
        margin: float, only_ifaces: list[str] | None = None) -> int:
    """``ccdiag bench pairs``: MPI's own matrix, then one TCP matrix per candidate subnet, each with
    its own slow host / slow link analysis; the report is assembled with benchrun's helpers, like
    ``ccdiag bench allreduce``'s."""
    from ccdiag.cluster import order as ordermod
    from ccdiag.cluster.benchrun import _doc, _emit, _fault_text, _verdict
    from ccdiag.cluster.mpictx import link_iface
    from ccdiag.cluster.runner import run_ranks

    def body(comm, work, ident):
        return measure(comm, ident, size_bytes, iters, warmup, work, per_iface=True, only_ifaces=only_ifaces)

    def report(outcome) -> int:
        results = outcome.results()
        found: list[Finding] = []
        extra: dict = {}
        text: list[str] = []
        res0 = results.get(0)
        if res0 and res0.get("matrix") is not None and not outcome.missing and not outcome.errors:
            hosts = res0["hosts"]
            matrix = merge_matrix(results, hosts)
            idents = outcome.idents()
            lead = [r for r, res in sorted(results.items()) if res.get("leader")]
            iface = link_iface(idents.get(lead[0], {}), idents.get(lead[1], {})) if len(lead) > 1 else "?"
            cls = classify(matrix, hosts, margin)
            found = findings(cls, hosts, iface, margin)
            rec = ordermod.recommend(matrix, hosts, cls["slow_hosts"])
            extra = {"hosts": hosts, "iface": iface, "size_bytes": size_bytes, "rounds": res0["rounds"],
                     "matrix_gbyte_s": matrix, "classification": cls, "ring_order": rec}
            text.append(format_matrix(matrix, hosts, iface, size_bytes, len(res0["rounds"])))
            nets = []
            for mat in iface_matrices(results, hosts):
                icls, ifs = iface_findings(mat, margin)
                found += ifs
                nets.append({"net": mat["net"], "iface": mat["label"], "hosts": mat["hosts"], "ifaces": mat["ifaces"],
                             "matrix_mbyte_s": [[None if v is None else round(v * 1000, 3) for v in row]
                                                for row in mat["matrix_gbyte_s"]],
                             "classification": icls,
                             "pairs": [{k: r[k] for k in ("src_host", "dst_host", "src_iface", "dst_iface",
                                                          "src_addr", "dst_addr", "bytes", "mbyte_s", "error")}
                                       for r in mat["rows"]]})
                text.append(format_matrix(mat["matrix_gbyte_s"], mat["hosts"],
                                          f"{mat['label']} ({mat['net']}, TCP)", size_bytes, len(res0["rounds"])))
                failed = format_iface_rows(mat["rows"])
                if failed:
                    text.append(failed)
            cands = {res.get("host"): res.get("candidates", []) for res in results.values() if res.get("leader")}
            extra["ifaces"] = {"only": list(only_ifaces or []), "candidates": cands, "networks": nets}
            if not nets:
                text.append("# no candidate interface shared a subnet between hosts: no per-interface matrix"
                            + (f" (--iface {', '.join(only_ifaces)})" if only_ifaces else ""))
            text.append(ordermod.format_recommendation(rec))
            if hostfile_out:
                slots = res0.get("slots", {})
                written = ordermod.write_hostfiles(hostfile_out, rec["order"], slots=slots,
                                                   note=f"ring order by ccdiag: predicted bottleneck "
                                                        f"{rec['predicted_busbw_gbyte_s'] * 1000:.1f} MB/s")
                extra["hostfiles"] = written
                text.append(f"# hostfiles written: {', '.join(written)}")
        code = _verdict(found, outcome)
        for f in found:
            if f.status == FAIL:
                text.append(f"FAIL {f.check}: {f.summary}")
        ft = _fault_text(outcome)
        if ft:
            text.append(ft)
        _emit(_doc("bench.pairs", outcome, found, code, **extra), as_json, "\n".join(text))
        return code

    return run_ranks(budget_s, body, report)
