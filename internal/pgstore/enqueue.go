package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/jobstate"
)

// Enqueued is what JobEnqueue did.
type Enqueued struct {
	ID    int64
	State jobstate.State
	// Created says this call made the job; false means an earlier call
	// with the same dedupe key did (I2).
	Created bool
	// SamePayload, for a job that existed already, says whether its
	// payload is the one this call brought: a key reused for a different
	// request is the caller's mistake, not a retry.
	SamePayload bool
}

// JobEnqueue inserts one job that did not come from Kafka (the admin API
// or a schedule), runnable from j.RunAt (nil: now), or finds the
// job its dedupe key already made in its origin's namespace (I2). A job
// of an ordered route (j.Lane set) joins its key's lane in the same
// transaction, promoted if the lane is idle: it takes its place by
// version, after the lane's Kafka records of the same version (it has no
// offset). A created job that is runnable wakes its queue.
func (s *Store) JobEnqueue(ctx context.Context, j NewJob) (Enqueued, error) {
	var e Enqueued
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		e, err = s.jobEnqueue(ctx, tx, j)
		return err
	})
	return e, err
}

// JobEnqueueTx is JobEnqueue in the caller's transaction, on a connection
// of the caller's pool: the job exists if and only if tx commits, and its
// queue is woken at the commit (NOTIFY is transactional). The schema is
// made the transaction's search_path for the statements of the enqueue
// only, then set back as it was.
func (s *Store) JobEnqueueTx(ctx context.Context, tx pgx.Tx, j NewJob) (Enqueued, error) {
	var was string
	if err := tx.QueryRow(ctx, `SELECT current_setting('search_path'), set_config('search_path', $1, true)`,
		pgx.Identifier{s.schema}.Sanitize()).Scan(&was, new(string)); err != nil {
		return Enqueued{}, err
	}
	e, err := s.jobEnqueue(ctx, tx, j)
	if err != nil {
		return e, err // the transaction is aborted: its search_path no longer matters
	}
	_, err = tx.Exec(ctx, `SELECT set_config('search_path', $1, true)`, was)
	return e, err
}

// jobEnqueue is JobEnqueue's work in tx, whose search_path is the schema.
func (s *Store) jobEnqueue(ctx context.Context, tx pgx.Tx, j NewJob) (Enqueued, error) {
	state := jobstate.Queued
	if j.Lane != nil {
		state = jobstate.Waiting
	}
	var e Enqueued
	err := func() error {
		err := tx.QueryRow(ctx, `
			WITH k AS (
				INSERT INTO job_keys (job_id, route, origin, dedupe_key, key)
				VALUES (nextval('jobs_id_seq'), $2, $1, $8, $6)
				ON CONFLICT (route, origin, dedupe_key) DO NOTHING
				RETURNING job_id
			)
			INSERT INTO jobs (id, origin, route, kind, queue, state, key, version, dedupe_key, payload,
				header_keys, header_values, max_attempts, deadline, scheduled_at, lane, grp)
			SELECT k.job_id, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, coalesce($14, now()), $15, $16 FROM k
			RETURNING id`,
			j.origin(), j.Route, j.Kind, j.Queue, state, j.Key, j.Version, j.DedupeKey, nonNilByte(j.Payload),
			nonNil(j.HeaderKeys), nonNilBytes(j.HeaderVals), j.MaxAttempts, j.Deadline, j.RunAt, j.Lane != nil, j.group()).Scan(&e.ID)
		if errors.Is(err, pgx.ErrNoRows) {
			// The conflict waited for the row's transaction to end, so a
			// new statement sees it.
			return tx.QueryRow(ctx, `SELECT j.id, j.state, j.payload = $4 FROM job_keys k JOIN jobs j ON j.id = k.job_id
				WHERE k.route = $1 AND k.origin = $2 AND k.dedupe_key = $3`,
				j.Route, j.origin(), j.DedupeKey, nonNilByte(j.Payload)).Scan(&e.ID, &e.State, &e.SamePayload)
		}
		if err != nil {
			return err
		}
		e.Created, e.SamePayload, e.State = true, true, state
		if j.Lane != nil {
			jobs := []NewJob{j}
			if err := upsertLanes(ctx, tx, jobs); err != nil {
				return err
			}
			if err := promoteLanes(ctx, tx, jobs); err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, `SELECT state FROM jobs WHERE id = $1`, e.ID).Scan(&e.State); err != nil {
				return err
			}
		}
		if _, err := coalesceJobs(ctx, tx, []NewJob{j}); err != nil {
			return err
		}
		if e.State != jobstate.Queued {
			return nil
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, s.Channel(), j.Queue)
		return err
	}()
	return e, err
}

// JobFind returns the job of a dedupe key in an origin's namespace, or
// ErrNotFound.
func (s *Store) JobFind(ctx context.Context, route, origin, dedupeKey string) (JobRow, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = (SELECT job_id FROM job_keys
		WHERE route = $1 AND origin = $2 AND dedupe_key = $3)`, route, origin, dedupeKey)
	if err != nil {
		return JobRow{}, err
	}
	j, err := pgx.CollectExactlyOneRow(rows, scanJob)
	return j, notFound(err)
}

// RouteLastDedupeKey is the greatest dedupe key among a schedule route's
// retained jobs ("" when it has none): the schedule's last enqueued slot.
func (s *Store) RouteLastDedupeKey(ctx context.Context, route string) (string, error) {
	var k *string
	err := s.pool.QueryRow(ctx, `SELECT max(dedupe_key COLLATE "C") FROM job_keys
		WHERE route = $1 AND origin = 'schedule'`, route).Scan(&k)
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
