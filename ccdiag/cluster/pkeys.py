"""The InfiniBand partition keys of each port, read through the host door, for ``cluster check``.

Why here and not in the InfiniBand probe: only the comparison across hosts needs them (a host whose
port lacks the job's partition cannot talk to its peers over it, while every single-host check
passes), so ``cluster check`` reads them beside the node check, through the same door (live or a
snapshot: a snapshot that did not record them gives none, and none is compared).
``/sys/class/infiniband/<dev>/ports/<n>/pkeys/<i>``: one table entry per file, ``0x0000`` unused.
"""

from __future__ import annotations

IB_CLASS = "/sys/class/infiniband"
#: at most this many table entries read per port (a PKey table has 128 on ConnectX)
MAX_ENTRIES = 128


def parse_pkey(text: str | None) -> str | None:
    """``0xffff`` -> ``0xffff``, the full-membership bit kept; ``0x0000`` and garbage -> None."""
    try:
        value = int((text or "").strip(), 16)
    except ValueError:
        return None
    return f"0x{value:04x}" if 0 < value <= 0xFFFF else None


def _ls(host, path: str) -> list[str]:
    try:
        return sorted(host.list_dir(path))
    except Exception:  # noqa: BLE001 - absent on this host or in this snapshot: nothing to compare
        return []


def pkey_facts(host) -> dict[str, str]:
    """``ib_pkeys <dev>/<port>`` -> the port's valid partition keys, sorted, comma-separated."""
    facts: dict[str, str] = {}
    for dev in _ls(host, IB_CLASS):
        for port in _ls(host, f"{IB_CLASS}/{dev}/ports"):
            base = f"{IB_CLASS}/{dev}/ports/{port}/pkeys"
            names = sorted(_ls(host, base), key=lambda n: int(n) if n.isdigit() else 1 << 30)[:MAX_ENTRIES]
            keys = set()
            for name in names:
                try:
                    key = parse_pkey(host.read_attr(f"{base}/{name}"))
                except Exception:  # noqa: BLE001 - one unreadable entry is left out
                    key = None
                if key:
                    keys.add(key)
            if keys:
                facts[f"ib_pkeys {dev}/{port}"] = ",".join(sorted(keys))
    return facts
