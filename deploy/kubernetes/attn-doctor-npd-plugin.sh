#!/bin/sh
# attn-doctor as a Node Problem Detector custom plugin (attn-doctor-monitor.json runs it).
#
# NPD's contract (kubernetes/node-problem-detector, pkg/custompluginmonitor/plugin/plugin.go):
# exit 0 is OK, 1 is NonOK (the problem), anything else Unknown; the message is stdout, trimmed
# and cut at max_output_length bytes. `attn-doctor check --format npd` keeps it: one ASCII line of
# at most 80 characters, exit 0 (nothing failing), 1 (a failing finding), 2 or 3 (attn-doctor
# could not decide: Unknown). This wrapper keeps it too where attn-doctor cannot run at all.
#
# What is checked: the Python stack of the image this runs in (the image NPD runs in is built
# FROM the workload image: see Dockerfile) against this node's GPUs and NVIDIA driver, read
# through NVML. Arguments are passed on to `check` (the monitor gives `--fail-on warning` to its
# temporary rule).
#   ATTN_DOCTOR           the program (default /opt/attn-doctor/bin/attn-doctor)
#   ATTN_DOCTOR_STACK     the venv or site-packages folder to check (default: every site-packages
#                         folder of the image's python3, ATTN_DOCTOR_STACK_PYTHON)
#   ATTN_DOCTOR_ENV_FILE  check these facts (`attn-doctor probe --json`) instead (an absolute
#                         path: the check runs from /)

ATTN_DOCTOR=${ATTN_DOCTOR:-/opt/attn-doctor/bin/attn-doctor}

if [ ! -x "$ATTN_DOCTOR" ]; then
    echo "attn-doctor: unknown: attn-doctor is not installed at $ATTN_DOCTOR" | cut -c 1-80
    exit 2
fi

# the target goes before the rule's args
if [ -n "${ATTN_DOCTOR_ENV_FILE:-}" ]; then
    set -- --env-file "$ATTN_DOCTOR_ENV_FILE" "$@"
elif [ -n "${ATTN_DOCTOR_STACK:-}" ]; then
    set -- --path "$ATTN_DOCTOR_STACK" "$@"
else
    folders=$("${ATTN_DOCTOR_STACK_PYTHON:-python3}" -c '
import os, site
print("\n".join(p for p in site.getsitepackages() if os.path.isdir(p)))' 2>/dev/null)
    if [ -z "$folders" ]; then
        echo "attn-doctor: unknown: no site-packages of ${ATTN_DOCTOR_STACK_PYTHON:-python3} found" | cut -c 1-80
        exit 2
    fi
    rest=$(mktemp) || exit 2
    printf '%s\n' "$folders" >"$rest"
    while IFS= read -r folder; do
        set -- --path "$folder" "$@"
    done <"$rest"
    rm -f "$rest"
fi

cd / || exit 2  # no pyproject.toml of the working folder is read as configuration
exec "$ATTN_DOCTOR" check --no-scan --format npd "$@"
