"""Micro-benchmarks: what the node's links *deliver*, judged against what its topology says they can.

Every benchmark is registered by a stable name (:mod:`.registry`), says what it needs and why it
cannot run where it cannot (``applicable``), runs under a time budget, and returns a
:class:`~ccdiag.bench.result.BenchResult` holding each measured value next to the expected value of
its path (the path's bottleneck link, as capable and as trained, from :mod:`ccdiag.topology`), the
ratio, and findings that name the component at fault (:mod:`.localize`).

CuPy, pyverbs and mpi4py are imported only inside the engine that needs them; the GPU engines run
in a child process (:mod:`.cuda_worker`) so that a copy that never completes costs a kill, not a
hung command.
"""
