package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// PauseKind is what a pause holds back: a queue's claims or a route's
// fetching.
type PauseKind string

const (
	PauseQueue    PauseKind = "queue"
	PauseRoute    PauseKind = "route"
	PauseSchedule PauseKind = "schedule" // its slots pass without jobs
)

// Pause records that kind name is paused, and reports whether it was not
// already. Durable: it holds for every process, across restarts, until
// Resume.
func (s *Store) Pause(ctx context.Context, kind PauseKind, name, by string) (bool, error) {
	return s.setPause(ctx, AuditPause, `INSERT INTO paused (kind, name) VALUES ($1, $2) ON CONFLICT DO NOTHING`, kind, name, by)
}

// Resume removes a pause, and reports whether there was one.
func (s *Store) Resume(ctx context.Context, kind PauseKind, name, by string) (bool, error) {
	return s.setPause(ctx, AuditResume, `DELETE FROM paused WHERE kind = $1 AND name = $2`, kind, name, by)
}

// setPause runs a pause's or resume's statement and audits it, changed
// or not: the operator asked, and the log says whether it did anything.
func (s *Store) setPause(ctx context.Context, action, sql string, kind PauseKind, name, by string) (bool, error) {
	var changed bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, sql, kind, name)
		if err != nil {
			return err
		}
		changed = tag.RowsAffected() == 1
		return audit(ctx, tx, by, action, string(kind)+"/"+name, map[string]any{"changed": changed})
	})
	return changed, err
}

// Pauses returns every pause: kind → name → since when.
func (s *Store) Pauses(ctx context.Context) (map[PauseKind]map[string]time.Time, error) {
	rows, err := s.pool.Query(ctx, `SELECT kind, name, paused_at FROM paused`)
	if err != nil {
		return nil, err
	}
	out := map[PauseKind]map[string]time.Time{PauseQueue: {}, PauseRoute: {}, PauseSchedule: {}}
	var kind PauseKind
	var name string
	var at time.Time
	_, err = pgx.ForEachRow(rows, []any{&kind, &name, &at}, func() error {
		out[kind][name] = at
		return nil
	})
	return out, err
}

// QueueDepth counts a queue's unstarted jobs (waiting, queued, retrying:
// SPEC §3's max_depth), no further than limit: what the API's 429 and
// ingest's backpressure both compare with max_depth.
func (s *Store) QueueDepth(ctx context.Context, queue string, limit int) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM (
		SELECT 1 FROM jobs WHERE queue = $1 AND state IN ('waiting', 'queued', 'retrying') LIMIT $2) x`,
		queue, limit).Scan(&n)
	return n, err
}
