"""Does a value look like a secret? The last guard of a redacted snapshot, applied even to allowed readings.

The allow-list (:mod:`ccdiag.report.allowlist`) decides what is kept; this module vetoes a kept value
that carries a credential anyway: a name that says it is one (``*_TOKEN``, ``*PASSWORD*``), a URL
with a user and password, an assignment of a password or key inside a value, the published shapes
of common tokens (cloud access keys, source-forge and chat tokens, JSON web tokens, PEM private
keys), and long random-looking strings. A GPU UUID and a hex PCI address look random and are not
secrets; they are recognised first.
"""

from __future__ import annotations

import math
import re

#: a name that says its value is a credential
SECRET_NAME = re.compile(r"(?i)(pass(word|wd)?|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|credential|"
                         r"auth|session|cookie|signature|bearer)")
#: token shapes as their issuers document them (prefixes and lengths), and generic credential forms
SECRET_VALUE = re.compile(
    r"(?i)(?:"
    r"[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@"  # scheme://user:password@host
    r"|\b(?:pass(?:word|wd)?|pwd|secret|token|api[_-]?key|access[_-]?key|auth)\s*[=:]\s*\S"  # password=...
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
    r"|\bbearer\s+[A-Za-z0-9._~+/-]{8,}"
    r")"
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"  # AWS access key id
    r"|\bgh[pousr]_[A-Za-z0-9]{36,}\b|\bgithub_pat_[A-Za-z0-9_]{22,}\b"  # GitHub tokens
    r"|\bglpat-[A-Za-z0-9_-]{20,}\b"  # GitLab
    r"|\bxox[abposr]-[A-Za-z0-9-]{10,}\b"  # Slack
    r"|\bsk-[A-Za-z0-9_-]{20,}\b"  # API keys of the sk- form
    r"|\bnvapi-[A-Za-z0-9_-]{20,}\b"  # NVIDIA API keys
    r"|\bAIza[0-9A-Za-z_-]{35}\b"  # Google API keys
    r"|\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"  # JSON web tokens
)
#: not secrets however random they look: GPU/MIG UUIDs, PCI addresses, GUIDs and MACs
_BENIGN = re.compile(r"(?i)^(?:(?:GPU|MIG)-[0-9a-f-]{36}|[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]|"
                     r"(?:[0-9a-f]{2}[:-]){5}[0-9a-f]{2}|(?:[0-9a-f]{4}:){3,7}[0-9a-f]{4})$")
_RANDOM_RUN = re.compile(r"[A-Za-z0-9+/=]{20,}")
_HEX_RUN = re.compile(r"^[0-9a-fA-F]{32,}$")


def _entropy_bits(s: str) -> float:
    counts: dict[str, int] = {}
    for c in s:
        counts[c] = counts.get(c, 0) + 1
    return -sum(n / len(s) * math.log2(n / len(s)) for n in counts.values())


def random_looking(s: str) -> bool:
    """A run of 20 or more base64 characters with both cases and digits (one in twelve or more) and
    high entropy, or 32 or more hex digits: a key. Words joined by ``_`` or ``-`` (instance types,
    file names) are separate runs, and a path's words rarely carry digits."""
    for run in _RANDOM_RUN.findall(s):
        if _BENIGN.match(run):
            continue
        digits = sum(c.isdigit() for c in run)
        if _HEX_RUN.match(run) and digits and digits < len(run):
            return True
        if (digits * 12 >= len(run) and any(c.islower() for c in run) and any(c.isupper() for c in run)
                and _entropy_bits(run) >= 3.7):
            return True
    return False


def looks_secret(value: str, name: str = "") -> bool:
    """Whether ``value`` (of a setting called ``name``, if any) must not leave the site."""
    if name and SECRET_NAME.search(name):
        return True
    if not value or _BENIGN.match(value.strip()):
        return False
    return bool(SECRET_VALUE.search(value)) or random_looking(value)


__all__ = ["looks_secret", "random_looking"]
