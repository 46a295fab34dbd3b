"""Keep each GPU's PCIe link busy while the probes read link speeds.

An idle GPU lowers its PCIe link to 2.5 GT/s to save power, so a speed read from an idle GPU says
nothing about the link (the PCIe check only judges speed on busy GPUs). Like DCGM's diagnostics,
``ccdiag check`` therefore copies from host memory to every GPU for the short time the probes read
sysfs, and the links are judged as they run under load. It is bounded (a deadline and a stop
event), it uses only CuPy, imported here and nowhere else, and where it cannot run (no CuPy, no
GPU, a replayed snapshot, a copy that fails) it says why and the check falls back to judging speed
only where NVML shows work.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

#: bytes per copy: large enough to keep a Gen5 x16 link busy for about a millisecond
CHUNK_BYTES = 64 << 20
#: how long the links are loaded before the probes read them (the link retrains within microseconds)
WARMUP_S = 0.2


@dataclass
class LoadState:
    """What the load did: the GPUs that were loaded, copies and bytes, or why it did not run."""

    loaded: list[int] = field(default_factory=list)
    copies: dict[int, int] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
    skipped: str | None = None
    seconds: float = 0.0

    def to_json(self) -> dict:
        return {"loaded": list(self.loaded), "copies": {str(k): v for k, v in self.copies.items()},
                "errors": {str(k): v for k, v in self.errors.items()}, "skipped": self.skipped,
                "seconds": round(self.seconds, 3)}


class LinkLoad:
    """Start with :meth:`start`, stop with :meth:`stop` (always; it is bounded by ``max_s`` anyway)."""

    def __init__(self, max_s: float = 5.0, chunk_bytes: int = CHUNK_BYTES):
        self.max_s = max_s
        self.chunk_bytes = chunk_bytes
        self.state = LoadState()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._t0 = 0.0

    def start(self, live: bool) -> LoadState:
        if not live:
            self.state.skipped = "a replayed snapshot: link speeds are those it recorded"
            return self.state
        try:
            import cupy  # the [gpu] extra
        except Exception as exc:  # noqa: BLE001 - ImportError, or a CUDA library that fails to load
            self.state.skipped = f"CuPy not available ({type(exc).__name__}: {exc}); pip install '.[gpu]' in ccdiag's source tree"
            return self.state
        try:
            count = int(cupy.cuda.runtime.getDeviceCount())
        except Exception as exc:  # noqa: BLE001 - no driver, no device
            self.state.skipped = f"no GPU for CUDA ({type(exc).__name__}: {exc})"
            return self.state
        if count <= 0:
            self.state.skipped = "no GPU for CUDA"
            return self.state
        self._t0 = time.monotonic()
        deadline = self._t0 + self.max_s
        for index in range(count):
            t = threading.Thread(target=self._copy_loop, args=(cupy, index, deadline), name=f"ccdiag-load-{index}",
                                 daemon=True)
            t.start()
            self._threads.append(t)
        self._stop.wait(WARMUP_S)
        return self.state

    def _copy_loop(self, cupy: Any, index: int, deadline: float) -> None:
        try:
            with cupy.cuda.Device(index):
                host = cupy.cuda.alloc_pinned_memory(self.chunk_bytes)
                dev = cupy.empty(self.chunk_bytes, dtype=cupy.uint8)
                n = 0
                while not self._stop.is_set() and time.monotonic() < deadline:
                    dev.data.copy_from_host(host.ptr, self.chunk_bytes)
                    n += 1
                cupy.cuda.Stream.null.synchronize()
            self.state.copies[index] = n
            if n:
                self.state.loaded.append(index)
        except Exception as exc:  # noqa: BLE001 - out of memory, a lost GPU: that GPU is not loaded
            self.state.errors[index] = f"{type(exc).__name__}: {exc}"

    def stop(self, join_s: float = 2.0) -> LoadState:
        self._stop.set()
        end = time.monotonic() + join_s
        for t in self._threads:
            t.join(max(0.0, end - time.monotonic()))
        if self._threads:
            self.state.seconds = time.monotonic() - self._t0
            self.state.loaded.sort()
            if not self.state.loaded and not self.state.skipped:
                self.state.skipped = "no copy completed: " + "; ".join(
                    f"GPU{k} {v}" for k, v in sorted(self.state.errors.items())) if self.state.errors else \
                    "no copy completed within the deadline"
        return self.state
