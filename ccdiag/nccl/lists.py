"""NCCL's device-list grammar (``NCCL_SOCKET_IFNAME``, ``NCCL_IB_HCA``), parsed and written once.

Syntax, from the NCCL user guide (env.rst) and its parser (``parseStringList`` in
``src/misc/utils.cc``, ``src/misc/socket.cc``): comma-separated entries; a leading ``^`` excludes
the listed names instead of selecting them; then a leading ``=`` makes names exact, otherwise every
entry is a *prefix* (``mlx5_1`` also selects ``mlx5_10`` .. ``mlx5_19``). ``NCCL_IB_HCA`` entries may
carry ``:port`` and, in newer releases, ``:rail:plane`` fields (an empty port field keeps the
positions: ``=mlx5_0::0:0``).

The environment check judges settings with these functions, and the recommender writes its lists
with :func:`exact_list`, so what ccdiag recommends is read back by ccdiag the way NCCL reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class NcclEntry:
    name: str
    port: int | None = None
    raw: str = ""


@dataclass(frozen=True)
class NcclList:
    exclude: bool
    exact: bool
    entries: tuple[NcclEntry, ...]

    def matches(self, name: str, port: int | None = None) -> bool:
        """Whether the list *names* ``name`` (and ``port``), before ``^`` is applied."""
        return any(nccl_match(self, e, name) and (e.port is None or port is None or e.port == port)
                   for e in self.entries)

    def selects(self, name: str, port: int | None = None) -> bool:
        """Whether NCCL would use ``name`` (``port``) under this list (``^`` inverts)."""
        return self.matches(name, port) != self.exclude


def _atoi(text: str) -> int:
    """C's atoi, as NCCL reads a port: leading digits, else 0 ("x" -> 0, "1x" -> 1)."""
    digits = ""
    for ch in text.lstrip(" \t"):
        if not ch.isdigit():
            break
        digits += ch
    return int(digits) if digits else 0


def parse_nccl_list(value: str) -> NcclList:
    """Parse an NCCL device list such as ``^=mlx5_1,mlx5_4`` or ``=mlx5_0:1,mlx5_1:1``, as NCCL does.

    Pure function of the text, following ``parseStringList`` (``src/misc/utils.cc``): entries split
    on ``,`` (empty ones dropped), then on ``:`` into name, port, rail, plane; nothing is stripped, so
    ``mlx5_0, mlx5_1`` names a device " mlx5_1" that never exists; a port is read with ``atoi`` (a
    non-numeric port is 0, which no InfiniBand port is); an empty port field means any port.
    """
    s = value.rstrip("\r\n")
    exclude = s.startswith("^")
    if exclude:
        s = s[1:]
    exact = s.startswith("=")
    if exact:
        s = s[1:]
    entries = []
    for raw in s.split(","):
        if not raw:
            continue
        name, _, rest = raw.partition(":")
        port_txt = rest.split(":", 1)[0]
        port = _atoi(port_txt) if port_txt else None
        if name:
            entries.append(NcclEntry(name, port, raw))
    return NcclList(exclude, exact, tuple(entries))


def nccl_match(spec: NcclList, entry: NcclEntry, name: str) -> bool:
    """One entry against one device name: equality with ``=``, a prefix without."""
    return name == entry.name if spec.exact else name.startswith(entry.name)


def exact_list(items: Iterable[tuple[str, int | None]]) -> str:
    """``=name[:port],...``: the form the recommender writes (never a prefix that catches more)."""
    parts = [f"{name}:{port}" if port is not None else name for name, port in items]
    return "=" + ",".join(parts) if parts else ""


__all__ = ["NcclEntry", "NcclList", "parse_nccl_list", "nccl_match", "exact_list"]
