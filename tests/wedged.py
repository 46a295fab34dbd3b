"""A wedged driver, SYNTHESIZED for the deadline tests and ``bench/bench_check_deadline.py``: an
``nvidia-smi`` that never exits and shrugs off SIGTERM, and a ``pynvml`` whose ``nvmlInit`` never
returns. One copy, so what the tests hold to a bound is what the benchmark measures."""

from __future__ import annotations

import pathlib


def write_hung_smi(bindir: pathlib.Path, pids: pathlib.Path, ignored: str = "TERM") -> pathlib.Path:
    """``bindir/nvidia-smi``: appends its PID to ``pids``, ignores the ``ignored`` signals, never exits."""
    smi = bindir / "nvidia-smi"
    smi.write_text(f"#!/bin/bash\n# synthesized: a wedged nvidia-smi\necho $$ >> {pids}\n"
                   f"trap '' {ignored}\nwhile true; do sleep 1; done\n")
    smi.chmod(0o755)
    return smi


#: the real pynvml (found further along sys.path), except that nvmlInit never returns
HUNG_PYNVML = '''\
"""Synthesized: the real pynvml, except that nvmlInit never returns (a wedged driver)."""
import importlib.util, os, sys, time
_here = os.path.dirname(os.path.abspath(__file__))
for _p in sys.path:
    _cand = os.path.join(os.path.abspath(_p or "."), "pynvml.py")
    if os.path.dirname(_cand) != _here and os.path.exists(_cand):
        _spec = importlib.util.spec_from_file_location("_real_pynvml", _cand)
        _real = importlib.util.module_from_spec(_spec)
        sys.modules["_real_pynvml"] = _real
        _spec.loader.exec_module(_real)
        globals().update({k: v for k, v in vars(_real).items() if not k.startswith("__")})
        break
def nvmlInit(*args, **kwargs):
    while True:
        time.sleep(1)
nvmlInitWithFlags = nvmlInit
'''
