#!/usr/bin/env bash
# What retention's delete of finished jobs costs beside a large DLQ:
# deleting a job runs the action of dlq_entries' reference to it (ON DELETE
# SET NULL), once per job. Times the delete of 1,000 succeeded jobs beside
# N parked poison records, with the migrations' indexes and without
# dlq_entries_job_ref_idx (migration 0027), in a transaction rolled back.
#
# Usage: bench/sql/prune_dlq.sh [dlq entries, default 200000]
#   with SWITCHYARD_DATABASE_URL set (source deploy/local/env.sh).
set -euo pipefail
N="${1:-200000}"
# shellcheck source=bench/sql/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

S="prunedlq_$$"
migrated "$S"

psql <<SQL
SET search_path = $S;
INSERT INTO dlq_entries (reason, route, queue, payload, src_topic, src_partition, src_offset)
SELECT 'poison', 'r', 'q', '\x00', 't', 0, i FROM generate_series(1, $N) i;
INSERT INTO jobs (id, route, kind, queue, state, dedupe_key, payload, max_attempts, src_topic, src_partition, src_offset, finished_at)
SELECT i, 'r', 'k', 'q', 'succeeded', i::text, '\x00', 8, 't', 1, i, now() - interval '30 days' FROM generate_series(1, 1000) i;
ANALYZE jobs; ANALYZE dlq_entries;
SQL
delete_ms() {
  psql -At <<SQL | tail -1
SET search_path = $S;
BEGIN;
SELECT clock_timestamp() AS t0 \gset
DELETE FROM jobs WHERE state = 'succeeded';
SELECT round(extract(epoch FROM clock_timestamp() - :'t0') * 1000, 1);
ROLLBACK;
SQL
}
echo "with dlq_entries_job_ref_idx: $(delete_ms) ms to delete 1000 jobs beside $N DLQ entries"
psql -c "DROP INDEX $S.dlq_entries_job_ref_idx"
echo "without it:                   $(delete_ms) ms"
