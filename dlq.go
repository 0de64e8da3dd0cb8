package switchyard

import (
	"context"

	"github.com/switchyard-dev/switchyard/internal/dlq"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

// Errors of the engine's actions, for errors.Is.
var (
	// ErrNotFound: no DLQ entry or job with that id.
	ErrNotFound = pgstore.ErrNotFound
	// ErrConflict: the entry or job is not in a state that allows the
	// action (a discard of an entry already re-driven, say).
	ErrConflict = pgstore.ErrConflict
	// ErrStillPoison: a parked record still cannot become a job under
	// the current routes.
	ErrStillPoison = dlq.ErrStillPoison
	// ErrCannotRedrive: the entry keeps only part of its record and
	// Kafka no longer has the whole of it.
	ErrCannotRedrive = dlq.ErrCannotRedrive
	// ErrKafkaUnavailable: the record could not be read again from Kafka
	// for now; a retry may succeed.
	ErrKafkaUnavailable = dlq.ErrKafkaUnavailable
)

// RedriveDLQ puts a DLQ entry back to work, as POST /v1/dlq/{id}/redrive
// does, and returns its job's id. A dead job gets fresh attempts, in its
// lane's order for ordered routes; a parked record is decoded again with
// the current route and becomes a job if it now can. ErrNotStarted before
// Start.
func (e *Engine) RedriveDLQ(ctx context.Context, id int64) (jobID int64, err error) {
	if !e.opened.Load() {
		return 0, ErrNotStarted
	}
	return e.dlq.Redrive(ctx, id, ActorGo)
}

// ActorGo is who the audit log says took the engine's actions
// (RedriveDLQ, DiscardDLQ): the embedding program.
const ActorGo = "go"

// DiscardDLQ removes a DLQ entry for good, as POST /v1/dlq/{id}/discard
// does; a lane it was blocking moves on. ErrNotStarted before Start.
func (e *Engine) DiscardDLQ(ctx context.Context, id int64) error {
	if !e.opened.Load() {
		return ErrNotStarted
	}
	return e.dlq.Discard(ctx, id, ActorGo)
}
