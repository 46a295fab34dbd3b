"""The host door: the only code that touches the machine.

Files and symlinks under a root, commands run with hard deadlines, NVML calls bounded in time, a
cloud's metadata service, process groups of what ccdiag started, and the snapshots that record and
replay all of it. Nothing here imports another room of ccdiag except ``ccdiag.core``.
"""
