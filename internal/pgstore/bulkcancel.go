package pgstore

import (
	"context"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/internal/bulk"
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
	src := bulk.Source{
		Count: func(ctx context.Context) (n int64, err error) {
			err = s.pool.QueryRow(ctx, `SELECT count(*) `+from, args...).Scan(&n)
			return n, err
		},
		Page: func(ctx context.Context, after int64, limit int) ([]int64, error) {
			rows, err := s.pool.Query(ctx, fmt.Sprintf(`SELECT j.id %s AND j.id > $%d ORDER BY j.id LIMIT $%d`,
				from, len(args)+1, len(args)+2), append(args, after, limit)...)
			if err != nil {
				return nil, err
			}
			return pgx.CollectRows(rows, pgx.RowTo[int64])
		},
	}
	return bulk.Run(ctx, src, opt, bulk.Jobs, "cancelled", func(ctx context.Context, id int64) error {
		return s.JobCancel(ctx, id, by)
	})
}

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
