"""NVIDIA's own support files read as data: ``nvidia-bug-report.log`` sections, ``nvidia-smi -q``
(text and ``-x`` XML), ``lspci``/``ibstat``/``dmidecode`` blocks, ``dcgmi diag`` (text and ``-j``).
Pure readers of text; the host door builds a replayable node from them (:mod:`ccdiag.host.bugreport`)."""
