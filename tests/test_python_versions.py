"""An interpreter older than ccdiag supports gets one line naming the requirement, both when it
runs ``python -m ccdiag`` from the source tree and when it runs ``pip install .``.

The interpreters are the real ones of the machine (pyenv's versions, or pythonX.Y on the PATH);
a test skips, naming the version, where that interpreter is absent. The supported ends (3.10 and
3.13) run the quick start and the fast tests in ``.ci/run``.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

import pytest

from conftest import REPO

NEEDS = "ccdiag needs Python >= 3.10"


def find_python(version: str) -> str | None:
    """An interpreter of ``version`` ("3.9"): pyenv's install, else pythonX.Y on the PATH."""
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates = sorted(glob.glob(f"{root}/versions/{version}.*/bin/python"), reverse=True)
    candidates += [p for p in (shutil.which(f"python{version}"),) if p]
    for exe in candidates:
        try:
            out = subprocess.run([exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out == version:  # a pyenv shim for a version not installed answers with an error
            return exe
    return None


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}


@pytest.mark.parametrize("version", ["3.9", "3.6"])
def test_python_m_ccdiag_from_the_tree_names_the_requirement(version):
    exe = find_python(version)
    if exe is None:
        pytest.skip(f"no Python {version} here (pyenv install {version} to run this)")
    proc = subprocess.run([exe, "-m", "ccdiag", "check"], cwd=str(REPO), env=_clean_env(), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and NEEDS in lines[0] and f"Python {version}." in lines[0], proc.stderr
    assert proc.stdout == ""


@pytest.mark.slow
@pytest.mark.parametrize("version", ["3.9", "3.6"])
def test_pip_install_names_the_requirement(version, tmp_path):
    exe = find_python(version)
    if exe is None:
        pytest.skip(f"no Python {version} here (pyenv install {version} to run this)")
    tree = tmp_path / "src"
    shutil.copytree(REPO, tree, ignore=shutil.ignore_patterns(".git", "*.egg-info", "build", ".venv", "__pycache__",
                                                                "bench"))
    proc = subprocess.run([exe, "-m", "pip", "install", "--no-deps", "--target", str(tmp_path / "t"), "."],
                          cwd=str(tree), env=_clean_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert NEEDS in out and f"Python {version}." in out, out[-3000:]
    assert "SyntaxError" not in out and "Traceback" not in out
