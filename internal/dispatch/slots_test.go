package dispatch

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
	"github.com/switchyard-dev/switchyard/workers"
)

// A route's max_running holds for two dispatchers together, with a
// prefetch of a pool's worth that could hold more jobs than the cap (it
// waits for slots instead); the cap is reached, every job runs once, and
// a stopped dispatcher gives its slots back.
func TestMaxRunningSlotsHoldAcrossDispatchers(t *testing.T) {
	t.Parallel()
	const total, maxRunning = 200, 3
	store := testenv.MigratedStore(t)
	enqueueCapped(t, store, total)
	h := &counter{took: 5 * time.Millisecond}
	began := time.Now()
	var ds []*Dispatcher
	for range 2 {
		ds = append(ds, run(t, newCapped(t, store, h, maxRunning, Queue{Name: "q", Concurrency: 8,
			Lease: 2 * time.Second, MaxRuntime: time.Minute, PollInterval: 50 * time.Millisecond, Prefetch: 8})))
	}
	testenv.Eventually(t, 60*time.Second, "every job to succeed", func() bool {
		return states(t, store)["succeeded"] == total
	})
	t.Logf("%d jobs of 5 ms in %s (%s at max_running %d)", total, time.Since(began).Round(time.Millisecond),
		(total * 5 * time.Millisecond / maxRunning).Round(time.Millisecond), maxRunning)
	if p := h.peak.Load(); p != maxRunning {
		t.Fatalf("peak handlers %d, want max_running %d (never more, and reached)", p, maxRunning)
	}
	if c := h.calls.Load(); c != total {
		t.Fatalf("%d handler calls for %d jobs", c, total)
	}
	for _, d := range ds {
		if err := d.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	var held int
	if err := store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM flow_slots`).Scan(&held); err != nil || held != 0 {
		t.Fatalf("%d slot rows left after both stopped (%v)", held, err)
	}
}

// A claim that a route's slot budget cut short did not find its queue
// dry: each worker that frees claims again for the slot it gave back,
// without waiting for the poll (here an hour).
func TestClaimBoundedBySlotsClaimsAgainAsWorkersFree(t *testing.T) {
	t.Parallel()
	const total, maxRunning = 30, 3
	store := testenv.MigratedStore(t)
	enqueueCapped(t, store, total)
	h := &counter{took: 5 * time.Millisecond}
	run(t, newCapped(t, store, h, maxRunning, Queue{Name: "q", Concurrency: 8, Lease: 30 * time.Second,
		MaxRuntime: time.Minute, PollInterval: time.Hour}))
	testenv.Eventually(t, 10*time.Second, "every job to succeed", func() bool {
		return states(t, store)["succeeded"] == total
	})
	if p := h.peak.Load(); p > maxRunning {
		t.Fatalf("peak handlers %d over max_running %d", p, maxRunning)
	}
}

// enqueueCapped stores n jobs of route r, queue q, in the route's one
// group, as a route with a max_running stores them.
func enqueueCapped(t *testing.T, store *pgstore.Store, n int) {
	t.Helper()
	var b pgstore.IngestBatch
	for i := range n {
		b.Jobs = append(b.Jobs, pgstore.NewJob{Route: "r", Kind: "k", Queue: "q", DedupeKey: fmt.Sprint(i),
			Payload: []byte("{}"), MaxAttempts: 3, Topic: "t", Offset: int64(i), Group: pgstore.GroupAll})
	}
	if _, err := store.IngestCommit(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

// newCapped is a dispatcher of queue q whose route r has a max_running,
// every job handled by h.
func newCapped(t *testing.T, store *pgstore.Store, h workers.Handler, maxRunning int, q Queue) *Dispatcher {
	t.Helper()
	d, err := New(Config{
		Queues:  []Queue{q},
		Resolve: func(*workers.Job) (workers.Handler, error) { return h, nil },
		Grace:   time.Second,
		Limits:  map[string]map[string]pgstore.FlowLimit{"q": {"r": {MaxRunning: maxRunning}}},
	}, store, zaptest.NewLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
