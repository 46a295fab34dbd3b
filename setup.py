# Only a guard: everything about the build is in pyproject.toml. An interpreter older than ccdiag
# supports stops here with one line naming the requirement, before a build dependency or a syntax
# error can say something less clear (pip on Python 3.6 still runs setup.py directly).
import sys

if sys.version_info < (3, 10):
    sys.exit("ccdiag needs Python >= 3.10; this is Python %d.%d.%d (%s). On RHEL/Rocky 8 or 9 install "
             "python3.11 (dnf install python3.11) and make the venv with it: python3.11 -m venv .venv"
             % (sys.version_info[0], sys.version_info[1], sys.version_info[2], sys.executable))

from setuptools import setup  # noqa: E402

setup()
