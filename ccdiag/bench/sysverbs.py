"""Where rdma-core's ``pyverbs`` lives when it came from the distribution, not from pip.

Why: pyverbs is not on PyPI; rdma-core ships it as a system package (Debian/Ubuntu
``python3-pyverbs`` in ``/usr/lib/python3/dist-packages``, RHEL ``python3-pyverbs`` in the system
site-packages). A ccdiag installed in a virtual environment does not see those directories, so
the RDMA engine would say "not installed" on a node where it is. The directories are *appended*
to the search path (never put first: the environment's own packages keep precedence), and only
when their compiled modules were built for this interpreter (the ``cpython-311`` tag), since a
mismatched build fails at import with an unhelpful error.
"""

from __future__ import annotations

import glob
import importlib.machinery
import os
import sys

#: where distributions install system Python packages
SYSTEM_SITE_DIRS = ("/usr/lib/python3/dist-packages", "/usr/lib64/python{v}/site-packages",
                    "/usr/lib/python{v}/site-packages")


def _matches_interpreter(pkg_dir: str) -> bool:
    """Every extension in the package is built for this interpreter (its own tag, e.g.
    ``.cpython-311-x86_64-linux-gnu.so``, or the stable ABI)."""
    own = tuple(s for s in importlib.machinery.EXTENSION_SUFFIXES if s != ".so")
    return all(e.endswith(own) for e in glob.glob(os.path.join(pkg_dir, "*.so")))


def system_pyverbs_dirs() -> list[str]:
    """System site directories holding a pyverbs this interpreter can load."""
    v = f"{sys.version_info.major}.{sys.version_info.minor}"
    out = []
    for pattern in SYSTEM_SITE_DIRS:
        d = pattern.format(v=v)
        pkg = os.path.join(d, "pyverbs")
        if os.path.isfile(os.path.join(pkg, "__init__.py")) and _matches_interpreter(pkg):
            out.append(d)
    return out


def add_system_pyverbs() -> bool:
    """Append the system directories that hold pyverbs to ``sys.path``; True when one was added."""
    added = False
    for d in system_pyverbs_dirs():
        if d not in sys.path:
            sys.path.append(d)
            added = True
    return added
