#!/usr/bin/env bash
# Local single-node Apache Kafka (KRaft, combined broker+controller) for
# Switchyard development and tests. No Docker, no tarball download: the broker
# and its runtime dependencies come from Maven Central through `mvn`.
#
# Usage: deploy/local/kafka.sh fetch|start|stop [--clean]|clean|status|env|logs
#
#   fetch    download kafka_2.13 and its runtime deps into the cache (idempotent)
#   start    fetch if needed, format KRaft storage once, start the broker in the
#            background and wait until it answers metadata requests (idempotent)
#   stop     SIGTERM the broker, SIGKILL after 30s (idempotent); --clean also
#            removes the data dir
#   clean    stop --clean
#   status   exit 0 if the broker is running and its port answers
#   env      print SWITCHYARD_KAFKA_BROKERS=...
#   logs     tail the broker log
#
# Environment:
#   SWITCHYARD_CACHE      cache root        (default $HOME/.cache/switchyard)
#   SWITCHYARD_LOCAL_DIR  data root         (default /tmp/switchyard-local)
#   KAFKA_PORT            PLAINTEXT port    (default 19092)
#   KAFKA_CONTROLLER_PORT CONTROLLER port   (default 19093)
#   KAFKA_HEAP_OPTS       broker heap       (default -Xmx1g -Xms1g, Kafka's own)
#   KAFKA_START_TIMEOUT   seconds to wait for the broker (default 90)
#   KAFKA_CLUSTER_ID      cluster id used when formatting (default fixed)
#   JAVA_HOME / MVN       java and maven to use (default: from PATH)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ASSETS_DIR="$SCRIPT_DIR/kafka"

KAFKA_VERSION="4.4.0"
CACHE_ROOT="${SWITCHYARD_CACHE:-${HOME:-/root}/.cache/switchyard}"
KAFKA_HOME="$CACHE_ROOT/kafka-$KAFKA_VERSION"
LIBS_DIR="$KAFKA_HOME/libs"
TOOLS_DIR="$KAFKA_HOME/tools-classes"
FETCH_MARKER="$KAFKA_HOME/.fetched"

LOCAL_ROOT="${SWITCHYARD_LOCAL_DIR:-/tmp/switchyard-local}"
DATA_DIR="$LOCAL_ROOT/kafka"
LOG_DIRS="$DATA_DIR/data"
APP_LOG_DIR="$DATA_DIR/logs"
CONFIG_FILE="$DATA_DIR/server.properties"
PID_FILE="$DATA_DIR/kafka.pid"
OUT_FILE="$DATA_DIR/kafka.out"
LOCK_FILE="$LOCAL_ROOT/.kafka.lock"

KAFKA_PORT="${KAFKA_PORT:-19092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-19093}"
# Kafka's own default heap (kafka-server-start.sh). With 512m/256m the
# young generation filled every ~2.4 s at 1,000 records/s and each
# collection paused the broker 7-18 ms, where bench e2e's slow records
# clustered; at 1g its young collections took 8-20 ms a run instead of
# 56-76 (docs/performance.md, "e2e measured after a warm-up load").
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xmx1g -Xms1g}"
KAFKA_START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
# How long the controller waits for the broker's heartbeat before fencing
# it. A node is both here, so a stall of the whole process (disk, CPU
# starvation on a busy 2-core machine: 12 s seen under the test suite)
# must not fence it; but after a kill -9 a restarted broker cannot
# register until the old session expires, so the test that restarts a
# private broker sets it short.
KAFKA_BROKER_SESSION_TIMEOUT_MS="${KAFKA_BROKER_SESSION_TIMEOUT_MS:-30000}"
# base64url("switchyard-local"): a valid 16-byte Kafka cluster id.
KAFKA_CLUSTER_ID="${KAFKA_CLUSTER_ID:-c3dpdGNoeWFyZC1sb2NhbA}"
BROKERS="127.0.0.1:$KAFKA_PORT"

if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then
  JAVA="$JAVA_HOME/bin/java"
  JAVAC="$JAVA_HOME/bin/javac"
else
  JAVA="java"
  JAVAC="javac"
fi
MVN="${MVN:-mvn}"

log() { printf '[kafka.sh] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------- helpers --

# lock: serialise concurrent fetch/start/stop invocations.
lock() {
  mkdir -p "$LOCAL_ROOT"
  exec 9>"$LOCK_FILE"
  flock 9
}

port_open() {
  # bash's /dev/tcp; the subshell closes the fd again.
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# pid_alive: kill -0 also succeeds for a zombie that nobody has reaped yet
# (this machine's pid 1 reaps lazily), so look at the process state; /proc
# also works for another user's process, where kill -0 gets EPERM.
pid_alive() {
  local state
  state="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null || true)"
  [[ -n "$state" && "$state" != Z && "$state" != X ]]
}

# broker_pid prints the pid from the pid file if that process is alive and is
# our broker (guards against pid reuse); returns 1 otherwise.
broker_pid() {
  [[ -f "$PID_FILE" ]] || return 1
  local pid
  pid="$(cat "$PID_FILE" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  pid_alive "$pid" || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'kafka\.Kafka' || return 1
  echo "$pid"
}

tool_java() {
  # Short-lived helper JVM (storage tool, readiness probe): small heap, fast start.
  "$JAVA" -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Dlog4j2.configurationFile="$ASSETS_DIR/log4j2-tools.properties" \
    -cp "$TOOLS_DIR:$LIBS_DIR/*" "$@"
}

print_env() {
  echo "SWITCHYARD_KAFKA_BROKERS=$BROKERS"
}

show_log_tail() {
  local f
  for f in "$APP_LOG_DIR/server.log" "$OUT_FILE"; do
    if [[ -s "$f" ]]; then
      log "---- last 40 lines of $f ----"
      tail -n 40 "$f" >&2 || true
    fi
  done
}

fetch_key() {
  # The cache is valid for exactly this pom and probe source.
  cat "$ASSETS_DIR/pom.xml" "$ASSETS_DIR/KafkaReady.java" | sha256sum | cut -d' ' -f1
}

# ------------------------------------------------------------------ fetch --

do_fetch() {
  local key
  key="$(fetch_key)"
  if [[ -f "$FETCH_MARKER" && "$(cat "$FETCH_MARKER")" == "$key" && -d "$LIBS_DIR" ]]; then
    log "kafka $KAFKA_VERSION already fetched in $KAFKA_HOME"
    return 0
  fi
  command -v "$MVN" >/dev/null || die "maven ($MVN) not found on PATH"
  command -v "$JAVAC" >/dev/null || die "javac not found (need a JDK >= 17)"

  local start=$SECONDS tmp mvn_log
  mkdir -p "$KAFKA_HOME"
  tmp="$(mktemp -d "$KAFKA_HOME/fetch.XXXXXX")"
  mvn_log="$tmp/mvn.log"
  log "fetching org.apache.kafka:kafka_2.13:$KAFKA_VERSION and runtime deps via maven ..."
  # Debian's maven prints ANSI resets even in batch mode: keep its output in a
  # log and show it only on failure.
  if ! "$MVN" -B -q -ntp -f "$ASSETS_DIR/pom.xml" \
      dependency:copy-dependencies \
      -DincludeScope=runtime \
      -DoutputDirectory="$tmp/libs" >"$mvn_log" 2>&1; then
    sed 's/\x1b\[[0-9;]*m//g' "$mvn_log" | tail -n 60 >&2
    rm -rf "$tmp"
    die "maven failed to fetch kafka $KAFKA_VERSION"
  fi
  compgen -G "$tmp/libs/kafka_2.13-$KAFKA_VERSION.jar" >/dev/null \
    || { rm -rf "$tmp"; die "maven ran but kafka_2.13-$KAFKA_VERSION.jar is missing"; }

  log "compiling readiness probe ..."
  mkdir -p "$tmp/tools-classes"
  if ! "$JAVAC" -nowarn -d "$tmp/tools-classes" -cp "$tmp/libs/*" "$ASSETS_DIR/KafkaReady.java" >"$tmp/javac.log" 2>&1; then
    cat "$tmp/javac.log" >&2
    rm -rf "$tmp"
    die "could not compile $ASSETS_DIR/KafkaReady.java"
  fi

  rm -rf "$LIBS_DIR" "$TOOLS_DIR"
  mv "$tmp/libs" "$LIBS_DIR"
  mv "$tmp/tools-classes" "$TOOLS_DIR"
  rm -rf "$tmp"
  echo "$key" >"$FETCH_MARKER"
  log "fetched $(find "$LIBS_DIR" -name '*.jar' | wc -l) jars ($(du -sh "$LIBS_DIR" | cut -f1)) into $LIBS_DIR in $((SECONDS - start))s"
}

# ------------------------------------------------------------------ start --

write_config() {
  mkdir -p "$DATA_DIR" "$LOG_DIRS" "$APP_LOG_DIR"
  cat >"$CONFIG_FILE" <<EOF
# Generated by deploy/local/kafka.sh; rewritten on every start.
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$KAFKA_CONTROLLER_PORT
controller.listener.names=CONTROLLER
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$LOG_DIRS

# Single node: every internal topic has one replica.
offsets.topic.replication.factor=1
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=10
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
default.replication.factor=1
min.insync.replicas=1

# Fast feedback for tests.
group.initial.rebalance.delay.ms=0
# KIP-848 (group_protocol: consumer) groups time a silent member out on
# the broker's side, 45 s by default; 10 s, as kafka.session_timeout's
# default does for classic groups, so that a member killed with every
# partition does not stall its group for most of a minute.
group.consumer.min.session.timeout.ms=6000
group.consumer.session.timeout.ms=10000
num.partitions=1
auto.create.topics.enable=true
delete.topic.enable=true

# Small machine (2 cores, tests alongside).
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
background.threads=4
# See KAFKA_BROKER_SESSION_TIMEOUT_MS above.
broker.session.timeout.ms=$KAFKA_BROKER_SESSION_TIMEOUT_MS
broker.heartbeat.interval.ms=1000
log.retention.hours=24
log.segment.bytes=67108864
EOF
}

format_storage() {
  if [[ -f "$LOG_DIRS/meta.properties" ]]; then
    log "storage already formatted in $LOG_DIRS"
    return 0
  fi
  log "formatting KRaft storage (cluster id $KAFKA_CLUSTER_ID) in $LOG_DIRS"
  if ! tool_java kafka.tools.StorageTool format \
      --cluster-id "$KAFKA_CLUSTER_ID" --config "$CONFIG_FILE" --standalone \
      >"$DATA_DIR/format.log" 2>&1; then
    cat "$DATA_DIR/format.log" >&2
    die "kafka storage format failed"
  fi
}

# wait_ready <pid>: returns 0 once the broker answers metadata requests, 1
# (after printing the reason and the log tails) if it exits or times out.
wait_ready() {
  local pid=$1 deadline=$((SECONDS + KAFKA_START_TIMEOUT)) left
  # 1. cheap: wait for the PLAINTEXT port to accept TCP connections.
  until port_open "$KAFKA_PORT"; do
    if ! pid_alive "$pid"; then
      show_log_tail
      log "ERROR: kafka broker (pid $pid) exited during startup"
      return 1
    fi
    if ((SECONDS >= deadline)); then
      show_log_tail
      log "ERROR: kafka broker did not open 127.0.0.1:$KAFKA_PORT within ${KAFKA_START_TIMEOUT}s"
      return 1
    fi
    sleep 0.5
  done
  # 2. real: a metadata round trip through the admin client.
  while :; do
    left=$((deadline - SECONDS))
    ((left < 5)) && left=5
    if tool_java KafkaReady "$BROKERS" "$((left < 15 ? left : 15))"; then
      return 0
    fi
    if ! pid_alive "$pid"; then
      show_log_tail
      log "ERROR: kafka broker (pid $pid) exited during startup"
      return 1
    fi
    if ((SECONDS >= deadline)); then
      show_log_tail
      log "ERROR: kafka broker did not answer metadata requests within ${KAFKA_START_TIMEOUT}s"
      return 1
    fi
  done
}

do_start() {
  local pid start=$SECONDS
  if pid="$(broker_pid)"; then
    if port_open "$KAFKA_PORT"; then
      log "already running (pid $pid) on $BROKERS"
      print_env
      return 0
    fi
    log "broker pid $pid is alive but port $KAFKA_PORT is not open yet; waiting"
    wait_ready "$pid" || exit 1
    print_env
    return 0
  fi
  rm -f "$PID_FILE"
  if port_open "$KAFKA_PORT"; then
    die "127.0.0.1:$KAFKA_PORT is already in use by a process this script did not start (set KAFKA_PORT)"
  fi
  if port_open "$KAFKA_CONTROLLER_PORT"; then
    die "127.0.0.1:$KAFKA_CONTROLLER_PORT is already in use (set KAFKA_CONTROLLER_PORT)"
  fi
  command -v "$JAVA" >/dev/null || die "java not found (need Java >= 17)"

  do_fetch
  write_config
  format_storage

  log "starting kafka $KAFKA_VERSION broker on $BROKERS (log: $APP_LOG_DIR/server.log)"
  # Keep the previous run's logs aside so failure output shows only this run.
  [[ -f "$APP_LOG_DIR/server.log" ]] && mv -f "$APP_LOG_DIR/server.log" "$APP_LOG_DIR/server.log.prev"
  [[ -f "$OUT_FILE" ]] && mv -f "$OUT_FILE" "$OUT_FILE.prev"
  : >"$OUT_FILE"
  # shellcheck disable=SC2086 # KAFKA_HEAP_OPTS is a list of JVM flags
  (
    # Don't let the broker inherit the flock fd, or later calls would block.
    exec 9>&-
    cd "$DATA_DIR"
    exec setsid nohup "$JAVA" $KAFKA_HEAP_OPTS \
      -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
      -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent \
      -XX:MaxDirectMemorySize=256m \
      -Djava.awt.headless=true \
      -Dkafka.logs.dir="$APP_LOG_DIR" \
      -Dlog4j2.configurationFile="$ASSETS_DIR/log4j2.properties" \
      -cp "$LIBS_DIR/*" \
      kafka.Kafka "$CONFIG_FILE"
  ) </dev/null >>"$OUT_FILE" 2>&1 &
  pid=$!
  echo "$pid" >"$PID_FILE"

  if ! wait_ready "$pid"; then
    log "stopping the broker that failed to start"
    do_stop
    exit 1
  fi
  log "kafka ready (pid $pid) in $((SECONDS - start))s"
  print_env
}

# ------------------------------------------------------------------- stop --

do_stop() {
  local clean=${1:-} pid
  if pid="$(broker_pid)"; then
    log "stopping kafka (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    local i
    for ((i = 0; i < 300; i++)); do
      pid_alive "$pid" || break
      sleep 0.1
    done
    if pid_alive "$pid"; then
      log "kafka did not stop within 30s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      for ((i = 0; i < 50; i++)); do
        pid_alive "$pid" || break
        sleep 0.1
      done
    fi
    log "kafka stopped"
  else
    log "kafka is not running"
  fi
  rm -f "$PID_FILE"
  if [[ "$clean" == "--clean" ]]; then
    log "removing $DATA_DIR"
    rm -rf "$DATA_DIR"
  fi
}

do_status() {
  local pid
  if pid="$(broker_pid)" && port_open "$KAFKA_PORT"; then
    echo "kafka running (pid $pid) on $BROKERS"
    return 0
  fi
  echo "kafka not running"
  return 1
}

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
}

cmd="${1:-}"
[[ $# -gt 0 ]] && shift
case "$cmd" in
  fetch) lock; do_fetch ;;
  start) lock; do_start ;;
  stop)
    [[ $# -eq 0 || "$1" == "--clean" ]] || die "unknown stop option: $1"
    lock; do_stop "${1:-}" ;;
  clean) lock; do_stop --clean ;;
  status) do_status ;;
  env) print_env ;;
  logs) tail -n "${1:-100}" "$APP_LOG_DIR/server.log" ;;
  -h | --help | help) usage ;;
  *) usage >&2; exit 2 ;;
esac
