package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
	"github.com/switchyard-dev/switchyard/workers"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// enqueue inserts n jobs of queue "q" through the ingest path.
func enqueue(t *testing.T, store *pgstore.Store, n, maxAttempts int) {
	t.Helper()
	var b pgstore.IngestBatch
	b.Group = testenv.Name("g")
	for i := range n {
		b.Jobs = append(b.Jobs, pgstore.NewJob{Route: "r", Kind: "k", Queue: "q", Key: fmt.Sprint(i),
			DedupeKey: fmt.Sprint(i), Payload: []byte("{}"), MaxAttempts: maxAttempts, Topic: "t", Offset: int64(i)})
	}
	b.Offsets = []pgstore.OffsetAdvance{{Topic: "t", Partition: 0, Expected: -1, Next: int64(n)}}
	if _, err := store.IngestCommit(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

func start(t *testing.T, store *pgstore.Store, concurrency int, lease time.Duration, h workers.Handler) *Dispatcher {
	t.Helper()
	return startQueues(t, store, h, Queue{Name: "q", Concurrency: concurrency, Lease: lease, MaxRuntime: time.Minute,
		PollInterval: 50 * time.Millisecond})
}

// claim claims n jobs of queue q, leased for a minute, as a pool would.
func claim(t *testing.T, store *pgstore.Store, n int) []*pgstore.Claimed {
	t.Helper()
	jobs, _, err := store.JobClaim(context.Background(),
		pgstore.JobClaimParams{Queue: "q", Limit: n, Lease: time.Minute, MaxRuntime: time.Hour})
	if err != nil || len(jobs) != n {
		t.Fatalf("claim %d of %d, %v", len(jobs), n, err)
	}
	return jobs
}

// startQueues starts a dispatcher with the given pools, every job handled
// by h.
func startQueues(t *testing.T, store *pgstore.Store, h workers.Handler, queues ...Queue) *Dispatcher {
	t.Helper()
	return run(t, newQueues(t, store, h, queues...))
}

// newQueues is startQueues without the start.
func newQueues(t *testing.T, store *pgstore.Store, h workers.Handler, queues ...Queue) *Dispatcher {
	t.Helper()
	d, err := New(Config{
		Queues:  queues,
		Backoff: map[string]Backoff{"r": {Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}},
		Resolve: func(*workers.Job) (workers.Handler, error) { return h, nil },
		Grace:   200 * time.Millisecond,
	}, store, zaptest.NewLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// run starts d and stops it when the test ends.
func run(t *testing.T, d *Dispatcher) *Dispatcher {
	t.Helper()
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop(context.Background()) })
	return d
}

// counter is a handler that counts its calls (started, and finished in
// calls) and the most it ran at once, each call taking the given time,
// or, with a gate, until the gate lets it go or its context ends.
type counter struct {
	cur, peak, started, calls atomic.Int64
	took                      time.Duration
	gate                      chan struct{}
}

func (c *counter) Handle(ctx context.Context, _ *workers.Job) error {
	c.started.Add(1)
	n := c.cur.Add(1)
	defer c.cur.Add(-1)
	for p := c.peak.Load(); n > p && !c.peak.CompareAndSwap(p, n); p = c.peak.Load() {
	}
	if c.gate != nil {
		select {
		case <-c.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	time.Sleep(c.took)
	c.calls.Add(1)
	return nil
}

func states(t *testing.T, store *pgstore.Store) map[string]int {
	t.Helper()
	rows, err := store.Pool().Query(context.Background(), `SELECT state, count(*) FROM all_jobs GROUP BY state`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		out[s] = n
	}
	return out
}

// Workers never exceed the pool's concurrency, and every job runs.
func TestPoolRunsEverythingWithinConcurrency(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	enqueue(t, store, 200, 3)
	var h counter
	start(t, store, 8, 5*time.Second, &h)
	testenv.Eventually(t, 30*time.Second, "200 succeeded", func() bool { return states(t, store)["succeeded"] == 200 })
	if p := h.peak.Load(); p > 8 {
		t.Fatalf("peak concurrency %d > 8", p)
	}
	if c := h.calls.Load(); c != 200 {
		t.Fatalf("handler calls = %d, want 200 (each job once)", c)
	}
}

// I5: transient failures retry with backoff and end dead after
// max_attempts, with a DLQ entry; Permanent is dead at once.
func TestRetriesEndDeadAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	enqueue(t, store, 2, 3)
	var calls sync.Map
	start(t, store, 2, 5*time.Second, workers.HandlerFunc(func(ctx context.Context, j *workers.Job) error {
		n, _ := calls.LoadOrStore(j.ID, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		if j.Key == "0" {
			return errors.New("flaky downstream")
		}
		return workers.Permanent(errors.New("bad request"))
	}))
	testenv.Eventually(t, 30*time.Second, "both dead", func() bool { return states(t, store)["dead"] == 2 })
	var transientAttempts, permanentAttempts int
	ctx := context.Background()
	_ = store.Pool().QueryRow(ctx, `SELECT attempts FROM all_jobs WHERE key = '0'`).Scan(&transientAttempts)
	_ = store.Pool().QueryRow(ctx, `SELECT attempts FROM all_jobs WHERE key = '1'`).Scan(&permanentAttempts)
	if transientAttempts != 3 || permanentAttempts != 1 {
		t.Fatalf("attempts: transient %d (want 3), permanent %d (want 1)", transientAttempts, permanentAttempts)
	}
	for key, reason := range map[string]string{"0": "max_attempts", "1": "permanent"} {
		var got string
		err := store.Pool().QueryRow(ctx, `SELECT d.reason FROM dlq_entries d JOIN all_jobs j ON j.id = d.job_id WHERE j.key = $1`, key).Scan(&got)
		if err != nil || got != reason {
			t.Errorf("key %s: dlq reason %q (%v), want %q", key, got, err, reason)
		}
	}
}

// I4: a lease that expires under a live worker (a stall) is rescued and
// re-claimed by another process; the old holder learns it lost the lease
// (its context is cancelled with ErrLeaseLost), and anything it writes
// with its old token is rejected.
func TestExpiredLeaseUnderLiveWorker(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	enqueue(t, store, 1, 5)
	ctx := context.Background()

	started := make(chan *workers.Job, 1)
	causeC := make(chan error, 1)
	var first atomic.Bool
	var gotB atomic.Int64 // token of the attempt that succeeded
	a := start(t, store, 1, 3*time.Second, workers.HandlerFunc(func(ctx context.Context, j *workers.Job) error {
		if !first.CompareAndSwap(false, true) {
			gotB.Store(j.Token) // A may win the re-claim too; it is a new lease
			return nil
		}
		started <- j
		<-ctx.Done()
		causeC <- context.Cause(ctx)
		return nil // a stale "success" that must not count
	}))
	jobA := <-started
	// The worker stalls past its lease: from the database's point of view
	// the lease is over.
	if _, err := store.Pool().Exec(ctx, `UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, jobA.ID); err != nil {
		t.Fatal(err)
	}
	b := start(t, store, 1, 3*time.Second, workers.HandlerFunc(func(ctx context.Context, j *workers.Job) error {
		gotB.Store(j.Token)
		return nil
	}))
	select {
	case cause := <-causeC:
		if !errors.Is(cause, workers.ErrLeaseLost) {
			t.Fatalf("old holder's context cause = %v, want ErrLeaseLost", cause)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("old holder was never told it lost the lease")
	}
	testenv.Eventually(t, 30*time.Second, "job succeeded by the new holder", func() bool { return gotB.Load() != 0 && states(t, store)["succeeded"] == 1 })
	if tok := gotB.Load(); tok == jobA.Token {
		t.Fatalf("new holder got the old fencing token %d", tok)
	}
	// The old holder's completion and heartbeat, token-checked, change nothing.
	done, err := store.JobComplete(ctx, []pgstore.Outcome{{ID: jobA.ID, Token: jobA.Token, State: "dead", Reason: "permanent", Error: "stale"}})
	if err != nil || done.Applied[jobA.Token] {
		t.Fatalf("stale completion applied=%v err=%v", done.Applied[jobA.Token], err)
	}
	kept, err := store.JobHeartbeat(ctx, []pgstore.Lease{{ID: jobA.ID, Token: jobA.Token}}, time.Minute, time.Hour, "")
	if err != nil || kept[jobA.Token] {
		t.Fatalf("stale heartbeat kept=%v err=%v", kept[jobA.Token], err)
	}
	if s := states(t, store); s["succeeded"] != 1 || s["dead"] != 0 {
		t.Fatalf("states after stale writes: %v", s)
	}
	_ = a.Stop(ctx)
	_ = b.Stop(ctx)
}

// I7: at shutdown, a job still running after the grace period is
// cancelled with ErrShutdown and released to queued, its attempt handed
// back.
func TestStopReleasesUnfinishedJobs(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	enqueue(t, store, 1, 5)
	started := make(chan struct{}, 1)
	causeC := make(chan error, 1)
	d := start(t, store, 1, 5*time.Second, workers.HandlerFunc(func(ctx context.Context, j *workers.Job) error {
		started <- struct{}{}
		<-ctx.Done()
		causeC <- context.Cause(ctx)
		return ctx.Err()
	}))
	<-started
	if err := d.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c := <-causeC; !errors.Is(c, workers.ErrShutdown) {
		t.Fatalf("cause = %v, want ErrShutdown", c)
	}
	var state string
	var attempts int
	if err := store.Pool().QueryRow(context.Background(), `SELECT state, attempts FROM all_jobs`).Scan(&state, &attempts); err != nil {
		t.Fatal(err)
	}
	if state != "queued" || attempts != 0 {
		t.Fatalf("after stop: state %s attempts %d, want queued 0", state, attempts)
	}
}

// Under a backlog a claim takes jobs beyond the idle workers: they wait
// leased (running in the table) without running, the pool never runs
// more than its concurrency, and at shutdown the waiting ones go back to
// queued with their attempt handed back (I5, I7), as the running ones do.
func TestPrefetchedJobsWaitAndGoBackAtStop(t *testing.T) {
	t.Parallel()
	store, h, d := prefetchingPool(t, 2)
	testenv.Eventually(t, 30*time.Second, "jobs leased beyond the workers", func() bool {
		return h.started.Load() == 3 && states(t, store)["running"] > 2
	})
	if p := h.peak.Load(); p > 2 {
		t.Fatalf("peak concurrency %d > 2", p)
	}
	// The waiting ones are reported reserved, apart from the two running.
	testenv.Eventually(t, 10*time.Second, "the prefetched jobs reported reserved", func() bool {
		st := queueStat(t, store)
		return st.Jobs[pgstore.Reserved] > 0 && st.Running == 2
	})
	if err := d.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := queueStat(t, store); st.Jobs[pgstore.Reserved] != 0 {
		t.Fatalf("%d jobs reported reserved after stop", st.Jobs[pgstore.Reserved])
	}
	var notBack int
	if err := store.Pool().QueryRow(context.Background(),
		`SELECT count(*) FROM all_jobs WHERE state <> 'succeeded' AND (state <> 'queued' OR attempts <> 0)`).Scan(&notBack); err != nil {
		t.Fatal(err)
	}
	if got := states(t, store); got["succeeded"] != 1 || got["queued"] != 49 || notBack != 0 {
		t.Fatalf("after stop: %v, %d jobs not queued with their attempt back; want 1 succeeded, 49 queued", got, notBack)
	}
}

// A prefetch beyond the lease cap's share of the workers is held whole:
// the cap counts the prefetch on top of leaseCap × concurrency, so a
// local queue of seven times the pool fills in one claim, and never
// holds more than the prefetch beside the workers.
func TestPrefetchIsHeldWhole(t *testing.T) {
	t.Parallel()
	store, h, d := prefetchingPool(t, 14)
	defer d.Stop(context.Background()) //nolint:errcheck
	testenv.Eventually(t, 30*time.Second, "2 running and 14 prefetched", func() bool {
		return states(t, store)["running"] == 16
	})
	time.Sleep(200 * time.Millisecond) // four polls: no claim may take more
	if got := states(t, store); got["running"] != 16 || h.peak.Load() > 2 {
		t.Fatalf("%v with a peak concurrency of %d; want 16 running, at most 2 at once", got, h.peak.Load())
	}
}

// A pool runs its attempts on long-lived worker goroutines, as many as it
// has run at once: a pool of concurrency 1,000 that has run five jobs at
// a time keeps five, not a thousand idle ones.
func TestWorkersGrowWithWhatRunsAtOnce(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	enqueue(t, store, 5, 1)
	h := &counter{gate: make(chan struct{})}
	d := startQueues(t, store, h, Queue{Name: "q", Concurrency: 1000, Lease: 5 * time.Second,
		MaxRuntime: time.Minute, PollInterval: 50 * time.Millisecond})
	defer d.Stop(context.Background()) //nolint:errcheck
	testenv.Eventually(t, 30*time.Second, "5 jobs running", func() bool { return h.started.Load() == 5 })
	workers := func() int {
		p := d.pools["q"]
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.workers
	}
	if n := workers(); n != 5 {
		t.Fatalf("%d worker goroutines for 5 jobs running at once", n)
	}
	close(h.gate)
	testenv.Eventually(t, 30*time.Second, "all succeeded", func() bool { return states(t, store)["succeeded"] == 5 })
	var more pgstore.IngestBatch
	for i := range 3 {
		more.Jobs = append(more.Jobs, pgstore.NewJob{Route: "r", Kind: "k", Queue: "q", DedupeKey: fmt.Sprint("more-", i),
			Payload: []byte("{}"), MaxAttempts: 1})
	}
	if _, err := store.IngestCommit(context.Background(), more); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the next 3 succeeded", func() bool { return states(t, store)["succeeded"] == 8 })
	if n := workers(); n != 5 {
		t.Fatalf("%d worker goroutines after 3 more jobs; want the 5 reused", n)
	}
}

// prefetchingPool starts a pool of 2 workers with the given prefetch over
// 50 queued jobs, whose handlers wait for h.gate, and lets one job end
// once both workers are busy: the freed worker's claim then comes under a
// backlog, and takes the prefetch.
func prefetchingPool(t *testing.T, prefetch int) (*pgstore.Store, *counter, *Dispatcher) {
	t.Helper()
	store := testenv.MigratedStore(t)
	enqueue(t, store, 50, 5)
	h := &counter{gate: make(chan struct{})}
	d := startQueues(t, store, h, Queue{Name: "q", Concurrency: 2, Prefetch: prefetch, Lease: 5 * time.Second,
		MaxRuntime: time.Minute, PollInterval: 50 * time.Millisecond})
	testenv.Eventually(t, 30*time.Second, "both workers busy", func() bool { return h.started.Load() == 2 })
	h.gate <- struct{}{}
	return store, h, d
}

// queueStat is queue q's line of pgstore.QueueStats.
func queueStat(t *testing.T, store *pgstore.Store) *pgstore.QueueStat {
	t.Helper()
	stats, err := store.QueueStats(context.Background(), pgstore.Groups{})
	if err != nil {
		t.Fatal(err)
	}
	if stats["q"] == nil {
		return &pgstore.QueueStat{Jobs: map[string]int64{}}
	}
	return stats["q"]
}

// A panicking handler is an ordinary failed attempt, not a dead process.
func TestHandlerPanicIsAFailedAttempt(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	enqueue(t, store, 1, 2)
	start(t, store, 1, 5*time.Second, workers.HandlerFunc(func(context.Context, *workers.Job) error {
		panic("boom")
	}))
	testenv.Eventually(t, 30*time.Second, "dead after 2 panics", func() bool { return states(t, store)["dead"] == 1 })
}

func TestBackoffIsFullJitterWithinBounds(t *testing.T) {
	d := &Dispatcher{cfg: Config{Backoff: map[string]Backoff{"r": {Initial: time.Second, Max: 8 * time.Second}}}}
	for attempt, ceil := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 10: 8 * time.Second} {
		var sawLow, sawHigh bool
		for range 2000 {
			got := d.backoff(&workers.Job{Route: "r", Attempt: attempt}, errors.New("x"))
			if got < 0 || got > ceil {
				t.Fatalf("attempt %d: %s outside [0, %s]", attempt, got, ceil)
			}
			sawLow = sawLow || got < ceil/4
			sawHigh = sawHigh || got > ceil*3/4
		}
		if !sawLow || !sawHigh {
			t.Fatalf("attempt %d: delays not spread over [0, %s]", attempt, ceil)
		}
	}
	if got := d.backoff(&workers.Job{Route: "r", Attempt: 1}, workers.RetryAfter(time.Hour, errors.New("x"))); got != 8*time.Second {
		t.Fatalf("Retry-After not capped by max: %s", got)
	}
}

// Finished jobs past their retention leave the table; a dead job whose
// DLQ entry is still open stays; runnable jobs are never touched.
func TestPruneRespectsRetention(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	enqueue(t, store, 4, 1)
	ctx := context.Background()
	jobs := claim(t, store, 3)
	// Two completions: each keeps its successes as one job_history batch,
	// which retention drops whole.
	for _, outs := range [][]pgstore.Outcome{{
		{ID: jobs[0].ID, Token: jobs[0].Token, State: "succeeded"},
		{ID: jobs[2].ID, Token: jobs[2].Token, State: "dead", Reason: "permanent", Error: "x"},
	}, {
		{ID: jobs[1].ID, Token: jobs[1].Token, State: "succeeded"},
	}} {
		if _, err := store.JobComplete(ctx, outs); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{
		`UPDATE jobs SET finished_at = now() - interval '2 hours' WHERE id <> $1`,
		`UPDATE job_history SET finished_at = now() - interval '2 hours' WHERE NOT ids @> $1::bigint`,
	} {
		if _, err := store.Pool().Exec(ctx, q, jobs[1].ID); err != nil {
			t.Fatal(err)
		}
	}
	d := &Dispatcher{store: store, jobCtx: ctx, log: zaptest.NewLogger(t),
		cfg: Config{Retention: map[string]time.Duration{"succeeded": time.Hour, "dead": time.Hour}}}
	d.prune()
	if s := states(t, store); s["succeeded"] != 1 || s["dead"] != 1 || s["queued"] != 1 {
		t.Fatalf("after prune: %v, want the recent success, the dead job with its DLQ entry, and the queued job", s)
	}
}

// retention.versions reaches the lanes' prune: with it, an idle versioned
// lane is stamped (and pruned once idle that long: pgstore's
// TestIdleVersionedLanesForgetTheirVersionAfterRetention); without it,
// left alone.
func TestPruneStampsIdleVersionedLanesUnderVersionRetention(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	ctx := context.Background()
	if _, err := store.Pool().Exec(ctx, `INSERT INTO lanes (route, key, policy, last_version) VALUES ('r', 'v', 'newer', 7)`); err != nil {
		t.Fatal(err)
	}
	for _, keep := range []time.Duration{0, time.Hour} {
		d := &Dispatcher{store: store, jobCtx: ctx, log: zaptest.NewLogger(t), cfg: Config{VersionRetention: keep}}
		d.prune()
		var stamped bool
		if err := store.Pool().QueryRow(ctx, `SELECT idle_since IS NOT NULL FROM lanes WHERE key = 'v'`).Scan(&stamped); err != nil {
			t.Fatal(err)
		}
		if stamped != (keep > 0) {
			t.Fatalf("retention.versions %s: stamped %v", keep, stamped)
		}
	}
}

// After an outage a job whose first outcome is still being written can be
// rescued and claimed again by the same pool. The two attempts must keep
// separate books: settling the old one must neither cancel the new one nor
// leak a busy worker (which, repeated, once left a pool unable to claim).
func TestTwoAttemptsOfOneJobInOnePool(t *testing.T) {
	d := &Dispatcher{jobCtx: context.Background(), log: zaptest.NewLogger(t)}
	p := newPool(d.poolEnv(), d.log, Queue{Name: "q", Concurrency: 4})
	// As start, without running a handler.
	busy := func(j *workers.Job) *running {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.busy++
		return p.hold(j, time.Now())
	}
	first := &workers.Job{ID: 7, Token: 1}
	busy(first)
	p.returned(first.Token) // handler done, outcome queued behind an outage
	second := &workers.Job{ID: 7, Token: 2}
	r := busy(second)
	p.finish(first.Token) // the stale outcome is finally settled (rejected)
	if r.ctx.Err() != nil {
		t.Fatal("settling the first attempt cancelled the second")
	}
	if p.busy != 1 || len(p.leases) != 1 {
		t.Fatalf("busy %d, leases %d; want the second attempt alone", p.busy, len(p.leases))
	}
	p.returned(second.Token)
	p.finish(second.Token)
	if p.busy != 0 || len(p.leases) != 0 || p.free() != 4 {
		t.Fatalf("busy %d, leases %d, free %d after both settled; want 0, 0, 4", p.busy, len(p.leases), p.free())
	}
}

// A pool working through a backlog claims from where its last claim ended
// (pgstore.ClaimPosition); a job that becomes runnable behind that
// position must still run while the backlog lasts, not only after it.
func TestJobBehindClaimPositionRunsDuringBacklog(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	const backlog = 1500
	enqueue(t, store, backlog, 3)
	var calls atomic.Int64
	ranAt := make(chan int64, 1)
	start(t, store, 4, time.Minute, workers.HandlerFunc(func(_ context.Context, j *workers.Job) error {
		n := calls.Add(1)
		if j.Key == "straggler" {
			ranAt <- n
		}
		time.Sleep(5 * time.Millisecond) // ~800 jobs/s: the backlog lasts ~2 s
		return nil
	}))
	for calls.Load() < 100 {
		time.Sleep(10 * time.Millisecond)
	}
	// Runnable since an hour ago: behind every position the pool has
	// claimed from, as a row of a transaction that committed late would be.
	if _, err := store.Pool().Exec(context.Background(), `
		INSERT INTO jobs (route, kind, queue, state, key, dedupe_key, payload, max_attempts, scheduled_at)
		VALUES ('r', 'k', 'q', 'queued', 'straggler', 'straggler', '{}', 3, now() - interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-ranAt:
		if n >= backlog {
			t.Fatalf("the job behind the claim position ran as call %d, after the whole backlog of %d", n, backlog)
		}
		t.Logf("the job behind the claim position ran as call %d of %d", n, backlog+1)
	case <-time.After(time.Minute):
		t.Fatal("the job behind the claim position never ran")
	}
}

// A pool with steal_from runs another queue's jobs when its own queue has
// none: q's own pool runs one job at a time, so more than one of q's jobs
// at once means the helper pool's workers took some.
func TestIdlePoolStealsFromListedQueue(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	enqueue(t, store, 40, 3)
	h := counter{took: 20 * time.Millisecond}
	startQueues(t, store, &h,
		Queue{Name: "q", Concurrency: 1, Lease: time.Minute, MaxRuntime: time.Minute, PollInterval: 50 * time.Millisecond},
		Queue{Name: "helper", Concurrency: 3, Lease: time.Minute, MaxRuntime: time.Minute, PollInterval: 50 * time.Millisecond,
			StealFrom: []string{"q"}})
	testenv.Eventually(t, time.Minute, "all 40 jobs succeeded", func() bool { return states(t, store)["succeeded"] == 40 })
	if p := h.peak.Load(); p < 2 || p > 4 {
		t.Fatalf("peak %d of q's jobs at once, want 2-4 (q's one worker and the helper's three)", p)
	}
	if c := h.calls.Load(); c != 40 {
		t.Fatalf("%d calls for 40 jobs", c)
	}
}

// A handler's checkpoint survives to the next attempt; an attempt that no
// longer holds the job cannot save one.
func TestCheckpointReachesTheNextAttempt(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	enqueue(t, store, 1, 3)
	seen := make(chan string, 3)
	start(t, store, 1, time.Minute, workers.HandlerFunc(func(ctx context.Context, j *workers.Job) error {
		seen <- string(j.Checkpoint)
		if j.Attempt == 1 {
			if err := j.SaveCheckpoint(ctx, []byte("row 500")); err != nil {
				return err
			}
			return errors.New("transient: try again")
		}
		return nil
	}))
	if first, second := <-seen, <-seen; first != "" || second != "row 500" {
		t.Fatalf("attempts saw checkpoints %q then %q, want none then the first attempt's", first, second)
	}
	testenv.Eventually(t, 30*time.Second, "the job succeeded", func() bool { return states(t, store)["succeeded"] == 1 })
	// The finished job is held by nobody: its last token saves nothing.
	var id, token int64
	if err := store.Pool().QueryRow(context.Background(), `SELECT id, token FROM all_jobs`).Scan(&id, &token); err != nil {
		t.Fatal(err)
	}
	if err := store.JobCheckpoint(context.Background(), id, token, []byte("late")); !errors.Is(err, pgstore.ErrLeaseLost) {
		t.Fatalf("checkpoint after the end: %v, want ErrLeaseLost", err)
	}
}

// A lane job handed off while every worker is busy waits in the pool,
// leased, and holds claims back; one handed off to a closing pool, or
// still waiting when it closes, goes back to its queue with its attempt
// handed back (I7), never lost in the process.
func TestHandedOffJobsAtCapacityAndAtStop(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	enqueue(t, store, 2, 3)
	ctx := context.Background()
	// Stand-ins for two jobs handed off: claimed, as lanes_advance claims.
	jobs := claim(t, store, 2)
	d := &Dispatcher{store: store, jobCtx: ctx, log: zaptest.NewLogger(t)}
	p := newPool(d.poolEnv(), d.log, Queue{Name: "q", Concurrency: 1, Lease: time.Minute, MaxRuntime: time.Hour})
	p.busy = 1 // the one worker is running something else

	p.adopt(workerJob(jobs[0]), time.Now())
	if len(p.ready) != 1 || p.free() != 0 || p.leases[jobs[0].Token] == nil {
		t.Fatalf("ready %d, free %d, leased %v; want the job waiting, leased, and no claim", len(p.ready), p.free(), p.leases[jobs[0].Token] != nil)
	}
	p.close()
	p.adopt(workerJob(jobs[1]), time.Now())
	if len(p.ready) != 0 || len(p.leases) != 0 {
		t.Fatalf("after close: ready %d, leases %d; want none", len(p.ready), len(p.leases))
	}
	if s := states(t, store); s["queued"] != 2 {
		t.Fatalf("states %v; want both jobs queued again", s)
	}
	var attempts int
	if err := store.Pool().QueryRow(ctx, `SELECT max(attempts) FROM all_jobs`).Scan(&attempts); err != nil || attempts != 0 {
		t.Fatalf("attempts %d (%v); want the attempts handed back", attempts, err)
	}
}

// A pool asks for a lane's next job only for a lane job that ended (not
// one retrying), of its own queue (a stolen job's lane belongs to its
// queue's pool), while the lane has kept this pool for less than
// laneHandoffWindow, and not once the pool is closing.
func TestHandoffAskedOnlyWithinItsBounds(t *testing.T) {
	d := &Dispatcher{jobCtx: context.Background(), log: zaptest.NewLogger(t)}
	p := newPool(d.poolEnv(), d.log, Queue{Name: "q", Concurrency: 1, Lease: time.Minute, MaxRuntime: 30 * time.Second})
	lane := func(queue string, chain time.Duration) *running {
		return &running{job: &workers.Job{Queue: queue, Ordered: true}, chain: time.Now().Add(-chain)}
	}
	done := pgstore.Outcome{Lane: &pgstore.LaneRef{}, State: "succeeded"}
	for _, c := range []struct {
		name string
		r    *running
		out  pgstore.Outcome
		want bool
	}{
		{"lane job succeeded", lane("q", 0), done, true},
		{"lane job dead", lane("q", 0), pgstore.Outcome{Lane: &pgstore.LaneRef{}, State: "dead"}, true},
		{"lane job retrying", lane("q", 0), pgstore.Outcome{Lane: &pgstore.LaneRef{}, State: "retrying"}, false},
		{"unordered job", lane("q", 0), pgstore.Outcome{State: "succeeded"}, false},
		{"stolen from another queue", lane("other", 0), done, false},
		{"lane kept the pool for the whole window", lane("q", laneHandoffWindow), done, false},
	} {
		h := p.handoff(c.r, c.out)
		if (h != nil) != c.want {
			t.Errorf("%s: handoff %+v, want %v", c.name, h, c.want)
		}
		if h != nil && (h.Queue != "q" || h.Lease != 30*time.Second) {
			t.Errorf("%s: handoff %+v, want queue q under the lease capped by max_runtime", c.name, h)
		}
	}
	p.close()
	if h := p.handoff(lane("q", 0), done); h != nil {
		t.Errorf("closed pool asked for a handoff: %+v", h)
	}
}

// busyPool ingests n jobs and starts a pool of one worker whose handler
// holds it until release is closed; it returns once the worker is busy,
// when the pool claims no more. started receives the id of each job the
// handler runs.
func busyPool(t *testing.T, store *pgstore.Store, n int) (d *Dispatcher, release chan struct{}, started chan int64) {
	t.Helper()
	enqueue(t, store, n, 3)
	release, started = make(chan struct{}), make(chan int64, n)
	d = start(t, store, 1, time.Minute, workers.HandlerFunc(func(_ context.Context, j *workers.Job) error {
		started <- j.ID
		<-release
		return nil
	}))
	<-started
	return d, release, started
}

// A handed-off job that waited in its pool for a worker longer than
// readyRestamp counts its max_runtime from when its handler starts, not
// from the handoff: the lease is capped at started_at + max_runtime, and
// the wait must not come out of the job's own time.
func TestHandedOffJobThatWaitedRestartsItsClock(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	ctx := context.Background()
	d, release, started := busyPool(t, store, 2)
	// The other job, claimed as a handoff claims it, as if handed off
	// a minute ago.
	jobs := claim(t, store, 1)
	if _, err := store.Pool().Exec(ctx, `UPDATE jobs SET started_at = now() - interval '50 seconds' WHERE id = $1`, jobs[0].ID); err != nil {
		t.Fatal(err)
	}
	p := d.pools["q"]
	p.adopt(workerJob(jobs[0]), time.Now())
	p.mu.Lock()
	if len(p.ready) != 1 {
		p.mu.Unlock()
		t.Fatalf("ready %d; want the handed-off job waiting for the busy worker", len(p.ready))
	}
	p.ready[0].waiting = time.Now().Add(-2 * readyRestamp)
	p.mu.Unlock()
	close(release)
	if id := <-started; id != jobs[0].ID {
		t.Fatalf("started job %d, want the handed-off job %d", id, jobs[0].ID)
	}
	var ranFor time.Duration
	if err := store.Pool().QueryRow(ctx, `SELECT extract(epoch FROM now() - started_at)::float8 * interval '1 second'
		FROM all_jobs WHERE id = $1`, jobs[0].ID).Scan(&ranFor); err != nil {
		t.Fatal(err)
	}
	if ranFor > 10*time.Second {
		t.Fatalf("started_at %s ago; want the clock restarted when the handler started", ranFor)
	}
}

// The restarts asked for while one is written go out together, and each
// attempt learns its own answer: a held one is restarted, one whose lease
// expired meanwhile is lost, whatever the others in its statement.
func TestRestartsOfWaitingJobsAreAnsweredEach(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	ctx := context.Background()
	d, release, _ := busyPool(t, store, 3)
	defer close(release)
	jobs := claim(t, store, 2)
	held, lost := jobs[0], jobs[1]
	if _, err := store.Pool().Exec(ctx, `UPDATE jobs SET started_at = now() - interval '50 seconds',
		lease_expires_at = CASE WHEN id = $2 THEN now() - interval '1 second' ELSE lease_expires_at END
		WHERE id = ANY($1)`, []int64{held.ID, lost.ID}, lost.ID); err != nil {
		t.Fatal(err)
	}
	p := d.pools["q"]
	p.mu.Lock()
	asks := []restampAsk{{r: p.hold(workerJob(held), time.Now()), done: make(chan error, 1)},
		{r: p.hold(workerJob(lost), time.Now()), done: make(chan error, 1)}}
	p.mu.Unlock()
	p.restamps.mu.Lock()
	p.restamps.pending = append(p.restamps.pending, asks...) // one batch
	p.restamps.mu.Unlock()
	p.restamps.kick <- struct{}{}
	if err := <-asks[0].done; err != nil {
		t.Errorf("held attempt: %v, want restarted", err)
	}
	if err := <-asks[1].done; !errors.Is(err, pgstore.ErrLeaseLost) {
		t.Errorf("expired attempt: %v, want %v", err, pgstore.ErrLeaseLost)
	}
	var restarted, untouched bool
	if err := store.Pool().QueryRow(ctx, `SELECT bool_or(id = $1 AND started_at > now() - interval '10 seconds'),
		bool_or(id = $2 AND started_at < now() - interval '40 seconds') FROM jobs WHERE id IN ($1, $2)`,
		held.ID, lost.ID).Scan(&restarted, &untouched); err != nil {
		t.Fatal(err)
	}
	if !restarted || !untouched {
		t.Errorf("held job restarted %v, expired job left alone %v; want both", restarted, untouched)
	}
	for _, a := range asks {
		p.finish(a.r.job.Token)
	}
}

// A lane keeps its pool through handoffs only for the handoff window;
// then its next job queues behind the other keys'. Long lanes fill a
// one-worker pool's leases (4) with handoff chains; the head of a key
// queued behind them must run long before they drain, which without
// the window it would only after four whole lanes.
func TestLaneYieldsItsPoolAfterTheHandoffWindow(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	const lanes, perLane = 8, 100
	lane := &pgstore.LanePolicy{Policy: "none", OnDead: "continue", GapTimeout: time.Minute, GapPolicy: "park"}
	var b pgstore.IngestBatch
	for i := range lanes*perLane + 1 {
		key := fmt.Sprintf("long-%d", i%lanes)
		if i == lanes*perLane {
			key = "late"
		}
		b.Jobs = append(b.Jobs, pgstore.NewJob{Route: "r", Kind: "k", Queue: "q", Key: key, DedupeKey: fmt.Sprint(i),
			Payload: []byte("{}"), MaxAttempts: 3, Topic: "t", Offset: int64(i), Lane: lane})
	}
	if _, err := store.IngestCommit(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	late := make(chan int64, 1)
	d := newQueues(t, store, workers.HandlerFunc(func(_ context.Context, j *workers.Job) error {
		if n := calls.Add(1); j.Key == "late" {
			late <- n
		}
		return nil
	}), Queue{Name: "q", Concurrency: 1, Lease: time.Minute, MaxRuntime: time.Minute, PollInterval: 50 * time.Millisecond})
	d.pools["q"].handoffWindow = 50 * time.Millisecond
	run(t, d)
	select {
	case n := <-late:
		if n > 4*perLane {
			t.Fatalf("the late key ran as job %d; want it before the first four lanes drained (%d jobs)", n, 4*perLane)
		}
		t.Logf("the late key ran as job %d of %d", n, lanes*perLane+1)
	case <-time.After(time.Minute):
		t.Fatalf("the late key never ran (%d jobs ran)", calls.Load())
	}
}

// A job cancelled while it runs learns it at the pool's next heartbeat,
// with cause workers.ErrCancelled (not a lost lease), and ends cancelled.
func TestCancelledJobsHandlerIsToldWhy(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	enqueue(t, store, 1, 5)
	ctx := context.Background()
	started := make(chan *workers.Job, 1)
	causeC := make(chan error, 1)
	start(t, store, 1, 3*time.Second, workers.HandlerFunc(func(ctx context.Context, j *workers.Job) error {
		started <- j
		<-ctx.Done()
		causeC <- context.Cause(ctx)
		return ctx.Err()
	}))
	job := <-started
	if err := store.JobCancel(ctx, job.ID, "test"); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-causeC:
		if !errors.Is(cause, workers.ErrCancelled) {
			t.Fatalf("cause = %v, want workers.ErrCancelled", cause)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the handler was never told of the cancel")
	}
	if s := states(t, store); s["cancelled"] != 1 {
		t.Fatalf("states %v, want the job cancelled", s)
	}
}

// A Go handler's result is kept with its success, cut at the route's
// result_max_bytes; a failed attempt's result is not kept.
func TestResultIsKeptWithASuccess(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	enqueue(t, store, 1, 3)
	d, err := New(Config{
		Queues: []Queue{{Name: "q", Concurrency: 1, Lease: time.Minute, MaxRuntime: time.Minute,
			PollInterval: 50 * time.Millisecond}},
		Backoff: map[string]Backoff{"r": {Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond}},
		Resolve: func(*workers.Job) (workers.Handler, error) {
			return workers.HandlerFunc(func(_ context.Context, j *workers.Job) error {
				j.SetResult("text/plain", []byte(fmt.Sprintf("attempt %d: 0123456789", j.Attempt)))
				if j.Attempt == 1 {
					return errors.New("transient: again")
				}
				return nil
			}), nil
		},
		Grace:          200 * time.Millisecond,
		ResultMaxBytes: map[string]int{"r": 12},
	}, store, zaptest.NewLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	run(t, d)
	testenv.Eventually(t, 30*time.Second, "the job to succeed", func() bool { return states(t, store)["succeeded"] == 1 })
	var id int64
	if err := store.Pool().QueryRow(context.Background(), `SELECT id FROM all_jobs`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	ct, data, err := store.JobResult(context.Background(), id)
	if err != nil || ct != "text/plain" || string(data) != "attempt 2: 0" {
		t.Fatalf("result %q %q (%v), want the second attempt's, cut at 12 bytes", ct, data, err)
	}
}

// A worker freed on a dry queue claims nothing: new work wakes its pool,
// or the poll finds it. Jobs that arrive one at a time, each announced
// by its ingest's notification, cost one claim each, not one more for
// every worker they free. Claims are counted as scans of the claim
// index, which no other statement of a dispatcher reads; the
// dispatcher's own store is closed first, so that its connections'
// statistics are flushed.
func TestFreedWorkerOnADryQueueClaimsNothing(t *testing.T) {
	t.Parallel()
	schema := testenv.Schema(t)
	store := testenv.Store(t, schema)
	own := testenv.Store(t, schema)
	var h counter
	d := run(t, newQueues(t, own, &h, Queue{Name: "q", Concurrency: 8, Lease: 5 * time.Second,
		MaxRuntime: time.Minute, PollInterval: time.Hour}))
	const jobs = 20
	for i := range jobs {
		expected := int64(i)
		if i == 0 {
			expected = -1
		}
		b := pgstore.IngestBatch{Group: "g", Jobs: []pgstore.NewJob{{Route: "r", Kind: "k", Queue: "q", Key: fmt.Sprint(i),
			DedupeKey: fmt.Sprint(i), Payload: []byte("{}"), MaxAttempts: 3, Topic: "t", Offset: int64(i)}},
			Offsets: []pgstore.OffsetAdvance{{Topic: "t", Partition: 0, Expected: expected, Next: int64(i + 1)}}}
		if _, err := store.IngestCommit(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 10*time.Second, "the job to succeed", func() bool { return states(t, store)["succeeded"] == i+1 })
	}
	if err := d.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	own.Close()
	scans := func() int64 {
		var n int64
		if err := store.Pool().QueryRow(context.Background(), `SELECT idx_scan FROM pg_stat_user_indexes
			WHERE schemaname = current_schema() AND indexrelname = 'jobs_runnable_idx'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Closed connections flush their statistics as their backends exit.
	last := int64(-1)
	testenv.Eventually(t, 10*time.Second, "the claims' statistics to settle", func() bool {
		n := scans()
		settled := n == last && n >= jobs
		last = n
		time.Sleep(200 * time.Millisecond)
		return settled
	})
	t.Logf("%d claims for %d jobs that arrived one at a time", last, jobs)
	// One claim a job, and the pool's first at its start.
	if last > jobs+2 {
		t.Fatalf("%d claims for %d jobs that arrived one at a time: freed workers claim on a dry queue", last, jobs)
	}
}

// A lane's next job queued by its head's completion (not handed off:
// here no pool ever takes a handoff) is claimed once that completion is
// settled, not at the next poll: a lane job's settled outcome is news to
// its pool even on a dry queue.
func TestLaneNextJobQueuedByACompletionIsClaimedAtOnce(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	const jobs = 5
	lane := &pgstore.LanePolicy{Policy: "none", OnDead: "continue", GapTimeout: time.Minute, GapPolicy: "park"}
	var b pgstore.IngestBatch
	for i := range jobs {
		b.Jobs = append(b.Jobs, pgstore.NewJob{Route: "r", Kind: "k", Queue: "q", Key: "one", DedupeKey: fmt.Sprint(i),
			Payload: []byte("{}"), MaxAttempts: 3, Topic: "t", Offset: int64(i), Lane: lane})
	}
	if _, err := store.IngestCommit(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	var h counter
	d := newQueues(t, store, &h, Queue{Name: "q", Concurrency: 4, Lease: time.Minute, MaxRuntime: time.Minute,
		PollInterval: time.Hour})
	d.pools["q"].handoffWindow = 0
	run(t, d)
	testenv.Eventually(t, 10*time.Second, "the lane's jobs to succeed one after another", func() bool {
		return states(t, store)["succeeded"] == jobs
	})
}

// idlePool starts a dispatcher of one pool of 4 workers on queue q, which
// polls once an hour, and waits for its first claim to find q dry: its
// workers may then be lent.
func idlePool(t *testing.T) (*pgstore.Store, *Dispatcher, *pool) {
	t.Helper()
	store := testenv.MigratedStore(t)
	var h counter
	d := startQueues(t, store, &h, Queue{Name: "q", Concurrency: 4, Lease: time.Minute, MaxRuntime: time.Minute,
		PollInterval: time.Hour})
	p := d.pools["q"]
	testenv.Eventually(t, 10*time.Second, "the pool's first claim to find the queue dry", p.idle.Load)
	return store, d, p
}

// A pool that found its queue dry lends its idle workers to the claim a
// stored batch carries: the batch's jobs run on them without a claim of
// the pool's own, and the workers come back, as they do when the claim
// did not run. A pool with a claim of its own to make lends nothing.
func TestIngestCarriedClaimRunsOnLentWorkers(t *testing.T) {
	t.Parallel()
	store, d, p := idlePool(t)
	reserved := func() int { p.mu.Lock(); defer p.mu.Unlock(); return p.reserved }
	claims := d.IngestClaims([]string{"q", "unworked"})
	if len(claims) != 1 || claims[0].Limit != 4 || reserved() != 4 {
		t.Fatalf("lent %+v with %d reserved; want one claim of the pool's 4 idle workers", claims, reserved())
	}
	if more := d.IngestClaims([]string{"q"}); len(more) != 0 {
		t.Fatalf("lent workers already lent: %+v", more)
	}
	var b pgstore.IngestBatch
	b.Group = testenv.Name("g")
	for i := range 2 {
		b.Jobs = append(b.Jobs, pgstore.NewJob{Route: "r", Kind: "k", Queue: "q", DedupeKey: fmt.Sprint(i),
			Payload: []byte("{}"), MaxAttempts: 3, Topic: "t", Offset: int64(i)})
	}
	b.Offsets = []pgstore.OffsetAdvance{{Topic: "t", Partition: 0, Expected: -1, Next: 2}}
	b.Claims = claims
	if _, err := store.IngestCommit(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if !claims[0].Ran || len(claims[0].Claimed) != 2 {
		t.Fatalf("the carried claim ran %v and took %d jobs, want 2", claims[0].Ran, len(claims[0].Claimed))
	}
	d.IngestClaimed(claims)
	testenv.Eventually(t, 10*time.Second, "both jobs to succeed", func() bool { return states(t, store)["succeeded"] == 2 })
	// A full claim wakes the pool, whose own claim reserves for a moment.
	testenv.Eventually(t, 10*time.Second, "the lent workers to come back", func() bool { return reserved() == 0 })
	// Lent to a batch whose claim did not run: given back.
	testenv.Eventually(t, 10*time.Second, "the pool to be idle again", p.idle.Load)
	claims = d.IngestClaims([]string{"q"})
	if len(claims) != 1 {
		t.Fatalf("lent %+v, want one claim", claims)
	}
	d.IngestClaimed(claims)
	// The pool is woken to claim for itself, which reserves its workers
	// for a moment: they come back once that claim finds nothing.
	testenv.Eventually(t, 10*time.Second, "the workers lent to a claim that did not run to come back", func() bool {
		return reserved() == 0 && p.idle.Load()
	})
}

// A wake-up that comes while every worker is lent to a batch's claim finds
// none free; when that claim comes back short (it ran, and took fewer
// jobs than it was lent workers for: here none), the workers it gives back
// claim for the wake-up at once, not at the next poll.
func TestWakeWhileLentIsClaimedWhenTheWorkersComeBack(t *testing.T) {
	t.Parallel()
	store, d, _ := idlePool(t)
	claims := d.IngestClaims([]string{"q"})
	if len(claims) != 1 || claims[0].Limit != 4 {
		t.Fatalf("lent %+v; want one claim of the pool's 4 idle workers", claims)
	}
	// Another process stores a job and announces it: the pool has no
	// worker free to claim it.
	b := pgstore.IngestBatch{Group: testenv.Name("g"), Jobs: []pgstore.NewJob{{Route: "r", Kind: "k", Queue: "q",
		DedupeKey: "other", Payload: []byte("{}"), MaxAttempts: 3, Topic: "t", Offset: 0}},
		Offsets: []pgstore.OffsetAdvance{{Topic: "t", Partition: 0, Expected: -1, Next: 1}}}
	if _, err := store.IngestCommit(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	d.Wake("q")
	time.Sleep(100 * time.Millisecond) // the wake-up is taken with no worker free
	// The batch's claim ran and took nothing (its jobs were scheduled
	// ahead, say).
	claims[0].Ran = true
	d.IngestClaimed(claims)
	testenv.Eventually(t, 10*time.Second, "the other process's job to succeed", func() bool {
		return states(t, store)["succeeded"] == 1
	})
}

// RetryAfter sets the next attempt's time, capped by backoff.max; a capped
// one says so in the job's error, which must not read as if the retry
// were that far off.
func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "100")
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close) // after the parallel subtests
	target, err := workers.NewHTTPTarget(workers.HTTPTargetConfig{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		h       workers.Handler
		max     time.Duration
		wait    time.Duration // the next attempt's, within a minute's or a second's slack
		errFrom string
	}{
		{name: "go handler", max: time.Hour, wait: 30 * time.Minute, errFrom: "retry after 30m0s: 429",
			h: workers.HandlerFunc(func(context.Context, *workers.Job) error {
				return workers.RetryAfter(30*time.Minute, errors.New("429"))
			})},
		{name: "http target, capped", h: target, max: 30 * time.Second, wait: 30 * time.Second,
			errFrom: "backoff.max caps the retry at 30s: retry after 1m40s: http target: status 503"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := testenv.MigratedStore(t)
			enqueue(t, store, 1, 5)
			d, err := New(Config{
				Queues:  []Queue{{Name: "q", Concurrency: 1, Lease: 5 * time.Second, MaxRuntime: time.Minute, PollInterval: 50 * time.Millisecond}},
				Backoff: map[string]Backoff{"r": {Initial: time.Millisecond, Max: tc.max}},
				Grace:   time.Second,
				Resolve: func(*workers.Job) (workers.Handler, error) { return tc.h, nil },
			}, store, zaptest.NewLogger(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			run(t, d)
			testenv.Eventually(t, 30*time.Second, "retrying", func() bool { return states(t, store)["retrying"] == 1 })
			var wait time.Duration
			var lastError string
			if err := store.Pool().QueryRow(context.Background(),
				`SELECT (extract(epoch FROM scheduled_at - now()) * 1000)::bigint * interval '1 millisecond', last_error FROM all_jobs`).
				Scan(&wait, &lastError); err != nil {
				t.Fatal(err)
			}
			if slack := tc.wait / 30; wait < tc.wait-slack || wait > tc.wait {
				t.Errorf("next attempt in %s, want ~%s", wait, tc.wait)
			}
			if !strings.HasPrefix(lastError, tc.errFrom) {
				t.Errorf("last_error %q, want it to start %q", lastError, tc.errFrom)
			}
		})
	}
}

// SPEC §5: a permanent 4xx's error holds the status and the first 4 KiB of
// the body, whole: the text before the body does not eat into it. The
// job's history keeps each attempt's error to 1 KiB.
func TestPermanentErrorHoldsTheFirst4KiBOfTheBody(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	enqueue(t, store, 1, 5)
	body := strings.Repeat("0123456789abcdef", 320) // 5 KiB
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, body)
	}))
	defer srv.Close()
	target, err := workers.NewHTTPTarget(workers.HTTPTargetConfig{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	start(t, store, 1, 5*time.Second, target)
	testenv.Eventually(t, 30*time.Second, "dead", func() bool { return states(t, store)["dead"] == 1 })
	var lastError, entryError, history string
	if err := store.Pool().QueryRow(context.Background(), `SELECT j.last_error, d.last_error, j.errors->0->>'error'
		FROM all_jobs j JOIN dlq_entries d ON d.job_id = j.id`).Scan(&lastError, &entryError, &history); err != nil {
		t.Fatal(err)
	}
	want := "permanent: http target: status 404 Not Found: " + body[:4096]
	if lastError != want || entryError != want {
		t.Fatalf("last_error of %d bytes (DLQ entry's %d), want the %d of the status and the body's first 4096 bytes:\n%.120q…",
			len(lastError), len(entryError), len(want), lastError)
	}
	if history != want[:1024] {
		t.Fatalf("the attempt's history entry is %d bytes, want the error's first 1024", len(history))
	}
}
