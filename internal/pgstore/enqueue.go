package pgstore

import (
	"context"
	"fmt"
	"time"

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
// offset). A created job that is runnable wakes its queue. An operator's
// job (by non-empty: the admin API's caller) is audited — a schedule's
// as a trigger of the schedule; a schedule's own slots are not.
func (s *Store) JobEnqueue(ctx context.Context, j NewJob, by string) (Enqueued, error) {
	var e Enqueued
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if e, err = s.jobEnqueue(ctx, tx, j); err != nil || by == "" || !e.Created {
			return err
		}
		if j.Origin == OriginSchedule {
			return audit(ctx, tx, by, AuditTrigger, j.Route, map[string]any{"job_id": e.ID})
		}
		return audit(ctx, tx, by, AuditEnqueue, fmt.Sprintf("job/%d", e.ID), map[string]any{"queue": j.Queue, "kind": j.Kind})
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

// jobEnqueue is JobEnqueue's work in tx, whose search_path is the schema:
// functions.sql's job_enqueue, the one definition that the SQL enqueue()
// shares.
func (s *Store) jobEnqueue(ctx context.Context, tx pgx.Tx, j NewJob) (Enqueued, error) {
	var policy, onDead, gapPolicy *string
	var gapMS *int64
	if l := j.Lane; l != nil {
		ms := l.GapTimeout.Milliseconds()
		policy, onDead, gapPolicy, gapMS = &l.Policy, &l.OnDead, &l.GapPolicy, &ms
	}
	var e Enqueued
	err := tx.QueryRow(ctx, `SELECT * FROM job_enqueue($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,
		$14, $15, $16, $17, $18, $19, $20)`,
		j.origin(), j.Route, j.Kind, j.Queue, j.Key, j.Version, j.DedupeKey, nonNilByte(j.Payload),
		nonNil(j.HeaderKeys), nonNilBytes(j.HeaderVals), j.MaxAttempts, j.Deadline, j.RunAt,
		policy, onDead, gapMS, gapPolicy, j.group(), j.Coalesce, s.Channel()).Scan(&e.ID, &e.State, &e.Created, &e.SamePayload)
	return e, err
}

// JobFind returns the job of a dedupe key in an origin's namespace, or
// ErrNotFound.
func (s *Store) JobFind(ctx context.Context, route, origin, dedupeKey string) (JobRow, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+jobColumns+` FROM jobs_by_id(ARRAY(SELECT job_id FROM job_keys
		WHERE route = $1 AND origin = $2 AND dedupe_key = $3))`, route, origin, dedupeKey)
	if err != nil {
		return JobRow{}, err
	}
	j, err := pgx.CollectExactlyOneRow(rows, scanJob)
	return j, notFound(err)
}

// RouteLastDedupeKey is the greatest slot dedupe key (slot/…) among a
// schedule route's retained jobs ("" when it has none): the schedule's
// last enqueued slot. A trigger's jobs (manual/…) are not slots.
func (s *Store) RouteLastDedupeKey(ctx context.Context, route string) (string, error) {
	var k *string
	err := s.pool.QueryRow(ctx, `SELECT max(dedupe_key COLLATE "C") FROM job_keys
		WHERE route = $1 AND origin = 'schedule' AND dedupe_key LIKE 'slot/%'`, route).Scan(&k)
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

// RouteRow is a route as the SQL function enqueue() takes its settings
// (migration 0016).
type RouteRow struct {
	Queue, Kind, Route string
	MaxAttempts        int
	TTL                time.Duration // 0: none
	Lane               *LanePolicy   // nil: unordered
	OnDead             string
	Limited, Grouped   bool
	Coalesce           bool
	MaxDepth           int
}

// RoutesPublish replaces the routes table with rows: the config of the
// process that publishes last is what enqueue() follows. The first row
// of a (queue, kind) wins, as the enqueue API's route lookup does.
func (s *Store) RoutesPublish(ctx context.Context, rows []RouteRow) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM routes`); err != nil {
			return err
		}
		b := &pgx.Batch{}
		for _, r := range rows {
			var ttl *time.Duration
			if r.TTL > 0 {
				ttl = &r.TTL
			}
			var policy *string
			lane := LanePolicy{OnDead: r.OnDead, GapTimeout: time.Minute, GapPolicy: "park"}
			if r.Lane != nil {
				policy, lane = &r.Lane.Policy, *r.Lane
			}
			b.Queue(`INSERT INTO routes (queue, kind, route, max_attempts, ttl, lane_policy, on_dead, gap_timeout,
				gap_policy, limited, grouped, coalesce, max_depth)
				VALUES ($1, $2, $3, $4, $5 * interval '1 millisecond', $6, $7, $8 * interval '1 millisecond', $9, $10, $11, $12, $13)
				ON CONFLICT (queue, kind) DO NOTHING`,
				r.Queue, r.Kind, r.Route, r.MaxAttempts, durationMS(ttl), policy, lane.OnDead, lane.GapTimeout.Milliseconds(),
				lane.GapPolicy, r.Limited, r.Grouped, r.Coalesce, r.MaxDepth)
		}
		return tx.SendBatch(ctx, b).Close()
	})
}

func durationMS(d *time.Duration) *int64 {
	if d == nil {
		return nil
	}
	ms := d.Milliseconds()
	return &ms
}
