"""Exporters: Prometheus collectors and node_exporter textfile output. Installed as
``ccdiag.exporters``.

* :mod:`.spec` declares every metric (name, type, help, labels); ``metrics.json`` is generated from it;
* :mod:`.cycle` turns one evaluation into a :class:`~.cycle.Cycle` and keeps state between cycles;
* :mod:`.metrics` is the pure function from a cycle to metric families;
* :mod:`.collector` serves the last cycle plus its age on a private registry;
* :mod:`.daemon`, :mod:`.server`, :mod:`.webconfig`, :mod:`.sdnotify` make up ``ccdiag daemon``;
  :mod:`.isolation` runs its cycles in a child process, :mod:`.sanity` refuses unexportable values;
* :mod:`.textfile` writes ``ccdiag.prom`` for node_exporter's textfile collector.
"""
