package pgstore

import (
	"context"
	"errors"
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
// job (by.By non-empty: the admin API's caller) is audited — a schedule's
// as a trigger of by.Target; a schedule's own slots are not.
func (s *Store) JobEnqueue(ctx context.Context, j NewJob, by Actor) (Enqueued, error) {
	var e Enqueued
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if e, err = s.jobEnqueue(ctx, tx, j); err != nil || by.By == "" || !e.Created {
			return err
		}
		if j.Origin == OriginSchedule {
			return audit(ctx, tx, by.By, AuditTrigger, by.Target, map[string]any{"job_id": e.ID})
		}
		return audit(ctx, tx, by.By, AuditEnqueue, fmt.Sprintf("job/%d", e.ID), map[string]any{"queue": j.Queue, "kind": j.Kind})
	})
	return e, err
}

// Actor is who made a job by hand, for the audit log: By the operator
// ("" for a job no operator made), Target what a schedule's trigger
// names (schedule/<name>; a job made through the admin API is named by
// its id).
type Actor struct {
	By, Target string
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

// JobFindEnqueued is what JobEnqueue answers for j when its dedupe key
// already made a job, without making one when it did not (ErrNotFound):
// for a caller that may not add a job, such as the enqueue API when the
// queue is full, yet owes a retry its answer.
func (s *Store) JobFindEnqueued(ctx context.Context, j NewJob) (Enqueued, error) {
	var e Enqueued
	err := s.pool.QueryRow(ctx, `SELECT * FROM job_found($1, $2, $3, $4)`,
		j.Route, j.origin(), j.DedupeKey, nonNilByte(j.Payload)).Scan(&e.ID, &e.State, &e.Created, &e.SamePayload)
	return e, notFound(err)
}

// ScheduleKeys names one schedule's jobs (origin schedule): those under
// Route whose dedupe key is a slot's or a trigger's (slot/ or manual/
// and twenty digits) followed by Suffix, and those under Legacy, the
// schedule's own route, with no suffix. A schedule's jobs were stored
// under its own route before they joined the route of their kind, so
// where a schedule left off is read from both.
type ScheduleKeys struct {
	Route, Suffix, Legacy string
}

// scheduleJobsSQL is the test of ScheduleKeys ($1, $2, $3) on the job_keys
// row aliased k. The suffix is what follows the key's twenty digits, so
// a schedule whose name extends another's never matches it.
const scheduleJobsSQL = `k.origin = 'schedule' AND k.dedupe_key ~ '^(slot|manual)/[0-9]{20}'
	AND ((k.route = $1 AND substr(k.dedupe_key, strpos(k.dedupe_key, '/') + 21) = $2)
		OR (k.route = $3 AND substr(k.dedupe_key, strpos(k.dedupe_key, '/') + 21) = ''))`

// ScheduleLastSlot is the greatest slot (slot/ and twenty digits, without
// the suffix) among a schedule's retained jobs, and that job's id: where
// the schedule left off ("" when it has none). A trigger's jobs
// (manual/…) are not slots.
func (s *Store) ScheduleLastSlot(ctx context.Context, k ScheduleKeys) (string, int64, error) {
	var slot string
	var id int64
	err := s.pool.QueryRow(ctx, `SELECT left(k.dedupe_key, 25), k.job_id FROM job_keys k
		WHERE `+scheduleJobsSQL+` AND k.dedupe_key LIKE 'slot/%'
		ORDER BY left(k.dedupe_key, 25) COLLATE "C" DESC LIMIT 1`, k.Route, k.Suffix, k.Legacy).Scan(&slot, &id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, nil
	}
	return slot, id, err
}

// ScheduleActive reports whether a schedule has a job that has not
// finished.
func (s *Store) ScheduleActive(ctx context.Context, k ScheduleKeys) (bool, error) {
	var active bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM job_keys k JOIN jobs j ON j.id = k.job_id
		WHERE `+scheduleJobsSQL+` AND j.state IN ('waiting', 'queued', 'running', 'retrying'))`,
		k.Route, k.Suffix, k.Legacy).Scan(&active)
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
