"""Password checks that a flood of wrong passwords cannot turn against a scraper whose password is known.

A bcrypt check costs tens of milliseconds by design. The gate answers from the configuration's
cache of checked passwords first, on the event loop, in microseconds: a cached scraper never waits
behind anyone. Only a password never seen reaches bcrypt, which runs in an executor of its own
(:data:`WORKERS` threads) with at most :data:`MAX_WAITING` checks queued (one more is answered 503
at once); the same (user, password) asked twice while its check runs shares that check. Each
client (its address) has at most one check in flight, and after :data:`FREE_FAILURES` wrong
passwords in a row it backs off, doubling from :data:`BACKOFF_MIN_S` to :data:`BACKOFF_MAX_S`: while
backing off, a password that is not in the cache is answered 429 without a bcrypt (a person who
mistyped twice is not kept waiting; a script trying passwords is). A right password ends the back-off.

Measured with 80 wrong-password clients beside a cached scraper in ``bench/bench_daemon_attacks.py``.
"""

from __future__ import annotations

import asyncio
import collections
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ccdiag.exporters.webconfig import BasicAuth

#: what :meth:`PasswordGate.check` answers besides True/False
BUSY = "busy"  # the bcrypt queue is full
BACKING_OFF = "backing-off"  # this client gave a wrong password recently
#: bcrypt threads: one leaves the other core of a small node to the loop and the collection
WORKERS = 1
#: bcrypt checks queued at most (about half a second of work at bcrypt's default cost)
MAX_WAITING = 8
#: wrong passwords in a row a client may give before it backs off
FREE_FAILURES = 3
#: per-client back-off after a wrong password: first and longest (seconds)
BACKOFF_MIN_S, BACKOFF_MAX_S = 0.5, 30.0
#: clients whose back-off is remembered (the oldest forgotten first)
MAX_CLIENTS = 4096


@dataclass
class _Client:
    backoff_s: float = 0.0
    until: float = 0.0
    failures: int = 0
    checking: bool = False


class PasswordGate:
    """The cache first, then bcrypt in a bounded executor with a back-off per client (module docstring)."""

    def __init__(self, workers: int = WORKERS, max_waiting: int = MAX_WAITING,
                 backoff_min_s: float = BACKOFF_MIN_S, backoff_max_s: float = BACKOFF_MAX_S):
        self.workers, self.max_waiting = workers, max_waiting
        self.backoff_min_s, self.backoff_max_s = backoff_min_s, backoff_max_s
        self._pool: ThreadPoolExecutor | None = None
        self._clients: collections.OrderedDict[str, _Client] = collections.OrderedDict()
        self._inflight: dict[tuple[int, str, bytes], asyncio.Future] = {}
        self._waiting = 0
        self.stats: collections.Counter = collections.Counter()  # cached, bcrypt, busy, backing_off

    async def check(self, auth: "BasicAuth", header: str | None, client: str) -> bool | str:
        """True, False, :data:`BUSY` or :data:`BACKING_OFF` for this request's ``Authorization``."""
        parsed = auth.parse(header)
        if parsed is None:
            return False
        user, password, digest = parsed
        known = auth.known(user, digest)
        if known is not None:
            self.stats["cached"] += 1
            return known
        key = (id(auth), user, digest)
        shared = self._inflight.get(key)
        if shared is not None:  # the same pair is being checked: its answer serves both
            return await asyncio.shield(shared)
        state = self._client(client)
        now = time.monotonic()
        if state.checking or now < state.until:
            self.stats["backing_off"] += 1
            return BACKING_OFF
        if self._waiting >= self.max_waiting:
            self.stats["busy"] += 1
            return BUSY
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="ccdiag-bcrypt")
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._pool, auth.verify, user, password, digest)
        self._inflight[key] = future
        self._waiting += 1
        state.checking = True
        self.stats["bcrypt"] += 1
        try:
            ok = await asyncio.shield(future)
        finally:
            self._waiting -= 1
            state.checking = False
            self._inflight.pop(key, None)
        if ok:
            state.backoff_s, state.until, state.failures = 0.0, 0.0, 0
        else:
            state.failures += 1
        if not ok and state.failures >= FREE_FAILURES:
            state.backoff_s = min(self.backoff_max_s, max(self.backoff_min_s, state.backoff_s * 2))
            state.until = time.monotonic() + state.backoff_s
        return ok

    def retry_after(self, client: str) -> float:
        """Seconds until ``client`` may have a new password checked."""
        state = self._clients.get(client)
        return max(0.0, state.until - time.monotonic()) if state else 0.0

    def _client(self, client: str) -> _Client:
        state = self._clients.get(client)
        if state is None:
            state = self._clients[client] = _Client()
            while len(self._clients) > MAX_CLIENTS:
                self._clients.popitem(last=False)
        else:
            self._clients.move_to_end(client)
        return state

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
