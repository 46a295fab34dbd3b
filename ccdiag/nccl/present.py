"""The NCCL settings a job on a node would see: the environment first, then ``/etc/nccl.conf``.

Why one function: ``ccdiag nccl`` on one node and ``ccdiag cluster check`` across the job's nodes
must judge the same settings, or a node would be compared on other facts than it is advised on.
NCCL reads ``/etc/nccl.conf`` with its own parser (:mod:`ccdiag.probes._ncclconf`) and sets each
name with ``setenv(.., 0)``, so the process environment wins. :func:`settings_present` is pure;
:func:`on_host` reads the environment and the file (:func:`conf_text`) through the host door.

Besides ``NCCL_*``, the libfabric variables (``FI_*``) and ``RDMAV_FORK_SAFE`` are kept: the AWS
EFA platform requires some of them (:mod:`ccdiag.nccl.platforms`), and NCCL reaches EFA through a
plugin that reads them from the same environment.
"""

from __future__ import annotations

from typing import Any, Mapping

#: the variables judged: NCCL's own, and those a platform in :mod:`ccdiag.nccl.platforms` requires
JUDGED_PREFIXES = ("NCCL_", "FI_", "RDMAV_FORK_SAFE")
NCCL_CONF = "/etc/nccl.conf"


def conf_text(host: Any) -> str | None:
    """``/etc/nccl.conf`` as the door reads it; None when the node has none or it cannot be read.
    Read once by a caller that also wants its notes (:func:`ccdiag.probes._ncclconf.conf_problems`)."""
    from ccdiag.host import HostReadError

    try:
        return host.read_text(NCCL_CONF) if host.exists(NCCL_CONF) else None
    except (HostReadError, OSError):
        return None


def on_host(host: Any, conf: str | None) -> tuple[dict[str, str], str, tuple[str, ...]]:
    """What :func:`settings_present` says of the door's environment and ``conf`` (its
    :func:`conf_text`), and the judged prefixes that environment did not cover
    (:func:`unread_prefixes`: an older snapshot's libfabric variables, everything under --root)."""
    from ccdiag.host import environ_recorded

    env, source = settings_present(host.environ(), conf)
    return env, source, unread_prefixes(environ_recorded(host.meta()))


def settings_present(environ: Mapping[str, str], conf_text: str | None) -> tuple[dict[str, str], str]:
    """(settings, where they were read): the judged variables of ``environ``, then those of the
    ``/etc/nccl.conf`` text that the environment does not set (None: no file)."""
    from ccdiag.probes._ncclconf import parse_nccl_conf

    env = {k: v for k, v in environ.items() if k.startswith(JUDGED_PREFIXES)}
    conf = parse_nccl_conf(conf_text) if conf_text else {}
    for k, v in conf.items():
        env.setdefault(k, v)
    return env, "environment and /etc/nccl.conf" if conf else "environment"


def unread_prefixes(recorded: tuple[str, ...]) -> tuple[str, ...]:
    """The judged prefixes the door's environment did not cover (``recorded``: the prefixes it
    did, :func:`ccdiag.host.environ_recorded`): a variable of these missing from the settings may
    still be set on the node, so it is judged unknown rather than "not set"."""
    return tuple(p for p in JUDGED_PREFIXES if not any(p.startswith(r) for r in recorded))


__all__ = ["JUDGED_PREFIXES", "NCCL_CONF", "conf_text", "on_host", "settings_present", "unread_prefixes"]
