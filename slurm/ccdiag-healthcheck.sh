#!/bin/bash
# Slurm HealthCheckProgram: drain this node when `ccdiag check` fails, resume it when a later check
# passes and the drain was ccdiag's own.
#
# slurmd runs this with an empty environment, as root, every HealthCheckInterval seconds, and kills
# it after 60 s; so PATH is set here, ccdiag gets a 40 s deadline, and SLURM_CONF / CCDIAG_ARGS can
# come from the environment or from ${CCDIAG_DEFAULTS:-/etc/default/ccdiag} (sourced when readable).
#
# Its drains carry the reason prefix "ccdiag-hc:", and it resumes only those: a node the prolog or
# epilog drained ("ccdiag-prolog:", "ccdiag-epilog:") saw a failure before or after a job that this
# check may not see (the prolog loads the links, the health check does not), so an administrator
# resumes it, never the next passing health check. So does a drain with the older shared "ccdiag:".
#
#   ccdiag exit 0  node fine: resume it if it is drained with a "ccdiag-hc:" reason (never another one)
#   ccdiag exit 1  failure: drain it, reason "ccdiag-hc: <action> <first failure id> <component>"
#                  (<= 60 chars), unless someone else (an administrator, the prolog) already drained
#                  it (their reason is kept)
#   ccdiag exit 3  no verdict (probe timed out, deadline): leave the node as it is, log why
#   other          ccdiag misconfigured or broken: leave the node as it is, log why
#
# Environment: CCDIAG (the ccdiag command), CCDIAG_ARGS (extra `ccdiag check` arguments, split on
# blanks), CCDIAG_TIMEOUT (default 40), CCDIAG_NODENAME (default $SLURMD_NODENAME or hostname -s),
# CCDIAG_LOG (a file to append one line per run to), CCDIAG_PYTHON (to read the JSON report),
# SLURM_CONF (passed on to scontrol/sinfo when the configuration is not in /etc/slurm),
# CCDIAG_REPORT_ONLY=1 (roll-out: log "report only: would drain ..." / "would resume ...", never
# drain or resume, exit 0; what NHC's MARK_OFFLINE=0 does), CCDIAG_HEALTH_ARGS (more `ccdiag health
# act` arguments: --config FILE, --state-dir DIR), CCDIAG_HOOK_TIMEOUT (seconds the operator's
# remediation command may take here, default 10: the whole script has 60).

set -u
PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin${PATH:+:$PATH}"
export PATH

defaults="${CCDIAG_DEFAULTS:-/etc/default/ccdiag}"
# shellcheck disable=SC1090
[ -r "$defaults" ] && . "$defaults"
[ -n "${SLURM_CONF:-}" ] && export SLURM_CONF

CCDIAG="${CCDIAG:-ccdiag}"
PYTHON="${CCDIAG_PYTHON:-python3}"
NODE="${CCDIAG_NODENAME:-${SLURMD_NODENAME:-$(hostname -s)}}"
TAG="ccdiag-healthcheck"
REPORT_ONLY="${CCDIAG_REPORT_ONLY:-0}"
# the reason prefix of this script's drains; the only drains it resumes
OWN="ccdiag-hc:"

log() {
    local line="$TAG: node $NODE: $*"
    echo "$line" >&2
    command -v logger >/dev/null 2>&1 && logger -t "$TAG" -- "$line" 2>/dev/null
    if [ -n "${CCDIAG_LOG:-}" ]; then
        echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) $line" >>"$CCDIAG_LOG" 2>/dev/null
    fi
    return 0
}

# The drain reason ccdiag computed (report verdict.reason): "ccdiag: <action> <check id> <component name>":
# the node's action (none, restart_job, drain, reset_gpu, reboot, service; ccdiag/core/actions.py), then
# the first root-cause failure (one that does not follow from another: a lost GPU, not the GPU
# count it lowers), "(+N)" other root failures, at most 60 chars.
reason_from_report() {
    "$PYTHON" -c '
import json, sys
try:
    text = json.load(open(sys.argv[1]))["verdict"]["reason"] or "ccdiag: check failed"
except Exception:
    text = "ccdiag: check failed"
print(" ".join(text.replace("\"", "").split())[:60])
' "$1" 2>/dev/null || echo "ccdiag: check failed"
}

# ccdiag's reason under this script's own prefix ("ccdiag: X" -> "ccdiag-hc: X"), at most 60 chars
own_reason() {
    local r="${1#ccdiag:}"
    r="$OWN ${r# }"
    printf '%s\n' "${r:0:60}"
}

# "<verb>|<text>" from `ccdiag health act` (ccdiag/health/act.py): the escalation ladder's rung for
# the root cause (a root that fails again after its rung's step climbs: drain, reset_gpu, reboot,
# service) and the drain cap (never more than a share of the fleet out for ccdiag's reasons; above
# it "hold": report, leave the node in service). It also runs the operator's remediation command for
# the rung once the node is drained and idle (/etc/ccdiag/health.toml [remediation]), and records a
# pass (the ladder's roots are cleared). Only where the health loop is set up: CCDIAG_HEALTH_ARGS
# (`ccdiag health act` arguments such as --config FILE --state-dir DIR, split on blanks) or a
# readable ${CCDIAG_HEALTH_CONFIG:-/etc/ccdiag/health.toml}. Empty otherwise, or when it cannot
# answer: the script then drains as before, with the report's own reason.
decide() {
    local health_args only=() config="${CCDIAG_HEALTH_CONFIG:-/etc/ccdiag/health.toml}"
    read -r -a health_args <<<"${CCDIAG_HEALTH_ARGS:-}"
    if [ "${#health_args[@]}" = 0 ]; then
        [ -r "$config" ] || return 0  # the health loop is not set up here: the ladder and cap do not apply
        health_args=(--config "$config")
    fi
    [ "$REPORT_ONLY" = 1 ] && only=(--report-only)
    local said line
    said="$("$CCDIAG" health act --report "$report" --prefix "$OWN" --node "$NODE" --node-state "$current_state" \
        --node-reason "$current_reason" --hook-timeout "${CCDIAG_HOOK_TIMEOUT:-10}" "${only[@]}" \
        "${health_args[@]}" 2>"$report.act" | tail -n 1)"
    # every step it took or decided (a remediation command and its outcome) goes to the log
    while IFS= read -r line; do [ -n "$line" ] && log "$line"; done <"$report.act"
    echo "$said"
}

# The exit status, except in report-only mode, where nothing may react to it: always 0.
finish() {
    [ "$REPORT_ONLY" = 1 ] && exit 0
    exit "$1"
}

# "<state>|<reason>" of this node as sinfo reports it (state lower case: idle, drained, draining ...)
node_state() {
    sinfo -h -N -n "$NODE" -o "%T|%E" 2>/dev/null | head -n 1
}

report="$(mktemp "${TMPDIR:-/tmp}/ccdiag-hc.XXXXXX")" || { log "cannot create a temporary file"; exit 0; }
errors="$report.err"
trap 'rm -f "$report" "$errors" "$report.act"' EXIT

# ccdiag not on this PATH (slurmd gives the script no environment): say so plainly and leave the
# node as it is configured; a missing command is an installation problem, not a broken node.
if ! command -v "$CCDIAG" >/dev/null 2>&1; then
    log "ccdiag not found: set CCDIAG (in ${defaults}) to the ccdiag command, e.g. CCDIAG=/opt/ccdiag/bin/ccdiag; node left as it is"
    exit 0
fi
read -r -a extra <<<"${CCDIAG_ARGS:-}"
# --no-load-links: the health check also runs while jobs do; the prolog (an idle node) loads them
"$CCDIAG" check --json --no-load-links --timeout "${CCDIAG_TIMEOUT:-40}" "${extra[@]}" >"$report" 2>"$errors"
rc=$?

state="$(node_state)"
current_state="${state%%|*}"
current_reason="${state#*|}"

case "$rc" in
0)
    decide >/dev/null  # the ladder learns the node passed
    case "$current_state" in
    *drain*)
        case "$current_reason" in
        "$OWN"*)
            if [ "$REPORT_ONLY" = 1 ]; then
                log "report only: check passed; would resume (drained: $current_reason)"
            elif scontrol update nodename="$NODE" state=resume; then
                log "check passed; resumed (was drained: $current_reason)"
            else
                log "check passed but scontrol resume failed"
            fi
            ;;
        *) log "check passed; left drained by someone else (reason: $current_reason); an administrator resumes it" ;;
        esac
        ;;
    *) log "check passed" ;;
    esac
    ;;
1)
    decision="$(decide)"
    case "${decision%%|*}" in
    drain) reason="${decision#*|}" ;;
    hold)
        log "check failed; left in service: ${decision#*|}"
        finish 1
        ;;
    keep)
        log "check failed; ${decision#*|}"
        finish 1
        ;;
    *)
        reason="$(own_reason "$(reason_from_report "$report")")"
        [ -z "$decision" ] || log "ccdiag health act gave no usable decision ($decision); drain cap and ladder not applied"
        ;;
    esac
    case "$current_state" in
    *drain*)
        case "$current_reason" in
        "$OWN"*) ;;  # ours: refresh the reason below
        *)
            log "check failed ($reason); already drained by someone else (reason: $current_reason), left as is"
            finish 1
            ;;
        esac
        ;;
    esac
    if [ "$REPORT_ONLY" = 1 ]; then
        log "report only: check failed; would drain: $reason"
    elif scontrol update nodename="$NODE" state=drain reason="$reason"; then
        log "check failed; drained: $reason"
    else
        log "check failed ($reason) but scontrol drain failed"
    fi
    ;;
3)
    log "no verdict (exit 3: a probe timed out or the deadline was reached); node left as is: $(head -c 300 "$errors" | tr '\n' ' ')"
    ;;
*)
    log "ccdiag exited $rc (bad arguments or a ccdiag bug); node left as is: $(head -c 300 "$errors" | tr '\n' ' ')"
    ;;
esac
finish "$rc"
