#!/bin/bash
# Slurm Prolog (and, as ccdiag-epilog.sh, Epilog): refuse to start a job on a node that
# `ccdiag check` finds broken, or after a job, drain a node the job left broken.
#
# A prolog or epilog that exits non-zero makes Slurm drain the node with its generic reason
# ("Prolog error") and requeue the job, so before exiting the script drains the node itself with
# ccdiag's reason under its own prefix (action, root failure: "ccdiag-prolog: reboot xid.recent GPU6
# (+7)"; "ccdiag-epilog:" from the epilog), which slurmctld is
# meant to keep for a node already draining (checked against a stand-in scontrol, not yet against a
# running Slurm's prolog path). The verdict and one line per failure
# go to stderr (the slurmd log) and to syslog. Only a failure (ccdiag exit 1) stops the job. No verdict (exit 3: a
# probe timed out) or a ccdiag problem (exit 2, 4) lets the job run and is logged, because a wrong
# policy file must not drain a whole partition; set CCDIAG_PROLOG_FAIL_ON_UNKNOWN=1 to stop on 3 too.
#
# The prefix keeps its drains apart from the health check's ("ccdiag-hc:"): the health check
# resumes only its own, so a node this script drained stays drained until an administrator resumes
# it (`scontrol update nodename=NODE state=resume`).
#
# Runs for every job, so it is kept short: --window 0 by default (error-counter rates are the
# health check's business) and a 40 s deadline, inside Slurm's PrologEpilogTimeout.
# Environment: as ccdiag-healthcheck.sh (CCDIAG, CCDIAG_ARGS, CCDIAG_TIMEOUT, CCDIAG_DEFAULTS,
# CCDIAG_PYTHON, CCDIAG_HEALTH_ARGS, CCDIAG_REPORT_ONLY=1: log "report only: would drain ... and refuse
# the job", never drain, always exit 0 so the job runs), and SCONTROL (default: scontrol from PATH).
#
# With the health loop (ccdiag health run, docs/health.md) on the node: the prolog first tells a
# check it is running to stop (the job never waits for it), and CCDIAG_REUSE_PASS=<state file>
# (/var/lib/ccdiag/health.json) lets the prolog's check lean on the loop's last pass while it holds
# (`check --reuse-pass`). The drain cap holds here too: above it the failure is logged and the job
# runs (`ccdiag health act` says "hold"), rather than one more node going out.

set -u
PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin${PATH:+:$PATH}"
export PATH

defaults="${CCDIAG_DEFAULTS:-/etc/default/ccdiag}"
# shellcheck disable=SC1090
[ -r "$defaults" ] && . "$defaults"

CCDIAG="${CCDIAG:-ccdiag}"
PYTHON="${CCDIAG_PYTHON:-python3}"
SCONTROL="${SCONTROL:-scontrol}"
NODE="${SLURMD_NODENAME:-$(hostname -s)}"
STAGE="${CCDIAG_STAGE:-prolog}"  # "epilog" when run as ccdiag-epilog.sh
TAG="ccdiag-$STAGE"
REPORT_ONLY="${CCDIAG_REPORT_ONLY:-0}"
OWN="ccdiag-$STAGE:"  # the reason prefix of this script's drains

log() {
    echo "$TAG: node $NODE job ${SLURM_JOB_ID:-?}: $*" >&2
    command -v logger >/dev/null 2>&1 && logger -t "$TAG" -- "node $NODE job ${SLURM_JOB_ID:-?}: $*" 2>/dev/null
    return 0
}

# A check of the health loop running on this node yields to the job now: its turn's pid is in the
# state directory, and it stops its check at SIGUSR1 (ccdiag/health/runner.py). Only a process whose
# command line names ccdiag's health loop is signalled.
yield_health_loop() {
    local pidfile="${CCDIAG_HEALTH_PIDFILE:-/var/lib/ccdiag/health.pid}" pid
    [ -r "$pidfile" ] || return 0
    pid="$(head -c 20 "$pidfile" | tr -dc 0-9)"
    [ -n "$pid" ] || return 0
    if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'ccdiag.*health'; then
        kill -USR1 "$pid" 2>/dev/null && log "told the health loop's check (pid $pid) to yield to this job"
    fi
    return 0
}

# "<verb>|<text>" from `ccdiag health act`: the drain cap ("hold": above it, the job runs and the
# failure is reported) and the escalation ladder's rung in the reason; only where the health loop is
# set up (as in ccdiag-healthcheck.sh), empty otherwise or when it cannot answer (the report's own
# reason then applies, as before).
decide() {
    [ "$report" != /dev/null ] || return 0
    local health_args only=() config="${CCDIAG_HEALTH_CONFIG:-/etc/ccdiag/health.toml}"
    read -r -a health_args <<<"${CCDIAG_HEALTH_ARGS:-}"
    if [ "${#health_args[@]}" = 0 ]; then
        [ -r "$config" ] || return 0  # the health loop is not set up here: the ladder and cap do not apply
        health_args=(--config "$config")
    fi
    [ "$REPORT_ONLY" = 1 ] && only=(--report-only)
    local said line
    said="$("$CCDIAG" health act --report "$report" --prefix "$OWN" --node "$NODE" --node-state allocated \
        --hook-timeout 5 "${only[@]}" "${health_args[@]}" 2>"$report.act" | tail -n 1)"
    while IFS= read -r line; do [ -n "$line" ] && log "$line"; done <"$report.act"
    echo "$said"
}

# Drain with ccdiag's own reason ($1, or verdict.reason of the JSON report), if scontrol is there.
drain_with_reason() {
    local reason="${1:-}"
    if [ -z "$reason" ]; then
        reason="$("$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["verdict"]["reason"] or "")' \
                  "$report" 2>/dev/null)"
        reason="${reason:-ccdiag: check failed}"
        # under this script's own prefix ("ccdiag: X" -> "ccdiag-prolog: X"), at most 60 chars
        reason="${reason#ccdiag:}"
        reason="$OWN ${reason# }"
        reason="${reason:0:60}"
    fi
    if [ "$REPORT_ONLY" = 1 ]; then
        log "report only: would drain: $reason"
    elif command -v "$SCONTROL" >/dev/null 2>&1 && \
            "$SCONTROL" update nodename="$NODE" state=drain reason="$reason" >/dev/null 2>&1; then
        log "drained: $reason"
    else
        log "could not drain with reason \"$reason\" (scontrol failed); Slurm's own reason applies"
    fi
}

report="$(mktemp "${TMPDIR:-/tmp}/ccdiag-$STAGE.XXXXXX")" || report=/dev/null
trap 'rm -f "$report" "$report.act"' EXIT
# ccdiag not on this PATH (slurmd gives the script no environment): say so plainly and leave the
# node as it is configured; a missing command is an installation problem, not a broken node.
if ! command -v "$CCDIAG" >/dev/null 2>&1; then
    log "ccdiag not found: set CCDIAG (in ${defaults}) to the ccdiag command, e.g. CCDIAG=/opt/ccdiag/bin/ccdiag; node left as it is, job allowed"
    exit 0
fi
read -r -a extra <<<"${CCDIAG_ARGS:-}"
if [ "$STAGE" = prolog ]; then
    yield_health_loop
    [ -n "${CCDIAG_REUSE_PASS:-}" ] && extra+=(--reuse-pass "$CCDIAG_REUSE_PASS")
fi
out="$("$CCDIAG" check --quiet --window 0 --timeout "${CCDIAG_TIMEOUT:-40}" --output "$report" "${extra[@]}" 2>&1)"
rc=$?

case "$rc" in
0) exit 0 ;;
1)
    while IFS= read -r line; do log "$line"; done <<<"$out"
    decision="$(decide)"
    if [ "${decision%%|*}" = hold ]; then
        log "node failed ccdiag check; left in service and the job allowed: ${decision#*|}"
        exit 0
    fi
    if [ "${decision%%|*}" = drain ]; then
        drain_with_reason "${decision#*|}"
    else
        drain_with_reason
    fi
    if [ "$REPORT_ONLY" = 1 ]; then
        [ "$STAGE" = epilog ] || log "report only: would refuse the job; job allowed"
        exit 0
    fi
    if [ "$STAGE" = epilog ]; then
        log "node failed ccdiag check after the job; drained"
    else
        log "node failed ccdiag check; refusing the job (Slurm requeues it)"
    fi
    exit 1
    ;;
3)
    while IFS= read -r line; do log "$line"; done <<<"$out"
    if [ "${CCDIAG_PROLOG_FAIL_ON_UNKNOWN:-0}" = 1 ] && [ "$REPORT_ONLY" = 1 ]; then
        log "report only: no verdict; would refuse the job (CCDIAG_PROLOG_FAIL_ON_UNKNOWN=1); job allowed"
        exit 0
    fi
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
