"""TCP between two hosts over each subnet they share: the per-interface steps of ``bench pairs``.

Why apart from MPI's exchange: MPI measures the one network it was told to use; a node often has
several (a management Ethernet beside the data fabric), and the slow or black-holed one is named
only by measuring each. Each step binds its own source address on the interface under test.

Every step ends within its share of the pair's budget, and says what arrived: the sender first
writes a :data:`HELLO_BYTES` greeting on its own (``TCP_NODELAY``: one small segment), then full
blocks. A receiver that got the greeting but no block knows small segments pass and large ones
do not (size-dependent loss: an MTU black hole); one that got nothing knows the path carries
nothing. A receiver whose share ends after at least one timed block keeps the best block's rate.
The partners walk the steps in lockstep over MPI's small control messages, each bounded by the
pair's deadline: a partner whose messages stop coming ends the pair's steps, never the run.
"""

from __future__ import annotations

import socket
import time

from ccdiag.cluster import ifaces as ifacemod
from ccdiag.cluster.mpictx import Deadline, DeadlineExpired, exchange_obj

CHUNK_BYTES = 1 << 20
#: the greeting written before the blocks: one small TCP segment on any MTU
HELLO_BYTES = 64


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


def _read_exactly(conn: socket.socket, view: memoryview, n: int, dl: Deadline) -> int:
    """Read ``n`` (at most ``len(view)``) bytes into ``view`` by ``dl``; returns how many arrived
    before the sender closed."""
    got = 0
    while got < n:
        conn.settimeout(_left_s(dl))
        k = conn.recv_into(view[got:n])
        if k == 0:
            break
        got += k
    return got


def receive(srv: socket.socket, blocks: int, size_bytes: int, warmup: int, dl: Deadline, row: dict) -> None:
    """Accept one connection, read the greeting, then up to ``blocks`` blocks of ``size_bytes``,
    and set ``row``: ``mbyte_s`` (the fastest timed block), ``small_ok`` (the greeting arrived),
    ``blocks`` (timed blocks read), or ``error``. Stops early when the next block would not fit
    what is left of ``dl``; a 1-byte answer tells the sender to stop."""
    srv.settimeout(_left_s(dl))
    conn, _ = srv.accept()
    row["small_ok"] = False
    with conn:
        buf = bytearray(CHUNK_BYTES)
        view = memoryview(buf)
        if _read_exactly(conn, view, HELLO_BYTES, dl) < HELLO_BYTES:
            raise ConnectionError("the sender closed before its greeting")
        row["small_ok"] = True
        fastest_s = None
        timed = 0
        t_block = time.perf_counter()
        try:
            for k in range(blocks):
                got = 0
                while got < size_bytes:
                    conn.settimeout(_left_s(dl))
                    n = conn.recv_into(view[:min(CHUNK_BYTES, size_bytes - got)])
                    if n == 0:
                        raise ConnectionError(f"the sender closed after {got} of {size_bytes} bytes")
                    got += n
                now = time.perf_counter()
                took = now - t_block
                if k >= warmup:
                    fastest_s = took if fastest_s is None else min(fastest_s, took)
                    timed += 1
                t_block = now
                if timed and dl.left_s() < 1.3 * took:
                    break
        except socket.timeout:
            if fastest_s is None:
                raise
            row["cut_short"] = True
        conn.settimeout(_left_s(dl))
        conn.sendall(b"k")
    row["mbyte_s"] = size_bytes / max(fastest_s or 1e-9, 1e-9) / 1e6
    row["blocks"] = timed


def send(src: dict, dst_addr: str, port: int, blocks: int, size_bytes: int, dl: Deadline) -> None:
    """Connect from ``src``'s address, bound to its interface (SO_BINDTODEVICE, where allowed), so
    the bytes leave through the interface under test even when a route would pick another one;
    write the greeting on its own, then up to ``blocks`` blocks until the receiver says stop (it
    closes) or ``dl`` passes."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with s:
        try:
            s.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_BINDTODEVICE", 25), src["name"].encode() + b"\0")
        except OSError:
            pass  # no CAP_NET_RAW: the source address alone still selects the interface on a flat subnet
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.bind((src["address"], 0))
        s.settimeout(_left_s(dl))
        s.connect((dst_addr, port))
        s.sendall(bytes(HELLO_BYTES))
        payload = memoryview(bytes(CHUNK_BYTES))
        try:
            for _ in range(blocks):
                sent = 0
                while sent < size_bytes:
                    s.settimeout(_left_s(dl))
                    n = min(CHUNK_BYTES, size_bytes - sent)
                    s.sendall(payload[:n])
                    sent += n
            s.settimeout(_left_s(dl))
            s.recv(1)
        except (ConnectionResetError, BrokenPipeError):
            return  # the receiver had what fits its share and closed


def plan_blocks(per_byte_s: float | None, size_bytes: int, iters: int, warmup: int, left_s: float) -> tuple[int, int]:
    """(warm-up blocks, all blocks) of one TCP step that fit ``left_s`` at a known rate (the
    receiver decides and tells the sender): the requested count when it fits, else at least one
    warm-up block (TCP slow start) and one timed block. With no rate known, the requested count:
    the receiver then stops when the next block would not fit its share."""
    want = warmup + iters
    if not per_byte_s:
        return max(1, warmup), max(want, 2)
    fit = int(left_s * 0.8 / max(per_byte_s * size_bytes, 1e-9))
    if fit >= want:
        return warmup, want
    return 1, max(2, fit)


def measure_ifaces(comm, peer: int, first: bool, my_host: str, peer_host: str, mine: list[dict], theirs: list,
                   size_bytes: int, iters: int, warmup: int, steps_dl: Deadline, ctrl_dl: Deadline, tag: int,
                   stage: str, per_byte_s: float | None = None) -> list[dict]:
    """TCP between this host and its partner of the round over every subnet their candidate
    addresses (``mine``, ``theirs``) share, one direction at a time (``first`` sends first), the
    rows measured *into* this host.

    Every step starts with an MPI exchange (the receiver's listen port), so both hosts walk the same
    steps in lockstep even when a transfer fails on one side only: a failure is a row with
    ``mbyte_s`` None and the error. Socket waits end at the step's share of ``steps_dl``; the
    control messages at ``ctrl_dl`` (the pair's deadline, which both partners agreed): a partner
    silent by then ends the steps, each step left recorded as not measured, and the round goes on."""
    rows: list[dict] = []
    common = ifacemod.common_pairs(mine, theirs if isinstance(theirs, list) else [])
    steps = [(mc, pc, sender_first) for mc, pc in common for sender_first in (True, False)]
    for k, (mc, pc, sender_first) in enumerate(steps):
        step_dl = steps_dl.sooner(max(0.2, steps_dl.left_s() / (len(steps) - k)))
        i_send = sender_first == first
        if i_send:
            try:
                reply = exchange_obj(comm, peer, {"step": k, "port": None}, ctrl_dl, stage, tag)
            except DeadlineExpired:
                return rows + _unmeasured(steps[k + 1:], first, my_host, peer_host, size_bytes)
            ok = isinstance(reply, dict) and reply.get("step") == k
            port, blocks = (reply.get("port"), int(reply.get("blocks") or 0)) if ok else (None, 0)
            if port and blocks:
                row = _row(pc, mc, peer_host, my_host, size_bytes, step_dl)
                try:
                    send(mc, pc["address"], int(port), blocks, size_bytes, step_dl)
                except OSError as exc:
                    # the receiver's row is the one reported; this one stands in when the receiver
                    # never reports (its answers are what a black hole into it swallows)
                    row.update(sender_side=True, error=f"the sender's side: {_describe(exc, dict(row, sender_side=True))}")
                    rows.append(row)
            continue
        row = _row(mc, pc, my_host, peer_host, size_bytes, step_dl)
        srv = None
        try:
            srv = _listen(mc["address"])
            port = srv.getsockname()[1]
        except OSError as exc:
            row["error"] = f"cannot listen on {mc['address']}: {exc}"
            port = None
        tcp_warm, blocks = plan_blocks(per_byte_s, size_bytes, iters, warmup, step_dl.left_s())
        try:
            exchange_obj(comm, peer, {"step": k, "port": port, "blocks": blocks}, ctrl_dl, stage, tag)
        except DeadlineExpired:
            if srv is not None:
                srv.close()
            row["error"] = "not measured: the partner's control messages stopped coming"
            return rows + [row] + _unmeasured(steps[k + 1:], first, my_host, peer_host, size_bytes)
        if srv is not None:
            try:
                receive(srv, blocks, size_bytes, tcp_warm, step_dl, row)
            except (OSError, ConnectionError) as exc:
                row["error"] = _describe(exc, row)
            finally:
                srv.close()
        rows.append(row)
    return rows


def _row(mc: dict, pc: dict, my_host: str, peer_host: str, size_bytes: int, step_dl: Deadline) -> dict:
    """A transfer from ``peer_host`` (its candidate ``pc``) into ``my_host`` (``mc``)."""
    return {"src_host": peer_host, "dst_host": my_host, "net": ifacemod.network_of(mc), "src_iface": pc["name"],
            "dst_iface": mc["name"], "src_addr": pc["address"], "dst_addr": mc["address"], "bytes": size_bytes,
            "mbyte_s": None, "error": None, "small_ok": None, "share_s": round(max(0.0, step_dl.left_s()), 3)}


def _unmeasured(rest: list, first: bool, my_host: str, peer_host: str, size_bytes: int) -> list[dict]:
    """The rows this host would have received in the steps left out."""
    out = []
    for mc, pc, sender_first in rest:
        if sender_first != first:
            row = _row(mc, pc, my_host, peer_host, size_bytes, Deadline.after(0))
            row["error"] = "not measured: the partner's control messages stopped coming"
            out.append(row)
    return out


def _describe(exc: BaseException, row: dict) -> str:
    if isinstance(exc, socket.timeout) and row.get("small_ok") is None and "sender_side" not in row:
        return f"timed out: nothing arrived within the step's share of {row['share_s']:.1f} s"
    if isinstance(exc, socket.timeout) and "sender_side" in row:
        return f"not all sent within the step's share of {row['share_s']:.1f} s"
    if isinstance(exc, socket.timeout):
        if row.get("small_ok"):
            return (f"timed out: the {HELLO_BYTES}-byte greeting arrived, no {row['bytes']}-byte block within the "
                    f"step's share of {row['share_s']:.1f} s")
        return f"timed out: nothing arrived within the step's share of {row['share_s']:.1f} s"
    return f"{type(exc).__name__}: {exc}"
