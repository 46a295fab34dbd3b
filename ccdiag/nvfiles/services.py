"""``systemctl status <unit>`` output: the unit's active state, as ``systemctl is-active`` prints it.

The bug report keeps ``systemctl status nvidia-fabricmanager.service``; the system probe asks
``systemctl is-active nvidia-fabricmanager``. The ``Active:`` line of the former holds the latter's
answer as its first word (``active (running)``, ``inactive (dead)``, ``failed (Result: ...)``); a
unit systemd does not know ("Unit ... could not be found.") is ``inactive`` to ``is-active``.
"""

from __future__ import annotations

import re

_ACTIVE = re.compile(r"^\s*Active:\s*(?P<state>[a-z-]+)\b")
_NOT_FOUND = re.compile(r"Unit \S+ could not be found|not-found", re.IGNORECASE)


def active_state(lines: list[str]) -> str | None:
    """``active``, ``inactive``, ``failed``, ``activating`` ...; None when the output does not say."""
    for line in lines:
        m = _ACTIVE.match(line)
        if m:
            return m.group("state")
    if any(_NOT_FOUND.search(line) for line in lines):
        return "inactive"
    return None
