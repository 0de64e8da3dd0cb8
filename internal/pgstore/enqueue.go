package pgstore

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// JobEnqueue inserts one runnable job (from the admin API or a schedule),
// runnable from runAt (the zero time: now), or finds the job its dedupe key
// already made (I2). It returns the job's id and state and whether this
// call created it; a created job wakes its queue.
func (s *Store) JobEnqueue(ctx context.Context, j NewJob, runAt time.Time) (id int64, state string, created bool, err error) {
	var at *time.Time
	if !runAt.IsZero() {
		at = &runAt
	}
	if j.Payload == nil {
		j.Payload = []byte{} // NOT NULL
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `
			INSERT INTO jobs (route, kind, queue, state, key, dedupe_key, payload, header_keys, header_values,
				max_attempts, deadline, scheduled_at)
			VALUES ($1, $2, $3, 'queued', $4, $5, $6, $7, $8, $9, $10, coalesce($11, now()))
			ON CONFLICT (route, dedupe_key) DO NOTHING
			RETURNING id, state`,
			j.Route, j.Kind, j.Queue, j.Key, j.DedupeKey, j.Payload, nonNil(j.HeaderKeys),
			nonNilBytes(j.HeaderVals), j.MaxAttempts, j.Deadline, at).Scan(&id, &state)
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

// RouteLastDedupeKey is the greatest dedupe key among a route's retained
// jobs ("" when it has none): a schedule's last enqueued slot.
func (s *Store) RouteLastDedupeKey(ctx context.Context, route string) (string, error) {
	var k *string
	err := s.pool.QueryRow(ctx, `SELECT max(dedupe_key COLLATE "C") FROM jobs WHERE route = $1`, route).Scan(&k)
	if k == nil {
		return "", err
	}
	return *k, err
}

// RouteActive reports whether a route has a job that has not finished.
func (s *Store) RouteActive(ctx context.Context, route string) (bool, error) {
	var active bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM jobs
		WHERE route = $1 AND state IN ('waiting', 'queued', 'running', 'retrying'))`, route).Scan(&active)
	return active, err
}
