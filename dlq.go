package switchyard

import (
	"context"
	"errors"
	"fmt"

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
// Start; an error that says so after Stop.
func (e *Engine) RedriveDLQ(ctx context.Context, id int64) (jobID int64, err error) {
	if err := e.ready(); err != nil {
		return 0, err
	}
	jobID, err = e.dlq.Redrive(ctx, id, ActorGo)
	return jobID, entryError(id, err)
}

// ActorGo is who the audit log says took the engine's actions
// (RedriveDLQ, DiscardDLQ): the embedding program.
const ActorGo = "go"

// DiscardDLQ removes a DLQ entry for good, as POST /v1/dlq/{id}/discard
// does; a lane it was blocking moves on. ErrNotStarted before Start; an
// error that says so after Stop.
func (e *Engine) DiscardDLQ(ctx context.Context, id int64) error {
	if err := e.ready(); err != nil {
		return err
	}
	return entryError(id, e.dlq.Discard(ctx, id, ActorGo))
}

// entryError names the entry that the store's bare ErrNotFound and
// ErrConflict ("not found", "conflict") are about, as the admin API's
// answers do; errors.Is still finds them.
func entryError(id int64, err error) error {
	switch {
	case errors.Is(err, ErrNotFound):
		return fmt.Errorf("DLQ entry %d: %w", id, err)
	case err == ErrConflict:
		return fmt.Errorf("DLQ entry %d: %w: it is not in a state that allows this", id, err)
	}
	return err
}
