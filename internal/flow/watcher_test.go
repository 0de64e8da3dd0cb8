package flow_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/switchyard-dev/switchyard/internal/flow"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// A route holds when its queue reaches max_depth — at the batch that
// took it there (Added), before any read — and resumes only once a read
// finds the queue below 90 % of it. An operator's pause wins over
// backpressure and holds until resumed.
func TestRouteHoldsAtMaxDepthUntilNinetyPercent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	changes := 0
	w, err := flow.New(s, flow.Config{Interval: time.Hour, MaxDepth: map[string]int{"q": 10},
		RouteQueue: map[string]string{"r": "q"}, OnChange: func() { changes++ }}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	enqueue := func(first, n int) {
		var b pgstore.IngestBatch
		for i := first; i < first+n; i++ {
			b.Jobs = append(b.Jobs, pgstore.NewJob{Route: "r", Kind: "k", Queue: "q", Key: fmt.Sprint(i),
				DedupeKey: fmt.Sprint(i), Payload: []byte("{}"), MaxAttempts: 3, Topic: "r", Offset: int64(i)})
		}
		if _, err := s.IngestCommit(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	refresh := func() {
		t.Helper()
		if err := w.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	hold := func(want string) {
		t.Helper()
		if got := w.RouteHold("r"); got != want {
			t.Fatalf("route hold %q, want %q", got, want)
		}
	}
	enqueue(0, 9)
	refresh()
	hold("")
	enqueue(9, 1)
	w.Added(ctx, "q", 1) // as the consumer does after storing the batch
	hold(flow.CauseBackpressure)
	// Drain to 9 (90 %): still held; to 8: resumed.
	drain := func(n int) {
		if _, _, err := s.JobClaim(ctx, pgstore.JobClaimParams{Queue: "q", Limit: n, Lease: time.Minute, MaxRuntime: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	drain(1)
	refresh()
	hold(flow.CauseBackpressure)
	drain(1)
	refresh()
	hold("")
	if changes != 1 {
		t.Fatalf("%d changes reported, want 1 (the resume; Added reports none)", changes)
	}
	if _, err := s.Pause(ctx, pgstore.PauseRoute, "r", "test"); err != nil {
		t.Fatal(err)
	}
	enqueue(10, 5)
	refresh()
	hold(flow.CauseOperator)
	if w.QueuePaused("q") {
		t.Fatal("a route's pause paused its queue")
	}
	if _, err := s.Resume(ctx, pgstore.PauseRoute, "r", "test"); err != nil {
		t.Fatal(err)
	}
	refresh()
	hold(flow.CauseBackpressure) // 13 unstarted jobs: over the limit
}
