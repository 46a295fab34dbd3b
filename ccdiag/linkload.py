"""The old name of :mod:`ccdiag.busy_pcie_links` (keeping GPU PCIe links busy while their speed is
read), kept only while the check runner still imports it by this name; new code imports
``ccdiag.busy_pcie_links``."""

from ccdiag.busy_pcie_links import LinkLoad

__all__ = ["LinkLoad"]
