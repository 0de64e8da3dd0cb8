#!/usr/bin/env bash
# Local PostgreSQL server for Switchyard development and tests, on a private
# port and data dir (does not touch any system cluster).
#
# Usage: deploy/local/postgres.sh start|stop [--clean|--crash]|clean|status|env|logs
#
#   start    initdb once, start the server and wait until it accepts
#            connections, then create role and database "switchyard"
#            (idempotent). Connections over TCP need a password (any
#            local user can reach a loopback port): the role's is made
#            once, kept in the data root (mode 0600) and printed in the
#            URL; the superuser connects over the data root's private
#            Unix socket only, e.g.
#              psql -h /tmp/switchyard-local/pg/run -p 15432 -U postgres
#   stop     pg_ctl stop -m fast (idempotent); --clean also removes the data dir;
#            --crash stops it as a crash would (-m immediate: nothing is
#            flushed, and the next start recovers from the WAL), for tests
#   clean    stop --clean
#   status   exit 0 if the server is running
#   env      print SWITCHYARD_DATABASE_URL=...
#   logs     tail the server log
#
# Environment:
#   SWITCHYARD_LOCAL_DIR  data root              (default /tmp/switchyard-local)
#   PG_PORT               TCP port on 127.0.0.1  (default 15432)
#   PG_START_TIMEOUT      seconds to wait        (default 60)
#   PG_BINDIR             directory with initdb/pg_ctl/postgres
#                         (default: from PATH, else newest /usr/lib/postgresql/*/bin)
#   PG_USER               OS user that runs the server when invoked as root
#                         (default postgres); non-root invocations run it as
#                         the invoking user
set -euo pipefail

LOCAL_ROOT="${SWITCHYARD_LOCAL_DIR:-/tmp/switchyard-local}"
PG_ROOT="$LOCAL_ROOT/pg"
PGDATA_DIR="$PG_ROOT/data"
SOCKET_DIR="$PG_ROOT/run"
LOG_FILE="$PG_ROOT/postgres.log"
LOCK_FILE="$LOCAL_ROOT/.pg.lock"

PG_PORT="${PG_PORT:-15432}"
PG_START_TIMEOUT="${PG_START_TIMEOUT:-60}"
PG_USER="${PG_USER:-postgres}"
DB_NAME="switchyard"
DB_ROLE="switchyard"
# The role's password: made by the first start, read by env.
ROLE_PASSWORD_FILE="$PG_ROOT/$DB_ROLE.password"

log() { printf '[postgres.sh] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------- helpers --

lock() {
  mkdir -p "$LOCAL_ROOT"
  exec 9>"$LOCK_FILE"
  flock 9
}

find_bindir() {
  if [[ -n "${PG_BINDIR:-}" ]]; then
    [[ -x "$PG_BINDIR/pg_ctl" ]] || die "PG_BINDIR=$PG_BINDIR has no pg_ctl"
    echo "$PG_BINDIR"
    return 0
  fi
  local p
  if p="$(command -v pg_ctl)" && [[ -x "$(dirname "$p")/initdb" && -x "$(dirname "$p")/postgres" ]]; then
    dirname "$(readlink -f "$p")"
    return 0
  fi
  # Debian keeps the server binaries off PATH.
  p="$(find /usr/lib/postgresql -maxdepth 3 -path '*/bin/pg_ctl' 2>/dev/null | sort -V | tail -n 1 || true)"
  if [[ -n "$p" ]]; then
    dirname "$p"
    return 0
  fi
  return 1
}

# ensure_server_installed: on a fresh Debian machine only the client may be
# there; as root, install the server from Debian's packages.
ensure_server_installed() {
  if BINDIR="$(find_bindir)"; then
    return 0
  fi
  if [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null; then
    log "PostgreSQL server binaries not found; installing postgresql from apt ..."
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends postgresql >/dev/null
    BINDIR="$(find_bindir)" || die "postgresql installed but pg_ctl still not found"
    return 0
  fi
  die "PostgreSQL server binaries (initdb, pg_ctl, postgres) not found; install postgresql or set PG_BINDIR"
}

# as_pg runs a command as the OS user owning the cluster.
# (from /, since the caller's cwd, e.g. /root, may be unreadable for it).
as_pg() {
  if [[ $EUID -eq 0 ]]; then
    (cd / && runuser -u "$PG_USER" -- "$@")
  else
    "$@"
  fi
}

# pg_tool prints the path of a client tool, preferring the server's version.
pg_tool() {
  local bindir
  if bindir="$(find_bindir)" && [[ -x "$bindir/$1" ]]; then
    echo "$bindir/$1"
  else
    command -v "$1"
  fi
}

psql_admin() {
  # Superuser connection over the private unix socket.
  "$(pg_tool psql)" -X -q -v ON_ERROR_STOP=1 -h "$SOCKET_DIR" -p "$PG_PORT" -U postgres -d postgres "$@"
}

# pid_alive: kill -0 also succeeds for a zombie that nobody has reaped yet
# (this machine's pid 1 reaps lazily), so look at the process state; /proc
# also works for another user's process, where kill -0 gets EPERM.
pid_alive() {
  local state
  state="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null || true)"
  [[ -n "$state" && "$state" != Z && "$state" != X ]]
}

# is_running: the postmaster recorded in postmaster.pid is alive. (Cheaper
# than `pg_ctl status`, and unlike it not fooled by an unreaped zombie.)
is_running() {
  local pid
  [[ -f "$PGDATA_DIR/postmaster.pid" ]] || return 1
  pid="$(head -n 1 "$PGDATA_DIR/postmaster.pid" 2>/dev/null | tr -d ' -' || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] && pid_alive "$pid" \
    && [[ "$(cat "/proc/$pid/comm" 2>/dev/null || true)" == postgres* ]]
}

accepting() {
  "$(pg_tool pg_isready)" -q -h 127.0.0.1 -p "$PG_PORT" -d postgres -U postgres -t 2 >/dev/null 2>&1
}

show_log_tail() {
  if [[ -s "$LOG_FILE" ]]; then
    log "---- last 40 lines of $LOG_FILE ----"
    tail -n 40 "$LOG_FILE" >&2 || true
  fi
}

# random_hex prints 16 random bytes in hex: a password that needs no
# quoting in a URL or in SQL.
random_hex() {
  od -An -tx1 -N16 /dev/urandom | tr -d ' \n'
}

print_env() {
  local auth="$DB_ROLE"
  [[ -s "$ROLE_PASSWORD_FILE" ]] && auth="$DB_ROLE:$(cat "$ROLE_PASSWORD_FILE")"
  echo "SWITCHYARD_DATABASE_URL=postgres://$auth@127.0.0.1:$PG_PORT/$DB_NAME?sslmode=disable"
}

# ------------------------------------------------------------------ start --

prepare_dirs() {
  mkdir -p "$LOCAL_ROOT"
  if [[ $EUID -eq 0 ]]; then
    id "$PG_USER" >/dev/null 2>&1 || die "OS user $PG_USER does not exist (set PG_USER)"
    # The parent may be root-owned with a restrictive umask: the server user
    # must be able to traverse it.
    chmod a+x "$LOCAL_ROOT"
    mkdir -p "$PG_ROOT"
    chown "$PG_USER": "$PG_ROOT"
    chmod 0700 "$PG_ROOT"
    as_pg mkdir -p "$SOCKET_DIR"
  else
    mkdir -p "$PG_ROOT" "$SOCKET_DIR"
    chmod 0700 "$PG_ROOT"
  fi
}

init_cluster() {
  if [[ -f "$PGDATA_DIR/PG_VERSION" ]]; then
    return 0
  fi
  log "initialising cluster in $PGDATA_DIR"
  rm -rf "$PGDATA_DIR"
  # Trust on the Unix socket, whose directory only the cluster's owner
  # may enter; a password over TCP. initdb wants one for the superuser
  # then: a random one, forgotten (the superuser uses the socket).
  local pwfile="$PG_ROOT/initdb.pw" auth=(--auth-local=trust --auth-host=scram-sha-256)
  (umask 077 && random_hex >"$pwfile")
  [[ $EUID -eq 0 ]] && chown "$PG_USER": "$pwfile"
  if ! as_pg "$BINDIR/initdb" -D "$PGDATA_DIR" -U postgres "${auth[@]}" --pwfile="$pwfile" -E UTF8 \
      --locale=C.UTF-8 --no-instructions >"$PG_ROOT/initdb.log" 2>&1; then
    # Older initdb: no C.UTF-8 / --no-instructions; retry with plain C.
    rm -rf "$PGDATA_DIR"
    if ! as_pg "$BINDIR/initdb" -D "$PGDATA_DIR" -U postgres "${auth[@]}" --pwfile="$pwfile" -E UTF8 \
        --locale=C >"$PG_ROOT/initdb.log" 2>&1; then
      rm -f "$pwfile"
      cat "$PG_ROOT/initdb.log" >&2
      die "initdb failed"
    fi
  fi
  rm -f "$pwfile"
}

# require_passwords makes a cluster that an earlier version of this
# script initialised with trust for every connection ask TCP connections
# for a password, as a new one does, and reloads it when it runs.
require_passwords() {
  local hba="$PGDATA_DIR/pg_hba.conf"
  grep -Eq '^host[[:space:]].*[[:space:]]trust[[:space:]]*$' "$hba" || return 0
  log "asking TCP connections for a password ($hba)"
  as_pg sed -i -E 's/^(host[[:space:]].*[[:space:]])trust[[:space:]]*$/\1scram-sha-256/' "$hba"
  if is_running; then
    psql_admin -c 'SELECT pg_reload_conf()' >/dev/null
  fi
}

# cluster_procs lists live processes whose cwd is our data dir.
cluster_procs() {
  local d pid
  for d in /proc/[0-9]*; do
    pid="${d#/proc/}"
    [[ "$(readlink "$d/cwd" 2>/dev/null || true)" == "$PGDATA_DIR" ]] || continue
    pid_alive "$pid" && echo "$pid"
  done
  return 0
}

remove_stale_locks() {
  # After a SIGKILL / machine restart the pid in postmaster.pid or in the
  # socket lock file may be a dying (zombie) postmaster or an unrelated
  # process, and postgres then refuses to start. Called only when nothing
  # answers on our port.
  local f pid i
  # Orphaned children of a killed postmaster (they run with cwd = data dir)
  # exit on their own within moments; never remove the locks under them.
  for ((i = 0; i < 100; i++)); do
    [[ -z "$(cluster_procs)" ]] && break
    sleep 0.1
  done
  if [[ -n "$(cluster_procs)" ]]; then
    die "leftover processes still use $PGDATA_DIR: $(cluster_procs | tr '\n' ' ')"
  fi
  for f in "$PGDATA_DIR/postmaster.pid" "$SOCKET_DIR/.s.PGSQL.$PG_PORT.lock"; do
    [[ -f "$f" ]] || continue
    pid="$(head -n 1 "$f" 2>/dev/null | tr -d ' -' || true)"
    if [[ "$pid" =~ ^[0-9]+$ ]] && pid_alive "$pid" \
        && [[ "$(cat "/proc/$pid/comm" 2>/dev/null || true)" == postgres* ]]; then
      continue
    fi
    log "removing stale $f (pid ${pid:-?} is not a running postgres)"
    rm -f "$f"
  done
}

wait_ready() {
  local deadline=$((SECONDS + PG_START_TIMEOUT))
  until accepting && psql_admin -c 'select 1' >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      show_log_tail
      die "postgres did not accept connections on 127.0.0.1:$PG_PORT within ${PG_START_TIMEOUT}s"
    fi
    if ! is_running; then
      show_log_tail
      die "postgres exited during startup"
    fi
    sleep 0.3
  done
}

ensure_database() {
  if [[ ! -s "$ROLE_PASSWORD_FILE" ]]; then
    (umask 077 && random_hex >"$ROLE_PASSWORD_FILE")
  fi
  psql_admin <<SQL
SELECT format('CREATE ROLE %I LOGIN CREATEDB CREATEROLE', '$DB_ROLE')
  WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '$DB_ROLE') \gexec
ALTER ROLE $DB_ROLE LOGIN CREATEDB CREATEROLE PASSWORD '$(cat "$ROLE_PASSWORD_FILE")';
-- switchyard bench settles each measurement with a CHECKPOINT (PostgreSQL
-- 15's pg_checkpoint role); the product itself never needs it.
SELECT format('GRANT pg_checkpoint TO %I', '$DB_ROLE')
  WHERE NOT pg_has_role('$DB_ROLE', 'pg_checkpoint', 'MEMBER') \gexec
SELECT format('CREATE DATABASE %I OWNER %I ENCODING ''UTF8''', '$DB_NAME', '$DB_ROLE')
  WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = '$DB_NAME') \gexec
ALTER DATABASE $DB_NAME OWNER TO $DB_ROLE;
SQL
}

do_start() {
  local start=$SECONDS
  ensure_server_installed
  pg_tool psql >/dev/null || die "psql not found"
  pg_tool pg_isready >/dev/null || die "pg_isready not found"
  prepare_dirs
  init_cluster
  require_passwords

  if is_running; then
    wait_ready
    log "already running on 127.0.0.1:$PG_PORT"
  else
    if accepting; then
      die "127.0.0.1:$PG_PORT is already in use by a server this script did not start (set PG_PORT)"
    fi
    remove_stale_locks
    # Keep the previous run's log aside so failure output shows only this run.
    [[ -f "$LOG_FILE" ]] && mv -f "$LOG_FILE" "$LOG_FILE.prev"
    # 9>&- below: the server must not inherit our flock fd.
    log "starting postgres ($("$BINDIR/postgres" --version)) on 127.0.0.1:$PG_PORT (log: $LOG_FILE)"
    if ! as_pg "$BINDIR/pg_ctl" -D "$PGDATA_DIR" -l "$LOG_FILE" -w -t "$PG_START_TIMEOUT" \
        -o "-p $PG_PORT -k $SOCKET_DIR -c listen_addresses=127.0.0.1 -c fsync=on -c max_connections=200 -c shared_buffers=256MB" \
        start >/dev/null 9>&-; then
      show_log_tail
      die "pg_ctl start failed"
    fi
    wait_ready
    log "postgres ready in $((SECONDS - start))s"
  fi
  ensure_database
  print_env
}

# ------------------------------------------------------------------- stop --

do_stop() {
  local opt=${1:-} mode=fast
  [[ "$opt" == "--crash" ]] && mode=immediate
  if is_running; then
    log "stopping postgres (-m $mode)"
    BINDIR="$(find_bindir)"
    as_pg "$BINDIR/pg_ctl" -D "$PGDATA_DIR" stop -m "$mode" -w -t 60 >/dev/null \
      || die "pg_ctl stop failed"
    log "postgres stopped"
  else
    log "postgres is not running"
  fi
  if [[ "$opt" == "--clean" ]]; then
    log "removing $PG_ROOT"
    rm -rf "$PG_ROOT"
  fi
}

do_status() {
  if is_running && accepting; then
    echo "postgres running on 127.0.0.1:$PG_PORT"
    return 0
  fi
  echo "postgres not running"
  return 1
}

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
}

BINDIR=""
cmd="${1:-}"
[[ $# -gt 0 ]] && shift
case "$cmd" in
  start) lock; do_start ;;
  stop)
    [[ $# -eq 0 || "$1" == "--clean" || "$1" == "--crash" ]] || die "unknown stop option: $1"
    lock; do_stop "${1:-}" ;;
  clean) lock; do_stop --clean ;;
  status) do_status ;;
  env) print_env ;;
  logs) tail -n "${1:-100}" "$LOG_FILE" ;;
  -h | --help | help) usage ;;
  *) usage >&2; exit 2 ;;
esac
