"""One module per ``ccdiag`` sub-command; each exposes ``command`` (or ``group``)."""
