"""The run: one evaluation of a node under one deadline.

``observe`` reads the node through the host door with the registered probes and builds its
topology; ``stages`` splits the deadline into budgets; ``checkrun`` judges, benchmarks and orders
root causes. Commands, the daemon and the cluster ranks all call it.
"""
