"""Which CuPy is installed, read from the installed distributions' metadata (never by importing
CuPy, which loads the CUDA libraries).

CuPy is published as one wheel per CUDA major version (``cupy-cuda12x``, ``cupy-cuda13x``) and as a
source distribution (``cupy``). A GPU node may already have any of them; two at once overwrite each
other's files and fail in odd ways, and a wheel for a CUDA newer than the driver cannot start. So
the CuPy benchmarks say which CuPy they found, refuse two at once, and name the ``ccdiag`` extra
that fits the node's driver:

* ``gpu-cuda13`` (``cupy-cuda13x``): CUDA 13 needs an NVIDIA driver of 580 or newer;
* ``gpu-cuda12`` (``cupy-cuda12x``, also plain ``gpu``): CUDA 12 needs 525 or newer.

The minimum drivers are those of NVIDIA's CUDA Toolkit release notes (table "CUDA Toolkit and
Corresponding Driver Versions": CUDA 12.x >= 525.60.13, CUDA 13.x >= 580.65.06 on Linux).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

#: CuPy distribution name -> the CUDA major version its wheel is built for (None: built from source)
CUDA_MAJOR = {"cupy-cuda11x": 11, "cupy-cuda12x": 12, "cupy-cuda13x": 13, "cupy": None}
#: CUDA major version -> the oldest driver branch that runs it, and the ccdiag extra that installs it
MIN_DRIVER_MAJOR = {12: 525, 13: 580}
EXTRA = {12: "gpu-cuda12", 13: "gpu-cuda13"}

_NAME = re.compile(r"^cupy(?:-cuda\d+x|-rocm-[\w-]+)?$")


@dataclass(frozen=True)
class CupyDist:
    """One installed CuPy distribution."""

    name: str  # "cupy-cuda13x"
    version: str  # "13.6.0"
    cuda_major: int | None  # 13; None for a source build or a ROCm wheel

    def describe(self) -> str:
        cuda = f"CUDA {self.cuda_major}" if self.cuda_major else ("ROCm" if "rocm" in self.name else "built from source")
        return f"{self.name} {self.version} ({cuda})"


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed(paths: Iterable[str] | None = None) -> list[CupyDist]:
    """Every CuPy distribution visible on ``paths`` (default: this interpreter's path), by name."""
    from importlib import metadata

    found: dict[str, CupyDist] = {}
    dists = metadata.distributions(path=list(paths)) if paths is not None else metadata.distributions()
    for dist in dists:
        try:
            name = _normalise(dist.metadata["Name"] or "")
        except Exception:  # noqa: BLE001 - a broken metadata directory: not ours to judge
            continue
        if _NAME.match(name) and name not in found:
            found[name] = CupyDist(name, str(dist.version), CUDA_MAJOR.get(name))
    return sorted(found.values(), key=lambda d: d.name)


def driver_major(driver_version: str | None) -> int | None:
    """``"580.95.05"`` -> 580; None when the version is unknown or not a number."""
    m = re.match(r"^\s*(\d+)", driver_version or "")
    return int(m.group(1)) if m else None


def extra_for_driver(driver_version: str | None) -> str:
    """The ccdiag extra whose CuPy this driver runs: CUDA 13 from driver 580 on, else CUDA 12."""
    major = driver_major(driver_version)
    return EXTRA[13] if major is not None and major >= MIN_DRIVER_MAJOR[13] else EXTRA[12]


def install_hint(driver_version: str | None) -> str:
    extra = extra_for_driver(driver_version)
    cuda = 13 if extra == EXTRA[13] else 12
    told = f"driver {driver_version}" if driver_version else "the driver's version is unknown"
    return (f"pip install 'ccdiag[{extra}]' installs cupy-cuda{cuda}x ({told}; CUDA {cuda} needs driver "
            f"{MIN_DRIVER_MAJOR[cuda]} or newer)")


def why_unusable(dists: list[CupyDist], driver_version: str | None) -> str | None:
    """Why the installed CuPy cannot run here: two distributions at once, or a wheel for a CUDA the
    driver is too old for. None when it can (or when no distribution metadata says otherwise)."""
    if len(dists) > 1:
        return (f"{len(dists)} CuPy distributions are installed at once ({', '.join(d.describe() for d in dists)}): "
                f"they overwrite each other's files; uninstall all but one ({install_hint(driver_version)})")
    major = driver_major(driver_version)
    for d in dists:
        need = MIN_DRIVER_MAJOR.get(d.cuda_major or 0)
        if need is not None and major is not None and major < need:
            return (f"{d.describe()} needs NVIDIA driver {need} or newer, this node has {driver_version}: "
                    f"{install_hint(driver_version)}")
    return None


def describe(dists: list[CupyDist]) -> str:
    """``"cupy-cuda13x 13.6.0 (CUDA 13)"``, or what was found instead of exactly one."""
    if not dists:
        return "no CuPy distribution metadata (CuPy imported from a source tree or a test double)"
    return ", ".join(d.describe() for d in dists)
