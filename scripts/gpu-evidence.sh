#!/usr/bin/env bash
# The evidence of a real GPU node in one command, without network access, in about six minutes.
#
#   scripts/gpu-evidence.sh --out DIR [--budget-s 360] [--python python3] [--wheels gpu-node/wheels]
#   scripts/gpu-evidence.sh --dry-run --out DIR --replay SNAPSHOT [--env VENV] [--smi-xml FILE]
#   scripts/gpu-evidence.sh --unpack DIR         # back at the checkout: DIR -> tests/fixtures/real, bench/results
#
# Run from a copy of the checkout on the node (one H100 or H200 is what it is sized for), after
# scripts/gpu-node-wheels.sh prepared gpu-node/ on a machine that reaches the package index. Stage 1
# (here): a throwaway virtual environment that sees the node's own CuPy, NVML and PyTorch
# (--system-site-packages), ccdiag and what the node lacks installed into it from the carried wheels
# (pip --no-index --no-deps), the worker started from the checkout as a check, and the CuPy names the
# engine uses checked against the node's CuPy; then bench/gpu_evidence.py records the node, the copy
# engines beside two independent measures, and hbm/gemm (see its docstring). Only --out comes back:
# at most eight files, none in a subfolder, each stage's tarball written as the stage ends.
#
# --dry-run does every step on a machine without a GPU, up to the first call that needs one: the
# environment and install for real (or --env, an existing environment with ccdiag installed),
# ccdiag against the snapshot given with --replay, the engine path through the CuPy test double.
# Exit: 0 done, 2 bad arguments, 3 no GPU read (the stages that need one did not run).
set -uo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=""
BUDGET_S=360
PY=python3
WHEELS="$REPO/gpu-node/wheels"
DRY=0
ENV_DIR=""
REPLAY=""
SMI_XML=""
UNPACK=""
KEEP=0
#: seconds of the budget stage 1 keeps for itself; the rest goes to bench/gpu_evidence.py
INSTALL_S=45

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "gpu-evidence.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --out) OUT=${2:-}; shift 2 ;;
        --budget-s) BUDGET_S=${2:-}; shift 2 ;;
        --python) PY=${2:-}; shift 2 ;;
        --wheels) WHEELS=${2:-}; shift 2 ;;
        --dry-run) DRY=1; shift ;;
        --env) ENV_DIR=${2:-}; shift 2 ;;
        --replay) REPLAY=${2:-}; shift 2 ;;
        --smi-xml) SMI_XML=${2:-}; shift 2 ;;
        --unpack) UNPACK=${2:-}; shift 2 ;;
        --keep-work) KEEP=1; shift ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done

if [ -n "$UNPACK" ]; then
    [ -d "$UNPACK" ] || die "--unpack $UNPACK: not a folder"
    exec "${PYTHON:-python3}" "$REPO/bench/gpu_evidence.py" unpack "$UNPACK" --repo "$REPO"
fi
[ -n "$OUT" ] || die "--out DIR is required (the folder that comes back from the node)"
case "$BUDGET_S" in ''|*[!0-9]*) die "--budget-s $BUDGET_S: a whole number of seconds" ;; esac
[ "$BUDGET_S" -ge 120 ] || die "--budget-s $BUDGET_S: at least 120 seconds"
if [ "$DRY" = 1 ] && [ -z "$REPLAY" ]; then die "--dry-run needs --replay SNAPSHOT (a recorded node to stand for this one)"; fi
command -v "$PY" >/dev/null 2>&1 || [ -x "$PY" ] || die "--python $PY: not found"

mkdir -p "$OUT" || die "--out $OUT: cannot create it"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ccdiag-evidence.XXXXXX")
S1="$WORK/install"
mkdir -p "$S1"
T0=$(date +%s)
say() { local line; line="[$(( $(date +%s) - T0 ))s] $*"; echo "$line" >&2; echo "$line" >> "$OUT/progress.log"; }
cleanup() { [ "$KEEP" = 1 ] && say "work folder kept: $WORK" || rm -rf "$WORK"; }
trap cleanup EXIT
pack_s1() { tar -czf "$OUT/s1-install.tar.gz.part" -C "$S1" . && mv "$OUT/s1-install.tar.gz.part" "$OUT/s1-install.tar.gz"; }
# run CMD... with at most $1 seconds, its output into $S1/$2
step() {
    local limit=$1 log=$2; shift 2
    say "\$ $*"
    timeout --kill-after=5 "$limit" "$@" > "$S1/$log" 2>&1
    local rc=$?
    say "  -> rc $rc ($log)"
    echo "$rc" > "$S1/$log.rc"
    return $rc
}

say "ccdiag GPU evidence: out $OUT, budget ${BUDGET_S}s$([ "$DRY" = 1 ] && echo ' (DRY RUN: no GPU is used)')"
{
    echo "dry_run=$DRY"; echo "repo=$REPO"; echo "python=$PY"; echo "wheels=$WHEELS"; date -u +%Y-%m-%dT%H:%M:%SZ
    uname -srvmo
} > "$S1/run.txt"

# -- stage 1: the environment ----------------------------------------------------------------------
if [ -n "$ENV_DIR" ]; then
    VENV=$(cd "$ENV_DIR" && pwd)
    say "using the environment $VENV as it is (--env): nothing installed"
    echo "--env $VENV: nothing installed" > "$S1/install.txt"
else
    VENV="$WORK/venv"
    step 60 venv.log "$PY" -m venv --system-site-packages "$VENV" || { pack_s1; die "cannot create a virtual environment with $PY (python3-venv missing?)"; }
    if [ -d "$WHEELS" ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
        cp "$WHEELS"/../PREPARED.json "$S1/" 2>/dev/null
        ls -l "$WHEELS" > "$S1/wheels.txt"
        step 30 wheel-matches-tree.log "$PY" "$REPO/bench/gpu_evidence.py" check-wheel "$WHEELS" --repo "$REPO" \
            || say "WARNING: the carried ccdiag wheel is not this tree (see wheel-matches-tree.log); it is installed anyway"
        step 120 pip-install.log "$VENV/bin/python" -m pip install --no-index --no-deps --ignore-installed --disable-pip-version-check \
            "$WHEELS"/*.whl || { pack_s1; die "pip could not install the carried wheels (see s1-install.tar.gz)"; }
    else
        say "no wheels at $WHEELS (run scripts/gpu-node-wheels.sh where the package index is reachable): building ccdiag from the tree"
        step 120 pip-install.log "$VENV/bin/python" -m pip install --no-index --no-deps --ignore-installed --no-build-isolation \
            --disable-pip-version-check "$REPO" || { pack_s1; die "pip could not build ccdiag from $REPO without the index (setuptools and wheel must be installed); run scripts/gpu-node-wheels.sh"; }
    fi
fi
step 30 pip-list.log "$VENV/bin/python" -m pip list --disable-pip-version-check
step 30 pip-check.log "$VENV/bin/python" -m pip check --disable-pip-version-check
# the regular install must not be shadowed by the checkout: both run from the checkout's root
(cd "$REPO" && step 30 ccdiag-version.log "$VENV/bin/ccdiag" --version)
(cd "$REPO" && step 90 worker-from-checkout.log "$VENV/bin/python" "$REPO/bench/gpu_evidence.py" worker-check) \
    || say "WARNING: the CuPy worker started from the checkout did not start cleanly (see worker-from-checkout.log)"
step 30 cupy-found.log "$VENV/bin/python" -c \
    'from ccdiag.bench.cupy_dist import describe, installed; print(describe(installed()))'
if [ -x "$VENV/bin/pytest" ]; then
    # the entry script, never `python -m pytest`: that would put the checkout first on the path
    (cd "$REPO" && step 60 engine-libraries.log "$VENV/bin/pytest" -q -p no:cacheprovider --rootdir "$REPO" \
        -o addopts="" tests/test_engine_libraries.py -k cupy)
else
    say "pytest was not installed into the environment: the CuPy names are not checked against the node's CuPy"
fi
pack_s1
USED=$(( $(date +%s) - T0 ))
LEFT=$(( BUDGET_S - USED ))
[ "$LEFT" -ge 60 ] || LEFT=60
say "stage install done in ${USED}s; ${LEFT}s left for the node, the copies and hbm/gemm"

# -- stages 2-4 ------------------------------------------------------------------------------------
ARGS=(run --out "$OUT" --work "$WORK/stages" --repo "$REPO" --budget-s "$LEFT")
[ "$DRY" = 1 ] && ARGS+=(--dry-run --replay "$(cd "$(dirname "$REPLAY")" && pwd)/$(basename "$REPLAY")")
[ -n "$SMI_XML" ] && ARGS+=(--smi-xml "$SMI_XML")
# from the work folder, never the checkout: the interpreter must import the installed ccdiag
cd "$WORK" && "$VENV/bin/python" "$REPO/bench/gpu_evidence.py" "${ARGS[@]}"
RC=$?
say "finished with exit $RC in $(( $(date +%s) - T0 ))s: $(ls "$OUT" | tr '\n' ' ')"
exit $RC
