#!/usr/bin/env bash
# Type-check ccdiag with mypy as it is installed: probes/ and exporters/ live at the top of the tree
# but are the packages ccdiag.probes and ccdiag.exporters. An editable install maps them with an
# import hook that mypy cannot follow ("Can't find package ccdiag.probes"), so this lays the
# installed shape out as links under build/typecheck (ignored by git; new files appear through the
# directory links; TYPECHECK_TREE names another folder, as CI's run does) and runs mypy there with the
# project's configuration.
#
#   bash scripts/typecheck.sh                 # the whole package (ccdiag, ccdiag.probes, ccdiag.exporters),
#                                             # which CI holds to no errors
#   bash scripts/typecheck.sh -p ccdiag.checks  # one room
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TREE=${TYPECHECK_TREE:-build/typecheck}
rm -rf "$TREE"
mkdir -p "$TREE/ccdiag"
for entry in ccdiag/*; do
    ln -s "$ROOT/$entry" "$TREE/ccdiag/"
done
ln -s "$ROOT/probes" "$TREE/ccdiag/probes"
ln -s "$ROOT/exporters" "$TREE/ccdiag/exporters"
MYPY=${MYPY:-mypy}
if [ $# -eq 0 ]; then
    set -- -p ccdiag
fi
cd "$TREE"
exec $MYPY --config-file "$ROOT/pyproject.toml" --cache-dir "$PWD/.mypy_cache" "$@"
