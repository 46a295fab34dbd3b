"""ccdiag: diagnostics and topology discovery for NVIDIA GPU nodes.

Everything ccdiag knows about a machine comes through one door (:mod:`ccdiag.host.door`),
so the same code runs live, records a snapshot, or replays one anywhere.
"""

__version__ = "0.1.0"
