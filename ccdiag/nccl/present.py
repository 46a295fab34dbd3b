"""The NCCL settings a job on a node would see: the environment first, then ``/etc/nccl.conf``.

Why one function: ``ccdiag nccl`` on one node and ``ccdiag cluster check`` across the job's nodes
must judge the same settings, or a node would be compared on other facts than it is advised on.
NCCL reads ``/etc/nccl.conf`` with its own parser (:mod:`ccdiag.probes._ncclconf`) and sets each
name with ``setenv(.., 0)``, so the process environment wins. Pure: the environment and the file
are read through the host door by :func:`ccdiag.run.observe.nccl_settings_seen`, which passes them in.

Besides ``NCCL_*``, the libfabric variables (``FI_*``) and ``RDMAV_FORK_SAFE`` are kept: the AWS
EFA platform requires some of them (:mod:`ccdiag.nccl.platforms`), and NCCL reaches EFA through a
plugin that reads them from the same environment.
"""

from __future__ import annotations

from typing import Mapping

#: the variables judged: NCCL's own, and those a platform in :mod:`ccdiag.nccl.platforms` requires
JUDGED_PREFIXES = ("NCCL_", "FI_", "RDMAV_FORK_SAFE")
NCCL_CONF = "/etc/nccl.conf"


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
    did, :func:`ccdiag.host.door.environ_recorded`): a variable of these missing from the settings may
    still be set on the node, so it is judged unknown rather than "not set"."""
    return tuple(p for p in JUDGED_PREFIXES if not any(p.startswith(r) for r in recorded))


__all__ = ["JUDGED_PREFIXES", "NCCL_CONF", "settings_present", "unread_prefixes"]
