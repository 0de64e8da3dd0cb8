#!/usr/bin/env bash
# Run a command with local Kafka and Postgres available, e.g.
#
#   deploy/local/with-services.sh go test -race ./...
#
# For each service:
#   - if its variable (SWITCHYARD_KAFKA_BROKERS / SWITCHYARD_DATABASE_URL) is
#     already set, it is used as is and nothing is started;
#   - else if the local service is already running (started by hand or by
#     `make services-up`), it is used and left running afterwards;
#   - else it is started here and ALWAYS stopped again when the command ends
#     (success, failure, or Ctrl-C).
# The variables are exported to the command; its exit code is propagated.
#
# Environment: WITH_SERVICES_CLEAN=1 also removes the data dirs of the
# services this script started (stop --clean).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

log() { printf '[with-services] %s\n' "$*" >&2; }

if [[ $# -eq 0 ]]; then
  echo "usage: $0 <command> [args...]" >&2
  exit 2
fi

STARTED=() # scripts whose service this invocation started

# shellcheck disable=SC2317 # invoked via trap
cleanup() {
  local rc=$? s i stop_args=()
  trap - EXIT INT TERM
  [[ "${WITH_SERVICES_CLEAN:-}" == 1 ]] && stop_args=(--clean)
  # Stop in reverse start order; keep going if one stop fails.
  for ((i = ${#STARTED[@]} - 1; i >= 0; i--)); do
    s="${STARTED[i]}"
    log "stopping $(basename "$s" .sh) (started by this run)"
    bash "$s" stop "${stop_args[@]}" || log "WARNING: $s stop failed"
  done
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# redacted prints a VAR=URL setting with the URL's password masked: the
# run's log is kept (CI), and a URL given from outside may be a real one.
redacted() {
  sed -E 's#(://[^:/@]*:)[^@/]*@#\1***@#' <<<"$1"
}

# ensure <VAR> <script>: make sure <VAR> is exported, starting the service if needed.
ensure() {
  local var=$1 script="$SCRIPT_DIR/$2" line
  if [[ -n "${!var:-}" ]]; then
    log "$var is set; using $(redacted "${!var}") (not starting anything)"
    return 0
  fi
  if bash "$script" status >/dev/null 2>&1; then
    log "$(basename "$script" .sh) already running; using it (will be left running)"
  else
    # Register before starting, so a half-finished start is cleaned up too.
    STARTED+=("$script")
    bash "$script" start >/dev/null
  fi
  line="$(bash "$script" env)"
  export "${line?}"
  log "$(redacted "$line")"
}

ensure SWITCHYARD_KAFKA_BROKERS kafka.sh
ensure SWITCHYARD_DATABASE_URL postgres.sh

log "running: $*"
set +e
"$@"
rc=$?
set -e
if [[ $rc -ne 0 ]]; then
  log "command exited with status $rc"
fi
exit "$rc"
