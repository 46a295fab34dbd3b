"""``ccdiag --version``: what a bug report needs to say which ccdiag ran where.

The commit comes from one of two places, and the output says which:

* **recorded at build time**: ``pip install .`` from a git checkout runs ``setup.py``'s ``build_py``,
  which writes the checkout's commit (and whether the tree had local changes) into
  ``ccdiag/_build_commit.txt`` inside the installed package;
* **read at run time from the source tree**: an editable install (or ``python -m ccdiag`` in a
  checkout) asks ``git`` about the tree the code is running from, with a deadline.

Neither: the line says the commit is not known (an sdist or a wheel built outside git). The driver
and NVML versions come through the NVML facade (bounded in time); without a driver the line says so.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys

from ccdiag import __version__

# the installed package (this module is ccdiag/commands/version.py)
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD_COMMIT_FILE = os.path.join(PACKAGE_DIR, "_build_commit.txt")


def git_commit(tree: str, timeout_s: float = 3.0) -> str | None:
    """``abc1234`` (``+local changes``) of the git checkout ``tree``, or None when it is not one."""
    if not os.path.exists(os.path.join(tree, ".git")):
        return None
    try:
        rev = subprocess.run(["git", "-C", tree, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                             timeout=timeout_s)
        if rev.returncode != 0 or not rev.stdout.strip():
            return None
        dirty = subprocess.run(["git", "-C", tree, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return rev.stdout.strip() + (" +local changes" if dirty.stdout.strip() else "")


def commit_line() -> str:
    try:
        with open(BUILD_COMMIT_FILE, encoding="utf-8") as fh:
            recorded = fh.read().strip()
    except OSError:
        recorded = ""
    if recorded:
        return f"commit {recorded} (recorded at build time)"
    live = git_commit(os.path.dirname(PACKAGE_DIR))
    if live:
        return f"commit {live} (read at run time from the source tree {os.path.dirname(PACKAGE_DIR)})"
    return "commit unknown (not built from a git checkout)"


def _dist_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def driver_lines(timeout_s: float = 3.0) -> list[str]:
    """The NVIDIA driver and NVML versions, or why they could not be read (never a hang)."""
    from ccdiag.host.nvmlcall import NvmlCallError, NvmlFacade

    facade = NvmlFacade(call_timeout=timeout_s, init_timeout=timeout_s)
    try:
        driver = facade.call("nvmlSystemGetDriverVersion")
        nvml = facade.call("nvmlSystemGetNVMLVersion")
        return [f"NVIDIA driver {driver}", f"NVML {nvml}"]
    except NvmlCallError as exc:
        return [f"NVIDIA driver: not read ({exc.error_class}: {exc.message or exc.fn})"]
    except Exception as exc:  # noqa: BLE001 - --version must always print
        return [f"NVIDIA driver: not read ({type(exc).__name__}: {exc})"]
    finally:
        try:
            facade.shutdown()
        except Exception:  # noqa: BLE001
            pass


def version_text(with_driver: bool = True) -> str:
    lines = [f"ccdiag {__version__}, {commit_line()}",
             f"Python {platform.python_version()} ({sys.executable})",
             f"nvidia-ml-py {_dist_version('nvidia-ml-py') or 'not installed'}"]
    if with_driver:
        lines += driver_lines()
    return "\n".join(lines)
