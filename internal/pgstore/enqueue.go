package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// JobEnqueue inserts one runnable job from the admin API, or finds the job
// its dedupe key already made (I2). It returns the job's id and state and
// whether this call created it; a created job wakes its queue.
func (s *Store) JobEnqueue(ctx context.Context, j NewJob) (id int64, state string, created bool, err error) {
	if j.Payload == nil {
		j.Payload = []byte{} // NOT NULL
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `
			INSERT INTO jobs (route, kind, queue, state, key, dedupe_key, payload, header_keys, header_values,
				max_attempts, deadline)
			VALUES ($1, $2, $3, 'queued', $4, $5, $6, $7, $8, $9, $10)
			ON CONFLICT (route, dedupe_key) DO NOTHING
			RETURNING id, state`,
			j.Route, j.Kind, j.Queue, j.Key, j.DedupeKey, j.Payload, nonNil(j.HeaderKeys),
			nonNilBytes(j.HeaderVals), j.MaxAttempts, j.Deadline).Scan(&id, &state)
		if errors.Is(err, pgx.ErrNoRows) {
			// The conflict waited for the row's transaction to end, so a
			// new statement sees it.
			return tx.QueryRow(ctx, `SELECT id, state FROM jobs WHERE route = $1 AND dedupe_key = $2`,
				j.Route, j.DedupeKey).Scan(&id, &state)
		}
		if err != nil {
			return err
		}
		created = true
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, s.Channel(), j.Queue)
		return err
	})
	return id, state, created, err
}

// QueueFull reports whether a queue holds at least limit runnable jobs,
// counting no further than limit.
func (s *Store) QueueFull(ctx context.Context, queue string, limit int) (bool, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM (
		SELECT 1 FROM jobs WHERE queue = $1 AND state IN ('queued', 'retrying') LIMIT $2) x`, queue, limit).Scan(&n)
	return n >= limit, err
}
