package ordering

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/workers"
)

// ErrStale is returned by Apply when the job's version is not newer than
// the last version applied for its key: fn was not called and the job is
// skipped. A handler returns nil for it — there is nothing to retry.
var ErrStale = pgstore.ErrStale

// ErrLeaseLost is returned by Apply when the job is no longer held by this
// attempt (its lease expired and another worker may own it): fn was not
// called, nothing was written. It is workers.ErrLeaseLost, the one lease
// error of the public API.
var ErrLeaseLost = workers.ErrLeaseLost

// Applier applies handler writes together with job completions.
type Applier struct{ store *pgstore.Store }

// New returns an Applier over a store; embedders get theirs from
// Engine.Applier.
func New(store *pgstore.Store) *Applier { return &Applier{store: store} }

// Apply runs fn in a transaction in the job's database and, in the same
// transaction, marks the job succeeded and advances its lane. Either both
// commit or neither does, so a handler's own table never holds the effect
// of a job that is later retried. fn runs only if the job is still held
// under this attempt's fencing token (I4) and, for a versioned lane, only
// if the job's version is newer than the last applied one.
//
// After a nil return the handler should return nil: the dispatcher
// records nothing more for the attempt.
func (a *Applier) Apply(ctx context.Context, job *workers.Job, fn func(ctx context.Context, tx pgx.Tx) error) error {
	err := a.store.JobApply(ctx, job.ID, job.Token, job.Version, fn)
	switch {
	case err == nil || errors.Is(err, ErrStale):
		job.MarkFinished()
	case errors.Is(err, pgstore.ErrLeaseLost):
		return ErrLeaseLost
	}
	return err
}
