"""NCCL as a domain: its list grammar, the settings an expert would write for a node (each with its
evidence), the topology XML it reads, and what its INFO log says it chose.

Modules: :mod:`.lists` (device-list grammar), :mod:`.knobs` (a setting with its reason and
evidence), :mod:`.recommend` (the pure recommender), :mod:`.topo_xml` (NCCL's topology file),
:mod:`.logread` (``NCCL_DEBUG=INFO`` logs as pasted), :mod:`.render` (env file, nccl.conf, JSON).
"""
