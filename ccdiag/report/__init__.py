"""The report: the versioned JSON document, the terminal verdict, and pseudonymised snapshots.

Downstream of everything it shows: it may read the probes, the topology, the checks and the
benchmarks, and nothing below it reaches back here.
"""
