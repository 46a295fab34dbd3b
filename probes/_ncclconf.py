"""``/etc/nccl.conf`` (and ``$NCCL_CONF_FILE``, ``~/.nccl.conf``) read the way NCCL reads it.

NCCL's parser (``setEnvFile`` in ``src/misc/param.cc``) is not a shell: for each line it drops a
trailing newline and carriage return, skips lines whose first character is ``#`` and lines without
``=``, then takes everything before the first ``=`` as the name and everything after it as the
value, stripping nothing (no spaces, no quotes, no ``export``), truncated at 1023 characters; it
sets each with ``setenv(name, value, 0)``, so the process environment wins over the file and the
first occurrence of a name wins over later ones (``NCCL_CONF_FILE`` or ``~/.nccl.conf`` are read
before ``/etc/nccl.conf``). A line ``export NCCL_IB_HCA=mlx5_0`` therefore sets a variable named
``export NCCL_IB_HCA``, which NCCL never reads, and ``NCCL_SOCKET_IFNAME="eth0"`` selects an
interface named ``"eth0"`` with the quotes.
"""

from __future__ import annotations

import re

MAX_FIELD = 1023
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def conf_lines(text: str):
    """(line number, name, value) for every line NCCL takes, in order, duplicates included."""
    for n, raw in enumerate(text.split("\n"), 1):
        line = raw[:4095].rstrip("\r") if raw.endswith("\r") else raw[:4095]
        if not line or line[0] == "#" or "=" not in line:
            continue
        name, _, value = line.partition("=")
        yield n, name[:MAX_FIELD], value[:MAX_FIELD]


def parse_nccl_conf(text: str) -> dict[str, str]:
    """name -> value as NCCL would set them from this file (first occurrence wins)."""
    out: dict[str, str] = {}
    for _, name, value in conf_lines(text):
        out.setdefault(name, value)
    return out


def conf_problems(text: str) -> list[str]:
    """Lines NCCL reads differently from what their author meant (shell habits), one sentence each."""
    out = []
    seen: dict[str, int] = {}
    for n, name, value in conf_lines(text):
        if not _NAME.fullmatch(name):
            hint = " ('export' is not understood: the name includes it)" if name.startswith("export ") else \
                " (spaces around '=' become part of the name)" if name != name.strip() else ""
            out.append(f"line {n}: NCCL sets a variable named {name!r}, which nothing reads{hint}")
        elif value != value.strip() or (len(value) >= 2 and value[0] == value[-1] and value[0] in "'\""):
            out.append(f"line {n}: {name} is set to {value!r} with its quotes/spaces: NCCL strips nothing")
        if name in seen:
            out.append(f"line {n}: {name} repeats line {seen[name]}; NCCL keeps the first value")
        seen.setdefault(name, n)
    return out
