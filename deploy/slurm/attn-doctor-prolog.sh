#!/bin/sh
# attn-doctor as a SLURM Prolog (slurm.conf: Prolog=/etc/slurm/prolog.d/attn-doctor-prolog.sh).
#
# Runs as SlurmdUser (root) on each node before a job's first step there. It checks the site's
# stack (a venv or site-packages every job uses, ATTN_DOCTOR_STACK) against this node's GPUs and
# NVIDIA driver, and drains the node only for a node-level finding: the driver is too old for the
# stack's CUDA, or the stack's binaries have no code for this node's GPU (NODE_RULES below). The
# job's own Python stack is the TaskProlog's business (attn-doctor-taskprolog.sh), never a reason
# to drain. Details: docs/fleet.md.
#
# Exit status, as SLURM reads it (slurm.conf(5), Prolog):
#   0  nothing node-level, or attn-doctor could not decide (not installed, a bad input, an
#      internal error, a timeout): logged, the job runs; the tool's own failure never drains a node
#   1  a node-level finding: the node was drained first with
#      `scontrol update nodename=$SLURMD_NODENAME state=drain reason="attn-doctor: ..."`, so the
#      reason SLURM shows is ours (slurmctld keeps the reason of a node already draining); the
#      non-zero exit requeues the job off this node
#
# Settings (environment, or ATTN_DOCTOR_CONF, default /etc/slurm/attn-doctor.conf, a sh file of
# NAME=value lines; give absolute paths: the check runs from /):
#   ATTN_DOCTOR           the attn-doctor program (default /opt/attn-doctor/bin/attn-doctor)
#   ATTN_DOCTOR_PYTHON    a Python 3 to read its JSON (default: the python3 beside ATTN_DOCTOR)
#   ATTN_DOCTOR_STACK     the venv or site-packages folder to check (`check --path`); unset:
#                         attn-doctor's own environment
#   ATTN_DOCTOR_ENV_FILE  check these facts (`attn-doctor probe --json`) instead of this node
#   ATTN_DOCTOR_TIMEOUT   seconds before the check is abandoned (default 30; SLURM's
#                         PrologTimeout would drain the node with a reason of its own)
#   ATTN_DOCTOR_LOG       a file to append the log lines to (they also go to syslog via logger)
#   SCONTROL              the scontrol program (default: scontrol on PATH)
#   NODE_RULES            the rule ids that drain (default below)

# slurmd gives a Prolog no search path (the prolog_epilog guide): the usual folders, after any given
PATH=${PATH:+$PATH:}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH

conf=${ATTN_DOCTOR_CONF:-/etc/slurm/attn-doctor.conf}
if [ -r "$conf" ]; then
    # shellcheck source=/dev/null
    . "$conf"
fi

ATTN_DOCTOR=${ATTN_DOCTOR:-/opt/attn-doctor/bin/attn-doctor}
ATTN_DOCTOR_PYTHON=${ATTN_DOCTOR_PYTHON:-$(dirname "$ATTN_DOCTOR")/python3}
ATTN_DOCTOR_TIMEOUT=${ATTN_DOCTOR_TIMEOUT:-30}
SCONTROL=${SCONTROL:-scontrol}
node=${SLURMD_NODENAME:-$(hostname -s 2>/dev/null || hostname)}

# Node-level rules: decided by this node's NVIDIA driver, or by whether the stack's binaries carry
# code for this node's GPU. tests/test_deploy_slurm.py derives the list from the rules' [affects]
# and fails when a new rule of that kind is missing here.
NODE_RULES=${NODE_RULES:-"cuda-driver-too-old-for-torch
triton-bundled-ptxas-needs-cuda12-driver
torch-cuda-build-on-amd-gpu
torch-wheel-lacks-gpu-arch
gpu-blackwell-needs-cuda-12-8
flash-attn-wheel-lacks-gpu-arch
triton-bundled-ptxas-lacks-gpu-arch"}

log() {
    logger -t attn-doctor-prolog -- "$*" 2>/dev/null
    if [ -n "${ATTN_DOCTOR_LOG:-}" ]; then
        printf '%s attn-doctor-prolog: %s\n' "$(date '+%Y-%m-%dT%H:%M:%S')" "$*" >>"$ATTN_DOCTOR_LOG"
    fi
    printf 'attn-doctor-prolog: %s\n' "$*" >&2
}

if [ ! -x "$ATTN_DOCTOR" ]; then
    log "job ${SLURM_JOB_ID:-?} on $node: $ATTN_DOCTOR is not an executable: not checked"
    exit 0
fi
if [ ! -x "$ATTN_DOCTOR_PYTHON" ]; then
    ATTN_DOCTOR_PYTHON=python3
fi

set -- check --no-scan --format json
if [ -n "${ATTN_DOCTOR_ENV_FILE:-}" ]; then
    set -- "$@" --env-file "$ATTN_DOCTOR_ENV_FILE"
elif [ -n "${ATTN_DOCTOR_STACK:-}" ]; then
    set -- "$@" --path "$ATTN_DOCTOR_STACK"
fi
if command -v timeout >/dev/null 2>&1; then
    set -- timeout "$ATTN_DOCTOR_TIMEOUT" "$ATTN_DOCTOR" "$@"
else
    set -- "$ATTN_DOCTOR" "$@"
fi

cd / || exit 0  # no pyproject.toml of the folder slurmd runs in is read as configuration
report=$(mktemp) || exit 0
errors=$(mktemp) || { rm -f "$report"; exit 0; }
trap 'rm -f "$report" "$errors"' EXIT

"$@" >"$report" 2>"$errors"
status=$?
case $status in
    0 | 1) ;;
    124) log "job ${SLURM_JOB_ID:-?} on $node: attn-doctor check took over ${ATTN_DOCTOR_TIMEOUT}s: not checked"; exit 0 ;;
    *) log "job ${SLURM_JOB_ID:-?} on $node: attn-doctor check failed (exit $status): $(head -n 1 "$errors")"; exit 0 ;;
esac

# One line per failing, affected, node-level finding, in NODE_RULES' order: "id: what was found"
# (the reasons about the GPU, the driver and the builds; the title where there is none).
findings=$(NODE_RULES="$NODE_RULES" "$ATTN_DOCTOR_PYTHON" -c '
import json, os, sys
order = os.environ["NODE_RULES"].split()
node = {"release", "driver", "compute_capability", "gfx", "cuda", "rocm", "torch_build"}
report = json.load(open(sys.argv[1], encoding="utf-8"))
found = [f for f in report["findings"] if f["id"] in order and f["verdict"] == "affected" and f["failing"]]
for finding in sorted(found, key=lambda f: order.index(f["id"])):
    held = [r for r in finding["reasons"] if r["holds"]]
    text = [r["text"] for r in held if r["condition"] == "release"]
    text = text or [r["text"] for r in held if r["condition"] in node] or [finding["title"]]
    print(finding["id"] + ": " + " ".join("; ".join(text).split()))
' "$report" 2>"$errors")
status=$?
if [ $status -ne 0 ]; then
    log "job ${SLURM_JOB_ID:-?} on $node: could not read attn-doctor's report: $(tail -n 1 "$errors")"
    exit 0
fi
if [ -z "$findings" ]; then
    exit 0
fi

count=$(printf '%s\n' "$findings" | wc -l | tr -d ' ')
reason="attn-doctor: $(printf '%s\n' "$findings" | head -n 1)"
if [ "$count" -gt 1 ]; then
    reason="$reason (+$((count - 1)) more)"
fi
printf '%s\n' "$findings" | while IFS= read -r line; do
    log "job ${SLURM_JOB_ID:-?} on $node: $line"
done
if "$SCONTROL" update nodename="$node" state=drain reason="$reason"; then
    log "drained $node: $reason"
else
    log "scontrol could not drain $node (SLURM drains it for the failed Prolog instead): $reason"
fi
exit 1
