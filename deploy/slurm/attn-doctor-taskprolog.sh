#!/bin/sh
# attn-doctor as a SLURM TaskProlog (slurm.conf: TaskProlog=/etc/slurm/attn-doctor-taskprolog.sh).
#
# Runs as the job's user, with the job's environment (inside the job's container, if any), before
# each task. It checks the job's own Python stack and writes each affected finding to the task's
# standard output: slurmstepd copies a TaskProlog's `print ...` lines there (and reads `export` and
# `unset` lines as environment changes, so every line this script writes starts with `print `).
# It never stops a task: the exit status is always 0 (a failing TaskProlog cancels the task, and
# slurm.conf(5) says a TaskProlog "should not be used for policy enforcement"). Draining a node
# is the Prolog's (attn-doctor-prolog.sh). Details: docs/fleet.md.
#
# Which attn-doctor and which stack:
#   ATTN_DOCTOR           the program (default: attn-doctor on the job's PATH, then
#                         /opt/attn-doctor/bin/attn-doctor)
#   ATTN_DOCTOR_STACK     the venv or site-packages folder to check (`check --path`); default: the
#                         job's venv ($VIRTUAL_ENV), else the site-packages of the job's python3,
#                         else (no python3) the environment attn-doctor runs in
#   ATTN_DOCTOR_ENV_FILE  check these facts (`attn-doctor probe --json`) instead
#   ATTN_DOCTOR_ARGS      more options for `check`, split at spaces (`--feature flash_attention_2`)
#   ATTN_DOCTOR_TASKS     `first` (default): only the first task on each node (SLURM_LOCALID 0)
#                         prints; `all`: every task
#   ATTN_DOCTOR_TIMEOUT   seconds before the check is abandoned (default 30)

if [ "${ATTN_DOCTOR_TASKS:-first}" != all ] && [ "${SLURM_LOCALID:-0}" != 0 ]; then
    exit 0
fi

say() {
    printf 'print attn-doctor: %s\n' "$*"
}

if [ -n "${ATTN_DOCTOR:-}" ]; then
    doctor=$ATTN_DOCTOR
elif ! doctor=$(command -v attn-doctor 2>/dev/null); then
    doctor=/opt/attn-doctor/bin/attn-doctor
fi
if [ ! -x "$doctor" ]; then
    say "not checked: $doctor is not an executable"
    exit 0
fi
python=$(dirname "$doctor")/python3
if [ ! -x "$python" ]; then
    python=python3
fi

set -- check --no-scan --format json
if [ -n "${ATTN_DOCTOR_ENV_FILE:-}" ]; then
    set -- "$@" --env-file "$ATTN_DOCTOR_ENV_FILE"
    what=$ATTN_DOCTOR_ENV_FILE
elif [ -n "${ATTN_DOCTOR_STACK:-}" ]; then
    set -- "$@" --path "$ATTN_DOCTOR_STACK"
    what=$ATTN_DOCTOR_STACK
elif [ -n "${VIRTUAL_ENV:-}" ]; then
    set -- "$@" --path "$VIRTUAL_ENV"
    what=$VIRTUAL_ENV
elif stack=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null); then
    set -- "$@" --path "$stack"
    what=$stack
else
    what="the environment of $doctor"
fi
# shellcheck disable=SC2086 # ATTN_DOCTOR_ARGS is a list of options, split at spaces on purpose
set -- "$@" ${ATTN_DOCTOR_ARGS:-}
if command -v timeout >/dev/null 2>&1; then
    set -- timeout "${ATTN_DOCTOR_TIMEOUT:-30}" "$doctor" "$@"
else
    set -- "$doctor" "$@"
fi

report=$(mktemp) || exit 0
errors=$(mktemp) || { rm -f "$report"; exit 0; }
trap 'rm -f "$report" "$errors"' EXIT

"$@" >"$report" 2>"$errors"
status=$?
case $status in
    0 | 1) ;;
    124) say "not checked: attn-doctor check took over ${ATTN_DOCTOR_TIMEOUT:-30}s"; exit 0 ;;
    *) say "not checked (exit $status): $(head -n 1 "$errors")"; exit 0 ;;
esac

# Each affected finding (at any severity, ignored ones left out) on one line, then its fix.
WHAT=$what "$python" -c '
import json, os, sys
report = json.load(open(sys.argv[1], encoding="utf-8"))
affected = [f for f in report["findings"] if f["verdict"] == "affected" and not f["ignored"]]
def say(text, indent=""):
    print("print attn-doctor: " + indent + " ".join(text.split()))
if affected:
    say("%d known problem(s) in %s:" % (len(affected), os.environ["WHAT"]))
for finding in affected:
    found = [r["text"] for r in finding["reasons"] if r["holds"] and r["condition"] == "release"]
    say("%s [%s]: %s" % (finding["id"], finding["severity"], finding["title"]))
    if found:
        say("found: " + "; ".join(found), "  ")
    say("fix: " + finding["fix"]["summary"], "  ")
if affected:
    say("more: attn-doctor rules show ID")
' "$report" 2>"$errors" || say "not checked: could not read attn-doctor's report: $(tail -n 1 "$errors")"
exit 0
