#!/bin/sh
# attn-doctor for node_exporter's textfile collector: writes DIR/attn_doctor.prom atomically (a
# temporary file, then mv, as node_exporter's README shows for cron jobs), so the collector never
# reads half a file. Run it from attn-doctor-textfile.timer (systemd) or cron.
#
# `check --format prometheus` exits 0 once the metrics are written, a failing node included (its
# exit code is the gauge attn_doctor_check_exit_code); when the check stops before a result (an
# unreadable env file, no attn-doctor) nothing is published, the previous file stays, and this
# script exits non-zero: node_textfile_mtime_seconds shows the file's age.
#   ATTN_DOCTOR               the program (default /opt/attn-doctor/bin/attn-doctor)
#   ATTN_DOCTOR_STACK         the venv or site-packages folder to check (`check --path`)
#   ATTN_DOCTOR_ENV_FILE      check these facts (`attn-doctor probe --json`) instead
#   ATTN_DOCTOR_TEXTFILE_DIR  node_exporter's --collector.textfile.directory
#                             (default /var/lib/node_exporter/textfile_collector)

doctor=${ATTN_DOCTOR:-/opt/attn-doctor/bin/attn-doctor}
dir=${ATTN_DOCTOR_TEXTFILE_DIR:-/var/lib/node_exporter/textfile_collector}

set -- check --no-scan --format prometheus
if [ -n "${ATTN_DOCTOR_ENV_FILE:-}" ]; then
    set -- "$@" --env-file "$ATTN_DOCTOR_ENV_FILE"
elif [ -n "${ATTN_DOCTOR_STACK:-}" ]; then
    set -- "$@" --path "$ATTN_DOCTOR_STACK"
fi

partial="$dir/attn_doctor.prom.$$"
if "$doctor" "$@" >"$partial"; then
    mv "$partial" "$dir/attn_doctor.prom"
else
    status=$?
    rm -f "$partial"
    exit "$status"
fi
