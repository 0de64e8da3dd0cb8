#!/usr/bin/env bash
# Server-side cost of a job's claim and completion, by index set: one
# Postgres session claims 100 jobs (FOR UPDATE SKIP LOCKED from its last
# position, as JobClaim does) and completes them, 1,000 times over 100,000
# queued jobs, committing each round (synchronous_commit off, so the
# figure is CPU and WAL, not fsync). No client work is in it: it is the
# ceiling the schema sets, which `switchyard bench` figures sit under.
#
# Usage: bench/sql/claim_loop.sh [rounds] [variant...]
#   with SWITCHYARD_DATABASE_URL set (source deploy/local/env.sh). Prints,
#   for each round, jobs/s of each variant (default: before after):
#     before  the index set of the jobs table before migration 0009
#     after   the index set since 0009 (today's, less the group indexes,
#             which hold no row of an ungrouped route)
#     move    after, but a completion moves the row to a history table
#             (DELETE ... RETURNING into an INSERT) with a primary key and
#             (state, finished_at), instead of updating it
#     hot     move, and no index of jobs names a column the claim changes
#             (state, lease, token, ...), so that a claim is a HOT update:
#             the claim index holds every unfinished row and the claim
#             filters the state on the heap; fillfactor 50 leaves room
#     gen     rows stay in jobs, but every index names a stored generated
#             column, phase ('active' for queued, retrying and running;
#             the state otherwise), instead of the state: a claim changes
#             no indexed value and is a HOT update, a completion is not;
#             fillfactor 50 (gen100: the default 100). gen has no index
#             that finds expired leases, which the rescuer needs:
#     genrun  gen with today's index of running jobs by lease expiry
#             (state = 'running' in its predicate): a claim is no longer
#             a HOT update, which is what the rescuer's index costs
#     leases  gen, and the claim also inserts each lease (id, token,
#             expiry) into a table of its own, indexed by expiry for the
#             rescuer; the completion deletes it
#     movebrin  move, with the history's (state, finished_at) btree replaced
#             by a BRIN index on finished_at (rows arrive in finishing
#             order, so block ranges summarise it well and cost little)
#     batch   move, but a completion stores its jobs' finished rows as one
#             row per statement (an array of them), found by the range of
#             its ids through a GiST index: one history write per batch
#     delete  after, but a completion deletes the row and keeps nothing
#             (graphile-worker's way): what keeping finished jobs costs
#     nofinished  after without the finished index (retention's), and
#     noactive    after without the active-states index (the admin
#                 listing's): what each of those readers costs a job
#     lean    after without either: rows updated in place as today
#     batchlean   batch without the active-states index: jobs holds only
#             unfinished rows, so the admin listing can walk its primary key
#     deletelean  delete without the active-states index
#   and, for each, how many of the table's updates were HOT.
#
# Environment: PAYLOAD, the bytes of each job's payload (default 100);
# LOCK, the claim's row lock (default "FOR UPDATE SKIP LOCKED"; "" for
# none, which is safe only because one session claims).
set -euo pipefail
ROUNDS="${1:-3}"
shift || true
VARIANTS=("${@:-before after}")
read -r -a VARIANTS <<<"${VARIANTS[*]}"
# shellcheck source=bench/sql/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The jobs table as the migrations leave it, for its columns.
BASE="claimloop_base_$$"
migrated "$BASE"

RUNNABLE="CREATE INDEX ON jobs (queue, scheduled_at, id) WHERE state IN ('queued', 'retrying');"
RUNNING="CREATE INDEX ON jobs (lease_expires_at) WHERE state = 'running';"
LANE="CREATE INDEX ON jobs (route, key, version NULLS FIRST, src_offset, id) WHERE state = 'waiting';"
FINISHED="CREATE INDEX ON jobs (state, finished_at) WHERE state IN ('succeeded', 'skipped', 'cancelled', 'expired', 'dead');"
DEADLINE="CREATE INDEX ON jobs (deadline) WHERE deadline IS NOT NULL AND state IN ('queued', 'retrying');"
STATE="CREATE INDEX ON jobs (state, id);"
KEY="CREATE INDEX ON jobs (key, id) WHERE key <> '';"
DEDUPE="CREATE UNIQUE INDEX ON jobs (route, origin, dedupe_key);"
ACTIVE="CREATE INDEX ON jobs (state, id) WHERE state IN ('waiting', 'queued', 'running', 'retrying');"
AFTER="$RUNNABLE $RUNNING $LANE $FINISHED $DEADLINE $ACTIVE"
BEFORE="$RUNNABLE $RUNNING $LANE $FINISHED $DEADLINE $STATE $KEY $DEDUPE"
MOVE="$RUNNABLE $RUNNING $LANE $DEADLINE $ACTIVE"
HOT="CREATE INDEX ON jobs (queue, scheduled_at, id);
CREATE INDEX ON jobs (route, key, version NULLS FIRST, src_offset, id) WHERE lane;
CREATE INDEX ON jobs (deadline) WHERE deadline IS NOT NULL;"
# The claim of gen matches its partial indexes through phase.
GEN="ALTER TABLE jobs ADD COLUMN phase text GENERATED ALWAYS AS (CASE WHEN state IN ('queued', 'retrying', 'running') THEN 'active' ELSE state END) STORED;
CREATE INDEX ON jobs (queue, scheduled_at, id) WHERE phase = 'active';
CREATE INDEX ON jobs (route, key, version NULLS FIRST, src_offset, id) WHERE phase = 'waiting';
CREATE INDEX ON jobs (phase, finished_at) WHERE phase IN ('succeeded', 'skipped', 'cancelled', 'expired', 'dead');
CREATE INDEX ON jobs (deadline) WHERE deadline IS NOT NULL AND phase = 'active';
CREATE INDEX ON jobs (phase, id) WHERE phase IN ('waiting', 'active');"
UPDATE_DONE="UPDATE jobs SET state = 'succeeded', finished_at = now(), lease_expires_at = NULL
    WHERE id = ANY(ids) AND state = 'running';"
BRIN="DROP INDEX history_state_finished_at_idx; CREATE INDEX ON history USING brin (finished_at);"
BATCHES="CREATE TABLE history_batches (ids int8range NOT NULL, finished_at timestamptz NOT NULL, rows jobs[] NOT NULL)
    WITH (autovacuum_enabled = false);
ALTER TABLE history_batches ALTER rows SET COMPRESSION lz4;
CREATE INDEX ON history_batches USING gist (ids);
CREATE INDEX ON history_batches USING brin (finished_at);"
DELETE_DONE="DELETE FROM jobs WHERE id = ANY(ids) AND state = 'running';"
LEASES="CREATE TABLE leases (id bigint PRIMARY KEY, token bigint NOT NULL, expires_at timestamptz NOT NULL)
    WITH (autovacuum_enabled = false);
CREATE INDEX ON leases (expires_at);"
LEASE_CLAIM=", l AS (INSERT INTO leases SELECT id, token, lease_expires_at FROM u)"
LEASE_DONE="DELETE FROM leases WHERE id = ANY(ids);"
# The finished row as the completion writes it, column by column.
FINISHED_ROW="$(psql -At -c "SELECT string_agg(CASE column_name WHEN 'state' THEN quote_literal('succeeded')
  WHEN 'finished_at' THEN 'now()' WHEN 'lease_expires_at' THEN 'NULL' ELSE column_name END, ', ' ORDER BY ordinal_position)
  FROM information_schema.columns WHERE table_schema = '$BASE' AND table_name = 'jobs'")"
MOVE_DONE="WITH d AS (DELETE FROM jobs WHERE id = ANY(ids) AND state = 'running' RETURNING *)
    INSERT INTO history SELECT $FINISHED_ROW FROM d;"

BATCH_DONE="WITH d AS (DELETE FROM jobs WHERE id = ANY(ids) AND state = 'running' RETURNING *)
    INSERT INTO history_batches SELECT int8range(min(id), max(id), '[]'), now(), array_agg(ROW($FINISHED_ROW)::jobs) FROM d;"

run() { # name, index DDL, fillfactor, completion[, claim CTE]
  local s="claimloop_$1_$$" PHASE=true EXTRA="${5:-}"
  [[ $1 == gen* || $1 == leases ]] && PHASE="phase = 'active'"
  psql >/dev/null <<SQL
CREATE SCHEMA $s;
SET search_path = $s;
CREATE SEQUENCE job_token_seq;
CREATE TABLE jobs (LIKE $BASE.jobs INCLUDING DEFAULTS INCLUDING IDENTITY) WITH (autovacuum_enabled = false, fillfactor = $3);
ALTER TABLE jobs ADD PRIMARY KEY (id);
CREATE TABLE history (LIKE $BASE.jobs INCLUDING DEFAULTS) WITH (autovacuum_enabled = false);
ALTER TABLE history ADD PRIMARY KEY (id);
CREATE INDEX ON history (state, finished_at);
$2
INSERT INTO jobs (route, kind, queue, state, key, dedupe_key, payload, max_attempts, src_topic, src_partition, src_offset)
SELECT 'r', 'k', 'q', 'queued', 'k' || (i % 10000), i::text, convert_to(repeat('x', ${PAYLOAD:-100}), 'UTF8'), 8, 't', 0, i
FROM generate_series(1, 100000) i;
VACUUM ANALYZE jobs;
SQL
  psql <<SQL 2>&1 | sed -n 's/^NOTICE:  //p'
SET search_path = $s;
SET synchronous_commit = off;
DO \$\$
DECLARE t0 timestamptz := clock_timestamp(); ids bigint[]; n int := 0;
        last_id bigint := 0; last_at timestamptz := '-infinity';
BEGIN
  LOOP
    WITH c AS (SELECT id FROM jobs WHERE queue = 'q' AND $PHASE AND state IN ('queued', 'retrying') AND scheduled_at <= now()
                 AND (scheduled_at, id) > (last_at, last_id)
               ORDER BY scheduled_at, id LIMIT 100 ${LOCK-FOR UPDATE SKIP LOCKED}),
    u AS (UPDATE jobs j SET state = 'running', attempts = j.attempts + 1, token = nextval('job_token_seq'),
            started_at = now(), lease_expires_at = now() + interval '30 seconds'
          FROM c WHERE j.id = c.id RETURNING j.id, j.scheduled_at, j.token, j.lease_expires_at)$EXTRA
    SELECT array_agg(id), max(scheduled_at), max(id) INTO ids, last_at, last_id FROM u;
    EXIT WHEN ids IS NULL;
    $4
    n := n + array_length(ids, 1);
    COMMIT;
  END LOOP;
  RAISE NOTICE '$1 % jobs/s', round(n / extract(epoch FROM clock_timestamp() - t0));
END \$\$;
SQL
  psql -At -c "SELECT '$1: ' || n_tup_hot_upd || ' of ' || n_tup_upd || ' updates HOT'
    FROM pg_stat_user_tables WHERE schemaname = '$s' AND relname = 'jobs'"
  psql -c "DROP SCHEMA $s CASCADE" >/dev/null 2>&1
}

for ((r = 1; r <= ROUNDS; r++)); do
  for v in "${VARIANTS[@]}"; do
    case "$v" in
      before) run before "$BEFORE" 100 "$UPDATE_DONE" ;;
      after) run after "$AFTER" 100 "$UPDATE_DONE" ;;
      move) run move "$MOVE" 100 "$MOVE_DONE" ;;
      hot) run hot "$HOT" 50 "$MOVE_DONE" ;;
      gen) run gen "$GEN" 50 "$UPDATE_DONE" ;;
      gen100) run gen100 "$GEN" 100 "$UPDATE_DONE" ;;
      movebrin) run movebrin "$MOVE $BRIN" 100 "$MOVE_DONE" ;;
      batch) run batch "$MOVE $BATCHES" 100 "$BATCH_DONE" ;;
      delete) run delete "$AFTER" 100 "$DELETE_DONE" ;;
      nofinished) run nofinished "$RUNNABLE $RUNNING $LANE $DEADLINE $ACTIVE" 100 "$UPDATE_DONE" ;;
      lean) run lean "$RUNNABLE $RUNNING $LANE $DEADLINE" 100 "$UPDATE_DONE" ;;
      noactive) run noactive "$RUNNABLE $RUNNING $LANE $FINISHED $DEADLINE" 100 "$UPDATE_DONE" ;;
      batchlean) run batchlean "$RUNNABLE $RUNNING $LANE $DEADLINE $BATCHES" 100 "$BATCH_DONE" ;;
      deletelean) run deletelean "$RUNNABLE $RUNNING $LANE $DEADLINE" 100 "$DELETE_DONE" ;;
      genrun) run genrun "$GEN $RUNNING" 50 "$UPDATE_DONE" ;;
      leases) run leases "$GEN $LEASES" 50 "$UPDATE_DONE $LEASE_DONE" "$LEASE_CLAIM" ;;
      *) echo "claim_loop.sh: unknown variant $v (before, after, move, movebrin, hot, gen, gen100, genrun, leases, batch, delete, nofinished, noactive, lean, batchlean, deletelean)" >&2; exit 2 ;;
    esac
  done
done
