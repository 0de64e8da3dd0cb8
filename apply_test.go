package switchyard_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	switchyard "github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
	"github.com/switchyard-dev/switchyard/workers"
)

// Apply by an attempt that lost its lease writes nothing, and says so
// with the public API's one lease error: errors.Is(err,
// workers.ErrLeaseLost) holds, as it does for a handler's context cause.
func TestApplyAfterTheLeaseIsLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	if _, err := s.IngestCommit(ctx, pgstore.IngestBatch{Jobs: []pgstore.NewJob{{Route: "r", Kind: "k", Queue: "q",
		DedupeKey: "1", Payload: []byte("{}"), MaxAttempts: 3, Topic: "t"}}}); err != nil {
		t.Fatal(err)
	}
	j := testenv.ClaimOne(t, s, "q")
	stale := &workers.Job{ID: j.ID, Token: j.Token + 1000}
	called := false
	err := switchyard.NewApplierForTest(s).Apply(ctx, stale, func(context.Context, pgx.Tx) error { called = true; return nil })
	if !errors.Is(err, workers.ErrLeaseLost) || called {
		t.Fatalf("Apply with a lost lease: %v (fn called: %v), want workers.ErrLeaseLost and fn not called", err, called)
	}
}
