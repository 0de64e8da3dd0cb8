#!/usr/bin/env bash
# Property-based test of the admin API against its own OpenAPI document,
# with Schemathesis, on a real `switchyard run` process.
#
# Usage: deploy/local/schemathesis.sh
#
#   1. creates (once) a Python venv with schemathesis in
#      $SWITCHYARD_CACHE/venv;
#   2. builds switchyard, migrates a schema of its own, and seeds it through
#      Kafka: a record whose job succeeds, one the target rejects (a dead
#      job with its DLQ entry), an undecodable one and one missing its key
#      field (DLQ entries without a job);
#   3. starts `switchyard run` with an admin token on a free loopback port
#      and runs `schemathesis run <base>/v1/openapi.json --checks all`,
#      bounded by SCHEMATHESIS_MAX_EXAMPLES per operation. POST
#      /v1/queues/{queue}/jobs is left out: it is documented as not
#      implemented and answers 501, which schemathesis counts as a server
#      error;
#   4. fails on any schemathesis failure (5xx, a response that does not
#      match the document, a non-JSON error, ignored auth, ...), on a crash
#      of the process, or on an unexpected error in its log; then stops the
#      process and drops the schema, whatever the outcome.
#
# Environment:
#   SWITCHYARD_DATABASE_URL, SWITCHYARD_KAFKA_BROKERS   required (see env.sh,
#                                  or run through deploy/local/with-services.sh)
#   SWITCHYARD_CACHE               cache root (default $HOME/.cache/switchyard)
#   SCHEMATHESIS_MAX_EXAMPLES      test cases per operation (default 50)
#   SCHEMATHESIS_VERSION           pip requirement (default "schemathesis>=4.3,<5")
#   SCHEMATHESIS_ARGS              extra arguments for `schemathesis run`
#   PYTHON                         interpreter for the venv (default python3)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/../.." && pwd)"
CACHE_ROOT="${SWITCHYARD_CACHE:-${HOME:-/root}/.cache/switchyard}"
VENV="$CACHE_ROOT/venv"
MAX_EXAMPLES="${SCHEMATHESIS_MAX_EXAMPLES:-50}"
REQUIREMENT="${SCHEMATHESIS_VERSION:-schemathesis>=4.3,<5}"
PYTHON="${PYTHON:-python3}"

log() { printf '[schemathesis.sh] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[[ -n "${SWITCHYARD_DATABASE_URL:-}" ]] || die "SWITCHYARD_DATABASE_URL is not set (source deploy/local/env.sh, or run through deploy/local/with-services.sh)"
[[ -n "${SWITCHYARD_KAFKA_BROKERS:-}" ]] || die "SWITCHYARD_KAFKA_BROKERS is not set (source deploy/local/env.sh, or run through deploy/local/with-services.sh)"
command -v psql >/dev/null || die "psql not found (needed to drop the test schema)"

# ------------------------------------------------------------------ venv --

ensure_venv() {
  local marker="$VENV/.requirement"
  if [[ -x "$VENV/bin/schemathesis" && -f "$marker" && "$(cat "$marker")" == "$REQUIREMENT" ]]; then
    return 0
  fi
  log "installing $REQUIREMENT into $VENV ..."
  mkdir -p "$CACHE_ROOT"
  [[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV" || die "could not create a venv with $PYTHON"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$REQUIREMENT" \
    || die "pip install $REQUIREMENT failed"
  echo "$REQUIREMENT" >"$marker"
}

free_port() {
  "$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

rand_hex() { od -An -N6 -tx1 /dev/urandom | tr -d ' \n'; }

# --------------------------------------------------------------- cleanup --

WORK=""
RUN_PID=""
TARGET_PID=""
SCHEMA=""

# shellcheck disable=SC2317 # invoked via trap
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n "$RUN_PID" ]] && kill -0 "$RUN_PID" 2>/dev/null; then
    kill -TERM "$RUN_PID" 2>/dev/null || true
    local i
    for ((i = 0; i < 150; i++)); do
      kill -0 "$RUN_PID" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$RUN_PID" 2>/dev/null || true
    wait "$RUN_PID" 2>/dev/null || true
  fi
  if [[ -n "$TARGET_PID" ]]; then
    kill -TERM "$TARGET_PID" 2>/dev/null || true
    wait "$TARGET_PID" 2>/dev/null || true
  fi
  if [[ -n "$SCHEMA" ]]; then
    psql -X -q -v ON_ERROR_STOP=1 "$SWITCHYARD_DATABASE_URL" -c "DROP SCHEMA IF EXISTS \"$SCHEMA\" CASCADE" >/dev/null 2>&1 \
      || log "WARNING: could not drop schema $SCHEMA"
  fi
  if ((rc != 0)) && [[ -n "$WORK" && -s "$WORK/run.log" ]]; then
    log "---- last 40 lines of the switchyard log ----"
    tail -n 40 "$WORK/run.log" >&2 || true
  fi
  [[ -n "$WORK" ]] && rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ------------------------------------------------------------------- run --

ensure_venv
WORK="$(mktemp -d "${TMPDIR:-/tmp}/switchyard-schemathesis.XXXXXX")"
SUFFIX="$(rand_hex)"
SCHEMA="st_$SUFFIX"
TOPIC="schemathesis_$SUFFIX"
GROUP="schemathesis_$SUFFIX"
TOKEN="st-$(rand_hex)$(rand_hex)"
PORT="$(free_port)"
TARGET_PORT="$(free_port)"
BASE="http://127.0.0.1:$PORT"
BIN="$WORK/switchyard"

log "building switchyard ..."
(cd "$REPO_ROOT" && go build -o "$BIN" ./cmd/switchyard)

# The HTTP target: 400 (a permanent failure) for a body with "reject",
# 200 for anything else.
cat >"$WORK/target.py" <<'EOF'
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(400 if b"reject" in body else 200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
EOF
"$VENV/bin/python" "$WORK/target.py" "$TARGET_PORT" &
TARGET_PID=$!

cat >"$WORK/switchyard.yaml" <<EOF
kafka: {group: "$GROUP"}
postgres: {schema: "$SCHEMA", max_conns: 5}
http: {listen: "127.0.0.1:$PORT"}
shutdown_grace: 2s
queues:
  q: {concurrency: 2, lease: 10s, max_runtime: 30s, poll_interval: 200ms}
routes:
  - topic: "$TOPIC"
    kind: schemathesis.seed
    queue: q
    key: {field: k}
    dedupe: {field: id}
    max_attempts: 2
    backoff: {initial: 100ms, max: 1s}
    target: {http: {url: "http://127.0.0.1:$TARGET_PORT/hook", timeout: 5s}}
EOF
export SWITCHYARD_CONFIG="$WORK/switchyard.yaml"
export SWITCHYARD_ADMIN_TOKEN="$TOKEN"

"$BIN" migrate >/dev/null

# Seed before run starts, so that the topic exists (produce creates it).
"$BIN" produce --topic "$TOPIC" '{"id":"ok-1","k":"a"}' >/dev/null
"$BIN" produce --topic "$TOPIC" '{"id":"bad-1","k":"b","reject":true}' >/dev/null
"$BIN" produce --topic "$TOPIC" 'not json' >/dev/null
"$BIN" produce --topic "$TOPIC" '{"id":"nokey-1"}' >/dev/null

log "starting switchyard run on $BASE (schema $SCHEMA)"
SWITCHYARD_LOG_LEVEL=info "$BIN" run >"$WORK/run.log" 2>&1 &
RUN_PID=$!

api() { curl -fsS -H "Authorization: Bearer $TOKEN" "$BASE$1"; }
items() { api "$1" | "$VENV/bin/python" -c 'import json, sys; print(len(json.load(sys.stdin)["items"]))'; }

deadline=$((SECONDS + 90))
until curl -fsS "$BASE/readyz" >/dev/null 2>&1 \
    && [[ "$(items '/v1/jobs?state=succeeded' 2>/dev/null || echo 0)" -ge 1 ]] \
    && [[ "$(items '/v1/dlq' 2>/dev/null || echo 0)" -ge 3 ]]; do
  kill -0 "$RUN_PID" 2>/dev/null || die "switchyard run exited during startup"
  ((SECONDS < deadline)) || die "the seed records were not all processed within 90s"
  sleep 0.5
done
log "seeded: $(items /v1/jobs) jobs, $(items /v1/dlq) DLQ entries"

log "running schemathesis ($("$VENV/bin/schemathesis" --version)), $MAX_EXAMPLES examples per operation"
st_rc=0
# shellcheck disable=SC2086 # SCHEMATHESIS_ARGS is a list of arguments
"$VENV/bin/schemathesis" --no-color run "$BASE/v1/openapi.json" \
  --header "Authorization: Bearer $TOKEN" \
  --checks all \
  --max-examples "$MAX_EXAMPLES" \
  --request-timeout 10 \
  --exclude-operation-id enqueueJob \
  --seed "${SCHEMATHESIS_SEED:-$RANDOM}" \
  --generation-database none \
  ${SCHEMATHESIS_ARGS:-} || st_rc=$?

problems=0
if ! kill -0 "$RUN_PID" 2>/dev/null; then
  log "FAIL: switchyard run crashed during the run"
  problems=1
fi
if grep -E '"level":"(error|dpanic|panic|fatal)"|^panic:|WARNING: DATA RACE' "$WORK/run.log" >&2; then
  log "FAIL: switchyard logged the errors above"
  problems=1
fi
if ((st_rc != 0)); then
  log "FAIL: schemathesis found problems (exit $st_rc)"
  problems=1
fi
((problems == 0)) || exit 1
log "OK: no server error, crash or mismatch with the OpenAPI document"
