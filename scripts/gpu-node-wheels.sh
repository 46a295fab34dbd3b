#!/usr/bin/env bash
# Prepares what travels with the checkout to a GPU node that has no network access: the wheels listed
# in scripts/gpu-node-wheels.txt, built for CPython 3.12 on manylinux x86_64, and a wheel of ccdiag
# itself built from this tree, into gpu-node/wheels/ (git-ignored), plus gpu-node/PREPARED.json (the
# commit, the date, every file with its size and sha256). Run it on a machine that reaches the package
# index, then carry gpu-node/ with the checkout; scripts/gpu-evidence.sh installs from it with
# pip --no-index --no-deps.
#
#   scripts/gpu-node-wheels.sh [--python-version 3.12] [--out gpu-node]
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
PYVER=3.12
OUT="$REPO/gpu-node"
PY=${PYTHON:-python3}
while [ $# -gt 0 ]; do
    case "$1" in
        --python-version) PYVER=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
        *) echo "gpu-node-wheels.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
ABI="cp${PYVER/./}"
WHEELS="$OUT/wheels"
rm -rf "$WHEELS"
mkdir -p "$WHEELS"
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
    --abi "$ABI" --abi abi3 --abi none --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 --platform any -d "$WHEELS" -r "$REPO/scripts/gpu-node-wheels.txt"
"$PY" -m pip wheel --quiet --no-deps -w "$WHEELS" "$REPO"
"$PY" - "$REPO" "$OUT" "$PYVER" <<'PYEOF'
import hashlib, json, pathlib, subprocess, sys, time
repo, out, pyver = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
def git(*a):
    p = subprocess.run(["git", "-C", str(repo), *a], capture_output=True, text=True)
    return p.stdout.strip() if p.returncode == 0 else None
files = [{"file": p.name, "bytes": p.stat().st_size, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
         for p in sorted((out / "wheels").glob("*.whl"))]
doc = {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "python_version": pyver, "files": files,
       "total_bytes": sum(f["bytes"] for f in files)}
(out / "PREPARED.json").write_text(json.dumps(doc, indent=2) + "\n")
print(f"{len(files)} wheels, {doc['total_bytes'] / 2**20:.1f} MiB in {out / 'wheels'} (commit {doc['commit']}"
      f"{', with uncommitted changes' if doc['dirty'] else ''})")
PYEOF
