package pgstore

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/internal/bulk"
	"github.com/switchyard-dev/switchyard/jobstate"
)

// JobCancelMatching cancels, for by, every unfinished job that f matches
// (its State, if set, one of the unfinished states; its After and Limit
// are the action's own), each as JobCancel does: the jobs that existed
// when it started, never one made since (package bulk). A job that
// finishes on its own before the cancel reaches it is a failure, named.
func (s *Store) JobCancelMatching(ctx context.Context, f JobFilter, by string, opt bulk.Options) (bulk.Result, error) {
	var last int64
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM jobs`).Scan(&last); err != nil {
		return bulk.Result{}, err
	}
	from, args := unfinishedSQL(f, last)
	pages := func(from string) func(context.Context, int64, int) ([]int64, error) {
		return func(ctx context.Context, after int64, limit int) ([]int64, error) {
			rows, err := s.pool.Query(ctx, fmt.Sprintf(`SELECT j.id %s AND j.id > $%d ORDER BY j.id LIMIT $%d`,
				from, len(args)+1, len(args)+2), append(args, after, limit)...)
			if err != nil {
				return nil, err
			}
			return pgx.CollectRows(rows, pgx.RowTo[int64])
		}
	}
	src := bulk.Source{
		Count: func(ctx context.Context) (n int64, err error) {
			err = s.pool.QueryRow(ctx, `SELECT count(*) `+from, args...).Scan(&n)
			return n, err
		},
		// The waiting jobs first: cancelled after their lane's head, each
		// would first be promoted by the head's cancel (and perhaps start
		// running), then be cancelled alone as its lane's head.
		First: pages(from + ` AND j.state = 'waiting'`),
		Page:  pages(from),
	}
	return bulk.Run(ctx, src, opt, bulk.Jobs, "cancelled", bulk.Chunk, s.cancelAct(by))
}

// cancelAct is a bulk cancel's act for by: a chunk's jobs of no lane in
// one transaction (jobsCancel), then its lanes' jobs each alone.
func (s *Store) cancelAct(by string) bulk.Act {
	return bulk.Chunked(
		func(ctx context.Context, ids []int64) ([]bulk.Failure, []int64, error) {
			failed, lanes, err := s.jobsCancel(ctx, ids, by)
			return bulk.FailuresOf(failed), lanes, err
		},
		func(ctx context.Context, id int64) error { return s.JobCancel(ctx, id, by) })
}

// jobsCancel cancels in one transaction the jobs among ids that have not
// finished, and returns why it could not cancel the others: the job's
// own answer if it finished ("job 5 has finished already (dead)", an
// ErrConflict), ErrNotFound if there is no such job. Its one definition
// of a cancel is JobCancel's, of one job. Of several, it leaves the jobs
// of lanes that it could not take (lanes) for JobCancel to cancel each
// alone: heads, and waiting jobs that another transaction held.
//
// Why a lane's head alone: cancelling it advances its lane in the same
// transaction, which locks the lane; ingest locks a lane and then
// promotes its next job. A transaction holding several jobs' locks while
// it waits for a lane could hold the very job that an ingest holding
// that lane waits for, and one of them would end in a deadlock. A lane's
// waiting jobs take no lane's lock, but a completion batch holds its
// running jobs and then, with their lanes, promotes the next waiting
// ones, so a transaction holding a waiting job and waiting for a running
// one in that batch would deadlock with it. So they are taken last, by a
// statement of their own that waits for no row (lanesWaitingCancelSQL),
// after the jobs of no lane: those take no lane's lock, are promoted by
// no one, and are locked in id order, as every batch that locks jobs
// locks them (splitLeases).
func (s *Store) jobsCancel(ctx context.Context, ids []int64, by string) (failed map[int64]error, lanes []int64, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		failed, lanes = map[int64]error{}, nil
		var running []int64
		var id int64
		var state *jobstate.State
		var lane bool
		// Those with no row are gone from jobs since the page was read
		// (moved to job_history as succeeded, or pruned): read in a
		// statement of its own, whose snapshot is taken after the locks,
		// as JobCancel does.
		gone, err := chunkStatement(ctx, tx, jobsCancelSQL, ids, by, []any{&id, &state, &lane}, func() {
			switch {
			case lane:
				lanes = append(lanes, id)
			case state.IsFinal():
				failed[id] = finishedError{id, *state}
			case *state == jobstate.Running:
				running = append(running, id)
			}
		})
		if err != nil {
			return err
		}
		if len(gone) > 0 {
			finished := map[int64]jobstate.State{}
			rows, err := tx.Query(ctx, `SELECT id, state FROM jobs_by_id($1)`, gone)
			if err != nil {
				return err
			}
			var st jobstate.State
			if _, err := pgx.ForEachRow(rows, []any{&id, &st}, func() error { finished[id] = st; return nil }); err != nil {
				return err
			}
			for _, id := range gone {
				failed[id] = ErrNotFound
				if st, ok := finished[id]; ok {
					failed[id] = finishedError{id, st}
				}
			}
		}
		if len(lanes) > 0 {
			rows, err := tx.Query(ctx, lanesWaitingCancelSQL, lanes, by)
			if err != nil {
				return err
			}
			done, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (int64, error) {
				var id int64
				return id, r.Scan(&id, nil, nil)
			})
			if err != nil {
				return err
			}
			lanes = slices.DeleteFunc(lanes, func(id int64) bool { return slices.Contains(done, id) })
		}
		if len(running) > 0 {
			// Sent on commit: the processes that run them cancel the
			// attempts at once, not at their next heartbeat (which still
			// catches a missed one).
			_, err := tx.Exec(ctx, `SELECT pg_notify($1, id::text) FROM unnest($2::bigint[]) AS id`, s.CancelChannel(), running)
			return err
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return failed, lanes, nil
}

// chunkStatement runs a bulk action's statement for a chunk, sql with the
// chunk's ids ($1) and actor ($2), in tx after planSQL (so that it reads
// by primary key whatever the statistics say); it scans each row into
// dest, whose first target is the row's item id, calls row, and returns
// the ids that had no row. Its statement audits what it does, for by.
func chunkStatement(ctx context.Context, tx pgx.Tx, sql string, ids []int64, by string, dest []any, row func()) ([]int64, error) {
	if by == "" {
		return nil, errNoActor
	}
	if _, err := tx.Exec(ctx, planSQL); err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, sql, ids, by)
	if err != nil {
		return nil, err
	}
	seen := make(map[int64]bool, len(ids))
	if _, err := pgx.ForEachRow(rows, dest, func() error {
		seen[*dest[0].(*int64)] = true
		row()
		return nil
	}); err != nil {
		return nil, err
	}
	var missing []int64
	for _, id := range ids {
		if !seen[id] {
			missing = append(missing, id)
		}
	}
	return missing, nil
}

// cancelSQL is a cancel, for $2, of the jobs that old chooses among $1
// (their id and state, locked): each that has not finished is cancelled
// (its running attempt counted, each audited), and old's rows are the
// statement's: its state before (the state it has, if final), and false.
func cancelSQL(old string) string {
	return `
	WITH old AS (` + old + `
	), upd AS (
		UPDATE jobs j SET state = 'cancelled', finished_at = now(), lease_expires_at = NULL
		FROM old WHERE j.id = old.id AND old.state IN ('waiting', 'queued', 'running', 'retrying')
		RETURNING j.id, j.kind, old.state
	), tally AS (
		INSERT INTO outcome_tally (kind, outcome, n)
		SELECT kind, 'cancelled', count(*) FROM upd WHERE state = 'running' GROUP BY kind
	), logged AS (
		` + auditRowsSQL(AuditCancel, `'job/' || id`, `jsonb_build_object('was', state)`, "upd") + `
	)
	SELECT id, state, false FROM old`
}

// jobsCancelSQL is a cancel of jobs $1, for $2: those of no lane (and a
// lane's job alone) locked in id order, then a row for each (cancelSQL),
// and for a lane's job among several no state, untouched. A job that is
// not in jobs has no row.
var jobsCancelSQL = cancelSQL(`
		SELECT id, state FROM jobs
		WHERE id = ANY($1::bigint[]) AND (NOT lane OR cardinality($1::bigint[]) = 1)
		ORDER BY id FOR UPDATE`) + `
	UNION ALL
	SELECT id, NULL, true FROM jobs WHERE id = ANY($1::bigint[]) AND lane AND cardinality($1::bigint[]) > 1`

// lanesWaitingCancelSQL is a cancel of the lanes' waiting jobs among $1,
// for $2, that no one holds (cancelSQL). A waiting job is never its
// lane's head (a head is promoted out of waiting), so its cancel moves
// no lane and takes no lane's lock; and taking no row that another
// transaction holds, the statement waits for no one while it holds
// jobs: it cannot be part of a deadlock.
var lanesWaitingCancelSQL = cancelSQL(`
		SELECT id, state FROM jobs
		WHERE id = ANY($1::bigint[]) AND lane AND state = 'waiting'
		ORDER BY id FOR UPDATE SKIP LOCKED`)

// JobCountUnfinished counts the unfinished jobs that f matches: what
// JobCancelMatching would cancel now.
func (s *Store) JobCountUnfinished(ctx context.Context, f JobFilter) (n int64, err error) {
	from, args := unfinishedSQL(f, math.MaxInt64)
	err = s.pool.QueryRow(ctx, `SELECT count(*) `+from, args...).Scan(&n)
	return n, err
}

// unfinishedSQL is the FROM and WHERE of the unfinished jobs that f
// matches, up to id through, and its parameters. The states are
// spelled out, so that the count reads jobs_active_idx, whose predicate
// they are. A page reads the primary key on from the last id, filtering,
// so that all pages together read the table once (EXPLAIN ANALYZE with
// generic plans, 1M jobs of which one in 200 queued: the count 10 ms, a
// page of 500 18 ms). By key, job_keys' index finds the jobs.
func unfinishedSQL(f JobFilter, through int64) (string, []any) {
	sql := `FROM jobs j WHERE j.state IN ('waiting', 'queued', 'running', 'retrying')
		AND ($1::text IS NULL OR j.state = $1) AND ($2::text IS NULL OR j.queue = $2) AND ($3::text IS NULL OR j.route = $3)
		AND j.id <= $4`
	args := []any{nullable(string(f.State)), nullable(f.Queue), nullable(f.Route), through}
	if f.Key != "" {
		sql += ` AND j.id IN (SELECT job_id FROM job_keys WHERE key = $5)`
		args = append(args, f.Key)
	}
	return sql, args
}
