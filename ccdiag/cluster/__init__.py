"""Across hosts: ccdiag as MPI ranks under ``mpirun`` or ``srun``.

Why a package of its own: the slow link of a multi-node job is between nodes, which no single-node
check can see. ccdiag starts no processes itself; the cluster's launcher does, and these modules
only bound every wait with a deadline and name the rank, host, link or interface at fault.

* :mod:`.mpictx`   - lazy mpi4py import, deadlines, gathers that never hang
* :mod:`.ring`     - ccdiag's ring and halving-doubling allreduce, the size sweep, the references
* :mod:`.hops`     - the per-hop table of the ring and its slow-hop findings (pure logic)
* :mod:`.pairs`    - the round-robin pairwise matrix; slow host vs slow link (pure logic + MPI)
* :mod:`.order`    - a ring order that maximises the bottleneck hop; hostfiles
* :mod:`.gather`   - ``ccdiag cluster check``: every rank's node check in one cluster report
* :mod:`.compare`  - outliers among many hosts' JSON reports, streamed; two-report diff

mpi4py is imported only inside functions that need it, so ``ccdiag --help`` works without it.
"""
