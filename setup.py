# Everything about the build is in pyproject.toml; this file adds two things it cannot say:
# 1. An interpreter older than ccdiag supports stops here with one line naming the requirement,
#    before a build dependency or a syntax error can say something less clear (pip on Python 3.6
#    still runs setup.py directly).
# 2. A build from a git checkout records the commit in the package (ccdiag/_build_commit.txt), for
#    `ccdiag --version` (see ccdiag/commands/version.py; an editable install reads it from the tree instead).
import os
import subprocess
import sys

if sys.version_info < (3, 10):
    sys.exit("ccdiag needs Python >= 3.10; this is Python %d.%d.%d (%s). On RHEL/Rocky 8 or 9 install "
             "python3.11 (dnf install python3.11) and make the venv with it: python3.11 -m venv .venv"
             % (sys.version_info[0], sys.version_info[1], sys.version_info[2], sys.executable))

from setuptools import setup  # noqa: E402
from setuptools.command.build_py import build_py  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def _commit():
    if not os.path.exists(os.path.join(HERE, ".git")):
        return ""
    try:
        rev = subprocess.run(["git", "-C", HERE, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", HERE, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    if rev.returncode != 0:
        return ""
    return rev.stdout.strip() + (" +local changes" if dirty.stdout.strip() else "")


class BuildWithCommit(build_py):
    def run(self):
        super().run()
        commit = _commit()
        if commit and not self.dry_run:
            with open(os.path.join(self.build_lib, "ccdiag", "_build_commit.txt"), "w", encoding="utf-8") as fh:
                fh.write(commit + "\n")


setup(cmdclass={"build_py": BuildWithCommit})
