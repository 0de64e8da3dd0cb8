package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
	"github.com/switchyard-dev/switchyard/jobstate"
)

// A count of the jobs by state reads every active job, so QueueStats
// reuses a slow one for twenty times its duration; a cheap one never. The
// rest of the stats (here the oldest runnable age) is read afresh.
func TestQueueDepthIsReusedOnlyWhenCountingIsSlow(t *testing.T) {
	t.Parallel()
	for took, want := range map[time.Duration]time.Duration{
		0: 0, 49 * time.Millisecond: 0, 50 * time.Millisecond: time.Second, 3 * time.Second: time.Minute,
	} {
		if got := pgstore.DepthReuse(took); got != want {
			t.Errorf("a count that took %v is reused for %v, want %v", took, got, want)
		}
	}

	ctx := context.Background()
	s := testenv.MigratedStore(t)
	n := 0
	enqueue := func(runAt time.Time) {
		t.Helper()
		n++
		if _, err := s.JobEnqueue(ctx, pgstore.NewJob{Origin: pgstore.OriginAPI, Route: "r", Kind: "k", Queue: "q",
			DedupeKey: fmt.Sprint(n), Payload: []byte(`{}`), MaxAttempts: 3, RunAt: &runAt}, pgstore.Actor{By: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	stats := func() (queued int64, age float64) {
		t.Helper()
		st, err := s.QueueStats(ctx)
		if err != nil || st["q"] == nil {
			t.Fatalf("queue stats: %v, %v", st, err)
		}
		return st["q"].Jobs[string(jobstate.Queued)], st["q"].OldestRunnableAgeSeconds
	}

	s.SetDepthReuse(func(time.Duration) time.Duration { return time.Hour })
	enqueue(time.Now())
	if queued, _ := stats(); queued != 1 {
		t.Fatalf("queued %d, want 1", queued)
	}
	enqueue(time.Now().Add(-time.Hour))
	if queued, age := stats(); queued != 1 || age < 3000 {
		t.Fatalf("queued %d, oldest runnable %.0fs; want the reused count 1 and the new job's hour", queued, age)
	}

	s.SetDepthReuse(func(time.Duration) time.Duration { return 0 })
	if queued, _ := stats(); queued != 2 {
		t.Fatalf("queued %d, want 2", queued)
	}
	enqueue(time.Now())
	if queued, _ := stats(); queued != 3 {
		t.Fatalf("queued %d, want 3: a count is not reused when the rule says so", queued)
	}
}
