package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// The actions the audit log records (SPEC §6).
const (
	AuditCancel  = "cancel"
	AuditRedrive = "redrive"
	AuditDiscard = "discard"
	AuditPause   = "pause"
	AuditResume  = "resume"
	AuditTrigger = "trigger"
	AuditEnqueue = "enqueue"
	AuditRetry   = "retry"
	AuditReplay  = "replay"
)

// AuditActions are every action the log records.
var AuditActions = []string{AuditCancel, AuditRedrive, AuditDiscard, AuditPause, AuditResume, AuditTrigger,
	AuditEnqueue, AuditRetry, AuditReplay}

// AuditEntry is one recorded operator action: who (an admin token's
// name, or cli:<user>), when, on what (job/17, dlq/4, queue/bulk,
// route/orders, schedule/nightly) and what it did.
type AuditEntry struct {
	ID     int64           `json:"id"`
	At     time.Time       `json:"at"`
	Actor  string          `json:"actor"`
	Action string          `json:"action"`
	Target string          `json:"target"`
	Detail json.RawMessage `json:"detail"`
}

// errNoActor guards the audit log against an action whose caller forgot
// to say who took it: a bug, refused rather than recorded anonymously.
var errNoActor = errors.New("pgstore: an operator action needs an actor for the audit log")

// audit records an action in tx, the action's own transaction: an action
// that commits is in the log, and one that rolls back is not.
func audit(ctx context.Context, tx pgx.Tx, by, action, target string, detail map[string]any) error {
	if by == "" {
		return errNoActor
	}
	if detail == nil {
		detail = map[string]any{}
	}
	_, err := tx.Exec(ctx, `INSERT INTO audit_log (actor, action, target, detail) VALUES ($1, $2, $3, $4)`,
		by, action, target, detail)
	return err
}

// auditRowsSQL is audit in SQL, for a statement that acts on many: an
// entry by $2 of action for each row of from, in id order, on target
// with detail (expressions over from's columns).
func auditRowsSQL(action, target, detail, from string) string {
	return `INSERT INTO audit_log (actor, action, target, detail)
		SELECT $2, '` + action + `', ` + target + `, ` + detail + ` FROM ` + from + ` ORDER BY id`
}

// Audit records an action that is not one transaction — a replay,
// whose jobs commit in many — in a transaction of its own, once it has
// done what detail says.
func (s *Store) Audit(ctx context.Context, by, action, target string, detail map[string]any) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return audit(ctx, tx, by, action, target, detail) })
}

// AuditFilter selects audit entries, newest first; empty fields do not
// filter. Before is a keyset cursor: entries with a smaller id (0: from
// the newest).
type AuditFilter struct {
	Actor, Action, Target string
	Before                int64
	Limit                 int
}

// AuditList lists audit entries, newest first.
func (s *Store) AuditList(ctx context.Context, f AuditFilter) ([]AuditEntry, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, at, actor, action, target, detail FROM audit_log
		WHERE ($1::text IS NULL OR actor = $1) AND ($2::text IS NULL OR action = $2)
		  AND ($3::text IS NULL OR target = $3) AND ($4::bigint = 0 OR id < $4)
		ORDER BY id DESC LIMIT $5`, nullable(f.Actor), nullable(f.Action), nullable(f.Target), f.Before, f.Limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[AuditEntry])
}

// AuditPrune deletes up to limit entries older than the given age,
// oldest first, and returns how many.
func (s *Store) AuditPrune(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM audit_log WHERE id IN (
		SELECT id FROM audit_log WHERE at < now() - $1::bigint * interval '1 millisecond' ORDER BY id LIMIT $2)`,
		olderThan.Milliseconds(), limit)
	return tag.RowsAffected(), err
}
