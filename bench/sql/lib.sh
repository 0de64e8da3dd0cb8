# Sourced by the bench/sql scripts: psql against SWITCHYARD_DATABASE_URL,
# and migrated NAME, which creates schema NAME as `switchyard migrate`
# leaves it and drops it when the script exits.
: "${SWITCHYARD_DATABASE_URL:?set it (source deploy/local/env.sh)}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
psql() { command psql -X -q -v ON_ERROR_STOP=1 "$SWITCHYARD_DATABASE_URL" "$@"; }

migrated() {
  local cfg
  cfg="$(mktemp)"
  # shellcheck disable=SC2064 # the schema's name is fixed now
  trap "psql -c 'DROP SCHEMA IF EXISTS $1 CASCADE' >/dev/null 2>&1 || true" EXIT
  printf 'postgres: {schema: %s}\nqueues: {q: {concurrency: 1}}\nroutes: [{topic: t, kind: k, queue: q, target: {go: true}}]\n' "$1" >"$cfg"
  (cd "$ROOT" && go run ./cmd/switchyard migrate --config "$cfg" >/dev/null)
  rm -f "$cfg"
}
