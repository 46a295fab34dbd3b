#!/bin/bash
# Slurm Prolog: refuse to start a job on a node that `ccdiag check` finds broken.
#
# A prolog that exits non-zero makes Slurm drain the node (reason "Prolog error") and requeue the
# job, so this script only has to say why: the verdict and one line per failure go to stderr (the
# slurmd log) and to syslog. Only a failure (ccdiag exit 1) stops the job. No verdict (exit 3: a
# probe timed out) or a ccdiag problem (exit 2, 4) lets the job run and is logged, because a wrong
# policy file must not drain a whole partition; set CCDIAG_PROLOG_FAIL_ON_UNKNOWN=1 to stop on 3 too.
#
# Runs for every job, so it is kept short: --window 0 by default (error-counter rates are the
# health check's business) and a 40 s deadline, inside Slurm's PrologEpilogTimeout.
# Environment: as ccdiag-healthcheck.sh (CCDIAG, CCDIAG_ARGS, CCDIAG_TIMEOUT, CCDIAG_DEFAULTS).

set -u
PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin${PATH:+:$PATH}"
export PATH

defaults="${CCDIAG_DEFAULTS:-/etc/default/ccdiag}"
# shellcheck disable=SC1090
[ -r "$defaults" ] && . "$defaults"

CCDIAG="${CCDIAG:-ccdiag}"
NODE="${SLURMD_NODENAME:-$(hostname -s)}"
TAG="ccdiag-prolog"

log() {
    echo "$TAG: node $NODE job ${SLURM_JOB_ID:-?}: $*" >&2
    command -v logger >/dev/null 2>&1 && logger -t "$TAG" -- "node $NODE job ${SLURM_JOB_ID:-?}: $*" 2>/dev/null
    return 0
}

read -r -a extra <<<"${CCDIAG_ARGS:-}"
out="$("$CCDIAG" check --quiet --window 0 --timeout "${CCDIAG_TIMEOUT:-40}" "${extra[@]}" 2>&1)"
rc=$?

case "$rc" in
0) exit 0 ;;
1)
    while IFS= read -r line; do log "$line"; done <<<"$out"
    log "node failed ccdiag check; refusing the job (Slurm drains the node)"
    exit 1
    ;;
3)
    while IFS= read -r line; do log "$line"; done <<<"$out"
    if [ "${CCDIAG_PROLOG_FAIL_ON_UNKNOWN:-0}" = 1 ]; then
        log "no verdict; refusing the job (CCDIAG_PROLOG_FAIL_ON_UNKNOWN=1)"
        exit 1
    fi
    log "no verdict; job allowed"
    exit 0
    ;;
*)
    while IFS= read -r line; do log "$line"; done <<<"$out"
    log "ccdiag exited $rc (bad arguments or a ccdiag bug); job allowed"
    exit 0
    ;;
esac
