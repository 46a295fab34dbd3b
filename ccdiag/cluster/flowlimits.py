"""What one TCP or UDP flow may carry on a cloud that limits flows, below the interface's rate.

Why: ``bench pairs`` and the ring hold each figure between hosts to the line rate of the path
(:mod:`ccdiag.cluster.capability`). On Amazon EC2 one flow (a 5-tuple) is limited to 5 Gbit/s between
instances outside a cluster placement group and 10 Gbit/s within one, whatever the instance's
bandwidth (EC2 user guide, "Amazon EC2 instance network bandwidth", single-flow traffic). MPI over
TCP between two EC2 hosts is such a flow: held to a 100 or 200 Gbit/s interface it would read as 5 or
10 % of it, a failure of a healthy pair. There the path's capacity is the flow limit instead; the
larger figure (10 Gbit/s) is used, since ccdiag cannot tell whether the hosts share a placement group,
so a pair at 5 Gbit/s (50 %) still passes and one at 1 Gbit/s still warns.

A limit only ever lowers a line rate that is known; it never stands in for an unknown one (an
upper bound is not a measure of the link), and a transport that is not one flow (EFA, RDMA, several
TCP connections) can read above it, which is never a failure.
"""

from __future__ import annotations

from typing import NamedTuple


class FlowLimit(NamedTuple):
    gbit_s: float
    source: str


#: provider (:func:`ccdiag.probes.platform.classify`) -> the limit of one flow between its instances
FLOW_LIMITS: dict[str, FlowLimit] = {
    "aws": FlowLimit(10.0, "Amazon EC2 single-flow limit: 5 Gbit/s between instances, 10 Gbit/s within a cluster "
                           "placement group (EC2 user guide, instance network bandwidth)"),
}


def flow_limit(provider: str | None) -> FlowLimit | None:
    """The flow limit of the cloud a host runs on, or None where none is documented."""
    return FLOW_LIMITS.get(provider) if provider else None


def local_provider() -> str | None:
    """The cloud this host runs on, read through the host door as the platform probe reads it
    (:func:`ccdiag.probes.platform.provider_of`); None on bare metal, where DMI is missing, or on a
    cloud not recognised."""
    from ccdiag.host.door import LiveHost
    from ccdiag.probes.platform import provider_of

    return provider_of(LiveHost())
