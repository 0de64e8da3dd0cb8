package switchyard

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/jobstate"
	"github.com/switchyard-dev/switchyard/workers"
)

// ErrStale is returned by Applier.Apply when the job's version is not
// newer than the last version applied for its key: fn was not called and
// the job is skipped. A handler returns nil for it — there is nothing to
// retry.
var ErrStale = pgstore.ErrStale

// An Applier lets a Go handler make its own writes conditional on the
// job's version and commit them in the same transaction as the job's
// completion (SPEC §8). Embedders get one from Engine.Applier.
//
// The lane guarantees one job per key at a time and (version, offset)
// start order (see package lanes); what it cannot guarantee alone is that
// a handler's write and the job's success land together. Apply closes
// that gap: inside one Postgres transaction it checks that the attempt
// still holds the job (fencing token, I4), checks that the job's version
// is newer than the key's last applied version (newer/strict policies),
// runs the handler's function on the same transaction, and marks the job
// succeeded — which advances the lane's last applied version and promotes
// the next job. A crash anywhere before the commit leaves neither the
// handler's write nor the completion.
//
// Handler tables must live in the same database as Switchyard's schema.
// Apply never runs a handler's SQL outside the transaction it hands over,
// and never retries fn by itself: retries are the dispatcher's.
type Applier struct{ e *Engine }

// Applier returns the engine's Applier. It may be taken before Start (a
// handler registered before Start can hold it); Apply returns
// ErrNotStarted until Start has opened the database, and an error that
// says the engine is stopped once Stop has begun.
func (e *Engine) Applier() *Applier { return &Applier{e: e} }

// Apply runs fn in a transaction in the job's database and, in the same
// transaction, marks the job succeeded and advances its lane. fn runs
// only if the job is still held under this attempt's fencing token and,
// for a versioned lane, only if the job's version is newer than the last
// applied one. It returns ErrStale for an older version and
// workers.ErrLeaseLost when the attempt no longer holds the job; in both
// cases fn was not called and nothing of the handler's was written.
//
// After a nil return the handler should return nil: the dispatcher
// records nothing more for the attempt (no SetResult either). When fn
// returns an error, everything rolls back and that error comes back as
// it is. ErrStale's job is recorded skipped.
//
// The transaction is on one of the engine's connections, with its
// settings: search_path is Switchyard's schema only (name the
// application's tables with their schema), statement_timeout and
// idle_in_transaction_session_timeout are 60 s, and it holds one of
// postgres.max_conns while fn runs.
func (a *Applier) Apply(ctx context.Context, job *workers.Job, fn func(ctx context.Context, tx pgx.Tx) error) error {
	switch {
	case job == nil:
		return errors.New("switchyard: Apply: job is nil: pass the handler's job")
	case fn == nil:
		return errors.New("switchyard: Apply: fn is nil: pass the function that makes the handler's writes")
	}
	if err := a.e.ready(); err != nil {
		return err
	}
	err := a.e.store.JobApply(ctx, job.ID, job.Token, job.Version, fn)
	switch {
	case err == nil:
		job.MarkFinished(jobstate.Succeeded)
	case errors.Is(err, ErrStale):
		job.MarkFinished(jobstate.Skipped)
	case errors.Is(err, pgstore.ErrLeaseLost):
		return workers.ErrLeaseLost
	}
	return err
}
