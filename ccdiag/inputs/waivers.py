"""Waivers: a known problem on one component, excused by name until a date.

A fleet policy holds every node to one standard, but a fleet always has a part waiting for repair:
"mlx5_4 is unplugged until Friday". Without a way to say so, that node fails every check until the
cable comes, and the operator either drains it (losing seven good GPUs) or stops running checks on
it (losing everything else). A waiver says it once, in the policy file, with who said it and why::

    [[waiver]]
    check = "ib.port_state"          # the check id, as `ccdiag check` prints it
    component = "mlx5_4 port 1"      # the component, as printed (a GPU also by UUID or PCI address)
    until = 2026-12-04               # through the end of that day, UTC (or a TOML date-time)
    by = "alice@example.com"
    reason = "cable on order (OPS-1234)"

This module reads and writes the entries and says which finding one covers
(:meth:`Waiver.covers`); :mod:`ccdiag.checks.waiving` applies them after the checks and the root
causes, with the rule for what follows from a waived root.

A waiver is narrow on purpose: exactly one check on exactly one component (optionally one subject
of it, such as ``XID 79``). It never covers another check, another component or every GPU; a typo
in it covers nothing, so the failure stays visible (the report says which waivers matched nothing).
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

from ccdiag.core.readings import normalize_bdf

#: the policy file's key: ``[[waiver]]`` tables (TOML arrays of tables), one per waiver
WAIVER_KEY = "waiver"
#: keys of one waiver; ``subject`` is optional
REQUIRED_KEYS = ("check", "component", "until", "by", "reason")
OPTIONAL_KEYS = ("subject",)
#: check ids as findings carry them (``pcie.link_width``)
CHECK_ID = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_]+)+$")
#: longest text a waiver field may hold (a reason is a sentence, not a document)
MAX_TEXT = 500
#: default lead of the notice before a waiver lapses (policy ``waiver_warn_days``)
DEFAULT_WARN_DAYS = 3.0
_UUID = re.compile(r"^(GPU|MIG)-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$", re.IGNORECASE)
_PCI = re.compile(r"^([0-9a-f]{1,8}:)?[0-9a-f]{1,2}:[0-9a-f]{1,2}\.[0-7]$", re.IGNORECASE)


class WaiverError(ValueError):
    """A waiver entry that cannot be used; the message says what is wrong (the policy reader adds
    the file and line)."""


@dataclass(frozen=True)
class Waiver:
    """One waiver as the policy file states it. ``until`` is the date or date-time as written (ISO);
    ``lapses_at`` the epoch second it stops covering anything; ``line`` where it stands in the file."""

    check: str
    component: str
    until: str
    lapses_at: float
    by: str
    reason: str
    subject: str | None = None
    line: int | None = None

    def covers(self, check: str, component: Any, subject: str | None = None) -> bool:
        """Whether this waiver names ``check`` on ``component`` (a :class:`ccdiag.core.findings.Component`)
        and, when it names a subject, that subject. A component is named by the name ccdiag prints;
        a GPU itself (a ``gpu`` component, not its links) also by its UUID or PCI address, which
        stay right when GPU indices move."""
        if check != self.check or (self.subject is not None and subject != self.subject):
            return False
        if component.name == self.component:
            return True
        if component.kind != "gpu":
            return False
        if _UUID.match(self.component):
            return (component.uuid or "").lower() == self.component.lower()
        if _PCI.match(self.component):
            return component.bdf is not None and normalize_bdf(component.bdf) == normalize_bdf(self.component)
        return False

    def names(self) -> str:
        """``ib.port_state on mlx5_4 port 1`` (``xid.recent XID 79 on GPU6``)."""
        what = f"{self.check} {self.subject}" if self.subject else self.check
        return f"{what} on {self.component}"

    def to_json(self) -> dict:
        return {"check": self.check, "component": self.component, "subject": self.subject, "until": self.until,
                "lapses_at": self.lapses_at, "by": self.by, "reason": self.reason, "line": self.line}


def _text(entry: dict, key: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise WaiverError(f"{key} must be a non-empty string, not {value!r}")
    if len(value) > MAX_TEXT:
        raise WaiverError(f"{key} is longer than {MAX_TEXT} characters")
    return value.strip()


def lapse_time(value: Any) -> tuple[str, float]:
    """(``until`` as ISO text, the epoch second the waiver lapses) from a TOML date, date-time or
    string. A date covers that whole day in UTC (it lapses at the next midnight UTC); a date-time
    without an offset is read as UTC."""
    if isinstance(value, str):
        text = value.strip()
        iso = text[:-1] + "+00:00" if text[-1:] in ("Z", "z") else text  # Python 3.10 reads no "Z"
        try:
            value = dt.date.fromisoformat(iso) if len(iso) == 10 else dt.datetime.fromisoformat(iso)
        except ValueError:
            raise WaiverError(f"until must be a date (2026-12-04) or a date-time (2026-12-04T18:00:00Z), "
                              f"not {text!r}") from None
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.timezone.utc)
        return value.isoformat(), aware.timestamp()
    if isinstance(value, dt.date):
        return value.isoformat(), float(calendar.timegm((value + dt.timedelta(days=1)).timetuple()))
    raise WaiverError(f"until must be a date (2026-12-04) or a date-time, not {value!r}")


def parse_waiver(entry: Any, line: int | None = None) -> Waiver:
    """One ``[[waiver]]`` table as a :class:`Waiver`; raises :class:`WaiverError`."""
    if not isinstance(entry, dict):
        raise WaiverError(f"a waiver is a table ([[waiver]] with check, component, until, by, reason), "
                          f"not {entry!r}")
    unknown = sorted(set(entry) - set(REQUIRED_KEYS) - set(OPTIONAL_KEYS))
    if unknown:
        raise WaiverError(f"unknown key {unknown[0]!r} in a waiver (keys: {', '.join(REQUIRED_KEYS + OPTIONAL_KEYS)})")
    missing = [k for k in REQUIRED_KEYS if k not in entry]
    if missing:
        raise WaiverError(f"a waiver needs {', '.join(missing)} (who waived what, on which component, until "
                          f"when and why)")
    check = _text(entry, "check")
    if not CHECK_ID.match(check):
        raise WaiverError(f"check must be a check id such as ib.port_state, not {check!r}")
    component = _text(entry, "component")
    if component.upper().startswith("MIG-"):
        raise WaiverError(f"component {component!r} is a MIG instance: name its GPU")
    until, lapses_at = lapse_time(entry["until"])
    subject = _text(entry, "subject") if "subject" in entry else None
    return Waiver(check=check, component=component, until=until, lapses_at=lapses_at, by=_text(entry, "by"),
                  reason=_text(entry, "reason"), subject=subject, line=line)


def waiver_lines(text: str) -> list[int]:
    """The line of each ``[[waiver]]`` header in a policy text, in order."""
    pat = re.compile(r"^\s*\[\[\s*" + WAIVER_KEY + r"\s*\]\]")
    return [n for n, line in enumerate(text.splitlines(), 1) if pat.match(line)]


def parse_waivers(value: Any, text: str = "") -> tuple[Waiver, ...]:
    """Every waiver of a policy's ``waiver`` key. Raises :class:`WaiverError` whose message starts
    with the line (``12: ...``) where it is known."""
    if not isinstance(value, list):
        raise WaiverError("waivers are [[waiver]] tables (an array of tables)")
    lines = waiver_lines(text)
    out: list[Waiver] = []
    seen: dict[tuple, Waiver] = {}
    for i, entry in enumerate(value):
        line = lines[i] if i < len(lines) and len(lines) == len(value) else None
        try:
            w = parse_waiver(entry, line)
        except WaiverError as exc:
            raise WaiverError(f"{line}: {exc}" if line else str(exc)) from None
        key = (w.check, w.component, w.subject)
        if key in seen:
            first = seen[key]
            again = f"a second waiver of {w.names()}" + (f" (the first is at line {first.line})" if first.line else "")
            raise WaiverError(f"{line}: {again}" if line else again)
        seen[key] = w
        out.append(w)
    return tuple(out)


# -- writing ----------------------------------------------------------------------------------
def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def waiver_toml(w: Waiver) -> list[str]:
    """One waiver as a ``[[waiver]]`` table (``until`` as a TOML date or date-time, unquoted)."""
    lines = ["[[waiver]]", f"check = {_quoted(w.check)}", f"component = {_quoted(w.component)}"]
    if w.subject is not None:
        lines.append(f"subject = {_quoted(w.subject)}")
    return lines + [f"until = {w.until}", f"by = {_quoted(w.by)}", f"reason = {_quoted(w.reason)}"]


#: what a written policy says about waivers, above its ``[[waiver]]`` tables (or the example);
#: the writer wraps it as a comment
HELP = ("Waivers: a known problem on one component, excused until a date. A waived problem does not fail "
        "the node (exit 0); it shows as WAIVED in the report, the JSON (status \"waived\") and the metrics "
        "(ccdiag_finding_waived). Each names one check on one component as `ccdiag check` prints them (a GPU "
        "also by UUID or PCI address); a date covers that whole day (UTC). Before it lapses the report says "
        "so (waiver_warn_days); after, a policy.waiver warning is raised and the problem counts again. What "
        "follows from a waived problem is waived with it only on the same component. Tables come after "
        "every key: add keys above this comment.")
#: what ``ccdiag policy init`` writes when the policy has no waiver: one, commented out (an
#: example never waives anything by accident)
EXAMPLE = (
    "# [[waiver]]",
    "# check = \"ib.port_state\"",
    "# component = \"mlx5_4 port 1\"",
    "# until = 2026-12-04",
    "# by = \"alice@example.com\"",
    "# reason = \"mlx5_4 is unplugged until the new cable arrives (ticket OPS-1234)\"",
)


__all__ = ["DEFAULT_WARN_DAYS", "EXAMPLE", "HELP", "WAIVER_KEY", "Waiver", "WaiverError", "lapse_time", "parse_waiver",
           "parse_waivers", "waiver_lines", "waiver_toml"]
