"""Exporters: Prometheus collectors and node_exporter textfile output. Installed as
``ccdiag.exporters``."""
