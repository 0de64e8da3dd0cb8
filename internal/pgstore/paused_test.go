package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// A claim of a paused queue takes nothing, whoever claims; Resume lets
// the next claim take the jobs, and Pause and Resume say whether they
// changed anything.
func TestClaimTakesNothingFromAPausedQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	queuedJobs(ctx, t, s, 10)
	claim := func() int {
		t.Helper()
		jobs, _, err := s.JobClaim(ctx, pgstore.JobClaimParams{Queue: "q", Limit: 5, Lease: time.Minute, MaxRuntime: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return len(jobs)
	}
	if changed, err := s.Pause(ctx, pgstore.PauseQueue, "q", "test"); err != nil || !changed {
		t.Fatalf("pause: %v %v", changed, err)
	}
	if changed, err := s.Pause(ctx, pgstore.PauseQueue, "q", "test"); err != nil || changed {
		t.Fatalf("a second pause changed something: %v %v", changed, err)
	}
	if n := claim(); n != 0 {
		t.Fatalf("a claim of the paused queue took %d jobs", n)
	}
	if n, err := s.QueueDepth(ctx, "q", 100); err != nil || n != 10 {
		t.Fatalf("depth of the paused queue %d (%v), want its 10 jobs", n, err)
	}
	p, err := s.Pauses(ctx)
	if _, ok := p[pgstore.PauseQueue]["q"]; err != nil || !ok || len(p[pgstore.PauseRoute]) != 0 {
		t.Fatalf("pauses %v (%v), want queue q only", p, err)
	}
	if changed, err := s.Resume(ctx, pgstore.PauseQueue, "q", "test"); err != nil || !changed {
		t.Fatalf("resume: %v %v", changed, err)
	}
	if n := claim(); n != 5 {
		t.Fatalf("a claim after the resume took %d jobs, want 5", n)
	}
	if n, err := s.QueueDepth(ctx, "q", 3); err != nil || n != 3 {
		t.Fatalf("depth counted to %d (%v), want no further than the limit 3", n, err)
	}
}
