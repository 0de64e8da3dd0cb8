package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

// The statements below are the benchmark's own: resetting its schema,
// loading rows in bulk and asking about the server. The engine never runs
// them, which is why they are here and not in pgstore. They run on the
// bench store, whose search_path is the bench schema.

// reset empties every table of the bench schema except the records of
// what migrate applied, whatever tables later migrations add (lanes, ...),
// then checkpoints where the role may, so that each figure starts a
// checkpoint cycle of its own.
//
// Why the checkpoint: a figure's load and burn-down write about 370 MB of
// WAL (200,000 work jobs), so with max_wal_size at its default (1 GB) a
// checkpoint starts every few figures, and without this one where it
// fell depended on which figures ran before (a full run, `--only
// ordered`, the peers' harness). Once one starts, the next change of each
// page writes the whole page to the WAL first. Starting each figure at a
// checkpoint makes it pay for its own WAL only, as bench/peers does for
// each system. The spread of `bench --only work` did not move with it
// (2026-12-06, eight runs mirrored against the build without it): what
// spread the figures was the clock (burnDown), and after that the
// machine.
func (e *env) reset(ctx context.Context) error {
	var tables string
	err := e.store.Pool().QueryRow(ctx, `
		SELECT coalesce(string_agg(quote_ident(tablename), ', '), '') FROM pg_tables
		WHERE schemaname = current_schema() AND tablename NOT IN ('schema_migrations', 'schema_functions', 'attempt_key')`).Scan(&tables)
	if err != nil {
		return err
	}
	if tables != "" {
		// The names come from the catalog and are quoted by quote_ident.
		if _, err := e.store.Pool().Exec(ctx, `TRUNCATE `+tables+` RESTART IDENTITY CASCADE`); err != nil {
			return err
		}
	}
	return e.checkpoint(ctx)
}

// copyColumns are the jobs columns ingest writes, after the id.
var copyColumns = []string{"id", "route", "kind", "queue", "state", "key", "version", "dedupe_key",
	"payload", "header_keys", "header_values", "max_attempts", "deadline",
	"src_topic", "src_partition", "src_offset"}

// keyColumns are the job_keys columns ingest writes.
var keyColumns = []string{"job_id", "route", "origin", "dedupe_key", "key"}

// copyRows turns job rows into the COPY rows of jobs and of job_keys,
// with ids 1..n (the tables are emptied first), prepared before the clock
// starts.
func copyRows(jobs []pgstore.NewJob) (jobRows, keyRows [][]any) {
	jobRows, keyRows = make([][]any, len(jobs)), make([][]any, len(jobs))
	for i, j := range jobs {
		id := int64(i + 1)
		jobRows[i] = []any{id, j.Route, j.Kind, j.Queue, "queued", j.Key, j.Version, j.DedupeKey,
			j.Payload, j.HeaderKeys, j.HeaderVals, j.MaxAttempts, j.Deadline,
			j.Topic, j.Partition, j.Offset}
		keyRows[i] = []any{id, j.Route, "kafka", j.DedupeKey, j.Key}
	}
	return jobRows, keyRows
}

// copyJobs loads the rows ingest writes — jobs and their job_keys — with
// one plain COPY into each, in one transaction: no staging, no dedupe
// check, no offsets. It is the ceiling ingest is compared with.
func (e *env) copyJobs(ctx context.Context, jobRows, keyRows [][]any) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, e.store.Pool(), func(tx pgx.Tx) error {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"job_keys"}, keyColumns, pgx.CopyFromRows(keyRows)); err != nil {
			return err
		}
		var err error
		n, err = tx.CopyFrom(ctx, pgx.Identifier{"jobs"}, copyColumns, pgx.CopyFromRows(jobRows))
		return err
	})
	return n, err
}

// insertHistory adds n succeeded jobs to queue in chunks of 500,000 rows,
// one transaction each, with the same route, key spread and payload size
// as live jobs so that every index of jobs grows as it would in
// production. (Their job_keys rows are left out: no claim reads them.)
func (e *env) insertHistory(ctx context.Context, route string, n int, payload []byte, progress func(done int)) error {
	const chunk = 500_000
	for from := 0; from < n; from += chunk {
		to := min(from+chunk, n)
		_, err := e.store.Pool().Exec(ctx, `
			INSERT INTO jobs (route, kind, queue, state, key, dedupe_key, payload, attempts, max_attempts,
				token, created_at, scheduled_at, started_at, finished_at, src_topic, src_partition, src_offset)
			SELECT $1, 'bench.history', $2, 'succeeded', 'k' || (g % $3), 'history-' || g, $4, 1, 8,
				g, now(), now(), now(), now(), $1, 0, g
			FROM generate_series($5::bigint, $6::bigint - 1) g`,
			route, queue, e.cfg.Keys, payload, from, to)
		if err != nil {
			return fmt.Errorf("insert history rows %d..%d: %w", from, to, err)
		}
		progress(to)
	}
	return nil
}

// statements counts, from the rows themselves, how many transactions
// wrote the jobs table: every statement stamps its rows with one now()
// (its transaction's start), so distinct created_at values are ingest
// transactions, distinct finished_at completions, and distinct started_at
// claims — except where a job started in a completion transaction (a
// lane's next job handed off, started_at = its predecessor's
// finished_at; only lane jobs are). It tells what batch sizes the engine
// achieved. It reads all_jobs: the succeeded jobs are in job_history.
func (e *env) statements(ctx context.Context) (txs txCounts, err error) {
	err = e.store.Pool().QueryRow(ctx, `
		WITH c AS (SELECT DISTINCT finished_at AS at FROM all_jobs WHERE finished_at IS NOT NULL)
		SELECT count(*), count(DISTINCT j.created_at), count(DISTINCT j.started_at) FILTER (WHERE c.at IS NULL),
			count(*) FILTER (WHERE c.at IS NOT NULL AND j.lane), (SELECT count(*) FROM c)
		FROM all_jobs j LEFT JOIN c ON c.at = j.started_at`).
		Scan(&txs.jobs, &txs.inserts, &txs.claims, &txs.handedOff, &txs.completions)
	return
}

// txCounts is what statements counts.
type txCounts struct {
	jobs, inserts, claims, handedOff, completions int64
}

// settle brings the jobs and lanes tables to the state a running
// deployment keeps them in before a measurement: VACUUM (ANALYZE), as
// autovacuum would (dead index entries of claimed rows gone, visibility
// map and statistics current), then a CHECKPOINT where the role may
// (pg_checkpoint, which deploy/local grants). Both claim latency tables
// start from it, and so does every scale point.
//
// Why the checkpoint: a point that bulk-loads a million rows writes in
// seconds the WAL of hours of a deployment, and the checkpoint that WAL
// starts ran under the point's claims, each of which waits for its own
// WAL flush. With 1M future jobs the claim p99 was 1.9-2.1 × the empty
// table's round by round, and 0.87-1.27 × with max_wal_size raised so
// that no checkpoint ran (bench --scale --only future, two rounds each).
func (e *env) settle(ctx context.Context) error {
	if _, err := e.store.Pool().Exec(ctx, `VACUUM (ANALYZE) jobs, lanes`); err != nil {
		return err
	}
	return e.checkpoint(ctx)
}

// checkpoint runs a CHECKPOINT where the bench's role may, and nothing
// where it may not (the header line says which).
func (e *env) checkpoint(ctx context.Context) error {
	may, err := e.mayCheckpoint(ctx)
	if err != nil || !may {
		return err
	}
	_, err = e.store.Pool().Exec(ctx, `CHECKPOINT`)
	return err
}

// mayCheckpoint reports whether the bench's role may run CHECKPOINT.
func (e *env) mayCheckpoint(ctx context.Context) (bool, error) {
	var may bool
	err := e.store.Pool().QueryRow(ctx, `SELECT pg_has_role('pg_checkpoint', 'MEMBER')
		OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)`).Scan(&may)
	return may, err
}

// analyze refreshes the planner statistics of the bench schema's tables.
func (e *env) analyze(ctx context.Context) error {
	_, err := e.store.Pool().Exec(ctx, `ANALYZE jobs, lanes`)
	return err
}

// lanesAvailable reports whether the schema has per-key lanes (a `lanes`
// table from a migration), which ordered routes need.
func (e *env) lanesAvailable(ctx context.Context) (bool, error) {
	var ok bool
	err := e.store.Pool().QueryRow(ctx, `SELECT to_regclass('lanes') IS NOT NULL`).Scan(&ok)
	return ok, err
}

// serverInfo describes the Postgres server for the context lines.
func (e *env) serverInfo(ctx context.Context) (string, error) {
	var version, fsync, commit, buffers string
	err := e.store.Pool().QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('fsync'),
		current_setting('synchronous_commit'), current_setting('shared_buffers')`).Scan(&version, &fsync, &commit, &buffers)
	if err != nil {
		return "", err
	}
	settle := "CHECKPOINT before each figure's load and after each settle"
	if may, err := e.mayCheckpoint(ctx); err != nil {
		return "", err
	} else if !may {
		settle = "no CHECKPOINT between figures: the role is not in pg_checkpoint, and a figure may run through the checkpoint of the WAL before it"
	}
	return fmt.Sprintf("postgres %s fsync=%s synchronous_commit=%s shared_buffers=%s; %s", version, fsync, commit, buffers, settle), nil
}

// insertLanes adds n idle lanes (no head, no waiting jobs) of route with
// keys k0..k<n-1>, as a long history of keys leaves the lanes table: lanes
// of versioned keys, each with its last applied version, which are kept
// (an idle lane without versions is pruned: pgstore.LanePrune). The
// burn-down's own keys take the route's policy when their jobs arrive.
func (e *env) insertLanes(ctx context.Context, route string, n int) error {
	_, err := e.store.Pool().Exec(ctx, `
		INSERT INTO lanes (route, key, policy, last_version)
		SELECT $1, 'k' || g, 'newer', 1 FROM generate_series(0, $2::bigint - 1) g`, route, n)
	return err
}

// insertFuture adds n queued jobs of route to the bench queue, scheduled
// a day ahead: runnable-index entries every claim of the queue passes
// over. The route is the future jobs' own, so that they count in no
// burn-down. (Their job_keys rows are left out: no claim reads them.)
func (e *env) insertFuture(ctx context.Context, route string, n int, payload []byte) error {
	_, err := e.store.Pool().Exec(ctx, `
		INSERT INTO jobs (route, kind, queue, state, key, dedupe_key, payload, max_attempts, scheduled_at)
		SELECT $1, 'bench.future', $2, 'queued', 'k' || (g % $3), 'future-' || g, $4, 8,
			now() + interval '1 day' + g * interval '1 millisecond'
		FROM generate_series(0, $5::bigint - 1) g`,
		route, queue, e.cfg.Keys, payload, n)
	return err
}

// unfinished counts the jobs of routes that have not finished.
func (e *env) unfinished(ctx context.Context, routes []string) (int64, error) {
	var n int64
	err := e.store.Pool().QueryRow(ctx, `
		SELECT count(*) FROM jobs WHERE route = ANY($1) AND finished_at IS NULL`,
		routes).Scan(&n)
	return n, err
}

// dbNow is the database clock, which stamps finished_at.
func (e *env) dbNow(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := e.store.Pool().QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now)
	return now, err
}

// steadyRate is how many jobs of routes finished after since, and their
// rate between the 10th and 90th percentile of finished_at: the steady
// middle of a burn-down, without its start-up and tail.
func (e *env) steadyRate(ctx context.Context, routes []string, since time.Time) (int64, float64, error) {
	var n int64
	var from, to *time.Time
	err := e.store.Pool().QueryRow(ctx, `
		SELECT count(*), percentile_disc(0.1) WITHIN GROUP (ORDER BY finished_at),
			percentile_disc(0.9) WITHIN GROUP (ORDER BY finished_at)
		FROM all_jobs WHERE route = ANY($1) AND finished_at > $2`, routes, since).Scan(&n, &from, &to)
	if err != nil {
		return 0, 0, err
	}
	if from == nil || !to.After(*from) {
		return n, 0, fmt.Errorf("%d jobs finished in too few completions to time: raise --point-jobs", n)
	}
	return n, 0.8 * float64(n) / to.Sub(*from).Seconds(), nil
}
