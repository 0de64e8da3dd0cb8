package switchyard_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	switchyard "github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
	"github.com/switchyard-dev/switchyard/workers"
)

// runningJob is a new schema with one job, claimed.
func runningJob(t *testing.T) (*pgstore.Store, *pgstore.Claimed) {
	t.Helper()
	s := testenv.MigratedStore(t)
	if _, err := s.IngestCommit(context.Background(), pgstore.IngestBatch{Jobs: []pgstore.NewJob{{Route: "r", Kind: "k",
		Queue: "q", DedupeKey: "1", Payload: []byte("{}"), MaxAttempts: 3, Topic: "t"}}}); err != nil {
		t.Fatal(err)
	}
	return s, testenv.ClaimOne(t, s, "q")
}

// Apply by an attempt that lost its lease writes nothing, and says so
// with the public API's one lease error: errors.Is(err,
// workers.ErrLeaseLost) holds, as it does for a handler's context cause.
func TestApplyAfterTheLeaseIsLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, j := runningJob(t)
	stale := &workers.Job{ID: j.ID, Token: j.Token + 1000}
	called := false
	err := switchyard.NewApplierForTest(s).Apply(ctx, stale, func(context.Context, pgx.Tx) error { called = true; return nil })
	if !errors.Is(err, workers.ErrLeaseLost) || called {
		t.Fatalf("Apply with a lost lease: %v (fn called: %v), want workers.ErrLeaseLost and fn not called", err, called)
	}
}

// A nil job or fn is the caller's mistake, answered with an error that
// names it: not a panic inside the job's transaction, which the
// dispatcher would recover as a retryable failure of every attempt.
func TestApplyRefusesNilArguments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, j := runningJob(t)
	a := switchyard.NewApplierForTest(s)
	for name, call := range map[string]func() error{
		"job": func() error { return a.Apply(ctx, nil, func(context.Context, pgx.Tx) error { return nil }) },
		"fn":  func() error { return a.Apply(ctx, &workers.Job{ID: j.ID, Token: j.Token}, nil) },
	} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("Apply with a nil %s panicked: %v", name, r)
				}
			}()
			if err := call(); err == nil || !strings.Contains(err.Error(), name+" is nil") {
				t.Errorf("Apply with a nil %s: %v, want an error naming it", name, err)
			}
		}()
	}
}
