package lanes_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"

	switchyard "github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/dlq"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
	"github.com/switchyard-dev/switchyard/workers"
)

// recorder is a Go handler that records every call and checks, as calls
// happen, that no two jobs of one key ever run at once (I3).
type recorder struct {
	mu             sync.Mutex
	running        map[string]bool
	starts         map[string][]int64 // versions (or offsets) in start order, per key
	overlap        atomic.Int64
	inFlight, peak atomic.Int64
	calls          atomic.Int64
	work           func(ctx context.Context, j *workers.Job) error
}

func newRecorder(work func(ctx context.Context, j *workers.Job) error) *recorder {
	return &recorder{running: map[string]bool{}, starts: map[string][]int64{}, work: work}
}

func (r *recorder) Handle(ctx context.Context, j *workers.Job) error {
	r.mu.Lock()
	if r.running[j.Key] {
		r.overlap.Add(1)
	}
	r.running[j.Key] = true
	v := j.Source.Offset
	if j.Version != nil {
		v = *j.Version
	}
	r.starts[j.Key] = append(r.starts[j.Key], v)
	r.mu.Unlock()
	n := r.inFlight.Add(1)
	for p := r.peak.Load(); n > p && !r.peak.CompareAndSwap(p, n); p = r.peak.Load() {
	}
	r.calls.Add(1)
	var err error
	if r.work != nil {
		err = r.work(ctx, j)
	}
	r.inFlight.Add(-1)
	r.mu.Lock()
	r.running[j.Key] = false
	r.mu.Unlock()
	return err
}

func (r *recorder) startsOf(key string) []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int64(nil), r.starts[key]...)
}

// engine starts an in-process engine with one ordered route.
func engine(t *testing.T, schema, topic, route string, concurrency int, h workers.Handler) *switchyard.Engine {
	t.Helper()
	cfg, err := config.Parse(fmt.Appendf(nil, `
kafka: {group: g-%s}
postgres: {schema: %s, max_conns: 8}
http: {listen: "off"}
shutdown_grace: 1s
queues:
  q: {concurrency: %d, lease: 5s, poll_interval: 50ms}
routes:
  - topic: %s
    kind: k
    queue: q
    ordered: true
    backoff: {initial: 20ms, max: 100ms}
    target: {go: true}
%s`, schema, schema, concurrency, topic, route), os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := switchyard.New(cfg, switchyard.Options{Logger: zaptest.NewLogger(t), StatsInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Register("k", h); err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Stop(context.Background()) })
	return eng
}

func rec(partition int32, key string, value string) *kgo.Record {
	return &kgo.Record{Partition: partition, Key: []byte(key), Value: []byte(value)}
}

func countState(t *testing.T, store *pgstore.Store, state string) int {
	t.Helper()
	var n int
	if err := store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM all_jobs WHERE state = $1`, state).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// One partition, 16 workers, 1,000 keys: about 16 jobs run at once, one
// per key, each key's jobs in offset order.
func TestParallelAcrossKeysBeyondPartitions(t *testing.T) {
	t.Parallel()
	schema, topic := testenv.Schema(t), testenv.Topic(t, 1)
	store := testenv.Store(t, schema)
	var recs []*kgo.Record
	for i := range 3000 {
		recs = append(recs, rec(0, fmt.Sprintf("c%d", i%1000), fmt.Sprintf(`{"n":%d}`, i)))
	}
	testenv.Produce(t, topic, recs...)
	r := newRecorder(func(ctx context.Context, j *workers.Job) error {
		time.Sleep(3 * time.Millisecond) // simulated work, so jobs overlap
		return nil
	})
	engine(t, schema, topic, "", 16, r)
	testenv.Eventually(t, 2*time.Minute, "3000 succeeded", func() bool { return countState(t, store, "succeeded") == 3000 })
	if o := r.overlap.Load(); o != 0 {
		t.Fatalf("%d times two jobs of one key ran at once", o)
	}
	for i := range 1000 {
		s := r.startsOf(fmt.Sprintf("c%d", i))
		if len(s) != 3 || !sort.SliceIsSorted(s, func(a, b int) bool { return s[a] < s[b] }) {
			t.Fatalf("key c%d started at offsets %v, want 3 in increasing order", i, s)
		}
	}
	t.Logf("peak in flight: %d of 16 workers, 1 partition", r.peak.Load())
	if p := r.peak.Load(); p < 8 {
		t.Fatalf("peak in flight %d: lanes are not running keys in parallel", p)
	}
}

// Two processes (engines) on a 4-partition topic with many keys: order and
// exclusivity hold across processes.
func TestOrderAcrossTwoProcesses(t *testing.T) {
	t.Parallel()
	schema, topic := testenv.Schema(t), testenv.Topic(t, 4)
	store := testenv.Store(t, schema)
	route := `    version: {field: v, policy: newer}`
	r := newRecorder(nil)
	engine(t, schema, topic, route, 8, r)
	engine(t, schema, topic, route, 8, r)
	var recs []*kgo.Record
	for v := 1; v <= 10; v++ {
		for k := range 100 {
			recs = append(recs, rec(int32(k%4), fmt.Sprintf("k%d", k), fmt.Sprintf(`{"v":%d}`, v)))
		}
	}
	testenv.Produce(t, topic, recs...)
	testenv.Eventually(t, 2*time.Minute, "1000 succeeded", func() bool { return countState(t, store, "succeeded") == 1000 })
	if o := r.overlap.Load(); o != 0 {
		t.Fatalf("%d overlaps across processes", o)
	}
	for k := range 100 {
		s := r.startsOf(fmt.Sprintf("k%d", k))
		for i := 1; i < len(s); i++ {
			if s[i] <= s[i-1] {
				t.Fatalf("key k%d started versions %v: not increasing", k, s)
			}
		}
		if len(s) != 10 {
			t.Fatalf("key k%d ran %d jobs, want 10", k, len(s))
		}
	}
}

// newer: out-of-order and duplicate versions that are not newer than the
// last applied one end skipped and are never delivered.
func TestNewerSkipsStaleAndDuplicateVersions(t *testing.T) {
	t.Parallel()
	schema, topic := testenv.Schema(t), testenv.Topic(t, 1)
	store := testenv.Store(t, schema)
	gate := make(chan struct{})
	r := newRecorder(func(ctx context.Context, j *workers.Job) error {
		if *j.Version == 5 {
			<-gate // hold v5 as head while older versions arrive behind it
		}
		return nil
	})
	engine(t, schema, topic, `    version: {field: v, policy: newer}`, 4, r)
	testenv.Produce(t, topic, rec(0, "a", `{"v":5}`))
	testenv.Eventually(t, time.Minute, "v5 running", func() bool { return countState(t, store, "running") == 1 })
	testenv.Produce(t, topic, rec(0, "a", `{"v":3}`), rec(0, "a", `{"v":5}`), rec(0, "a", `{"v":7}`), rec(0, "a", `{"v":6}`), rec(0, "a", `{"v":4}`))
	testenv.Eventually(t, time.Minute, "all ingested", func() bool { return countState(t, store, "waiting") == 5 })
	close(gate)
	testenv.Eventually(t, time.Minute, "lane drained", func() bool {
		return countState(t, store, "succeeded")+countState(t, store, "skipped") == 6
	})
	if got := r.startsOf("a"); fmt.Sprint(got) != "[5 6 7]" {
		t.Fatalf("delivered versions %v, want [5 6 7] (3, 4 and the second 5 are stale)", got)
	}
	if n := countState(t, store, "skipped"); n != 3 {
		t.Fatalf("skipped = %d, want 3", n)
	}
}

// strict: a gap holds the lane for gap_timeout, then parks (DLQ reason
// gap) and the lane continues; a version arriving in time fills the gap.
// The parked job, never applied, runs when re-driven.
func TestStrictGapParksAfterTimeout(t *testing.T) {
	t.Parallel()
	schema, topic := testenv.Schema(t), testenv.Topic(t, 1)
	store := testenv.Store(t, schema)
	r := newRecorder(nil)
	engine(t, schema, topic, `    version: {field: v, policy: strict}
    gap_timeout: 300ms
    gap_policy: park`, 4, r)
	testenv.Produce(t, topic, rec(0, "a", `{"v":1}`), rec(0, "a", `{"v":3}`), rec(0, "b", `{"v":1}`), rec(0, "b", `{"v":3}`))
	testenv.Eventually(t, time.Minute, "a1 and b1 done", func() bool { return countState(t, store, "succeeded") == 2 })
	testenv.Produce(t, topic, rec(0, "b", `{"v":2}`)) // b's gap is filled in time
	testenv.Eventually(t, time.Minute, "gap parked", func() bool {
		var n int
		_ = store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM dlq_entries WHERE reason = 'gap'`).Scan(&n)
		return n == 1
	})
	testenv.Eventually(t, time.Minute, "b drained", func() bool { return len(r.startsOf("b")) == 3 })
	if got := r.startsOf("a"); fmt.Sprint(got) != "[1]" {
		t.Fatalf("a delivered %v, want [1] (v3 parked for the gap)", got)
	}
	if got := r.startsOf("b"); fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("b delivered %v, want [1 2 3]", got)
	}
	var entry int64
	if err := store.Pool().QueryRow(context.Background(), `SELECT id FROM dlq_entries WHERE reason = 'gap'`).Scan(&entry); err != nil {
		t.Fatal(err)
	}
	if _, err := store.DLQRedrive(context.Background(), entry, "test"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "a's re-driven version 3 delivered", func() bool { return len(r.startsOf("a")) == 2 })
	if got := r.startsOf("a"); fmt.Sprint(got) != "[1 3]" {
		t.Fatalf("a delivered %v after the re-drive, want [1 3]", got)
	}
}

// A dead head: under continue the lane moves on; under block it holds
// until the dead job is re-driven (and runs again, in place, first) or
// discarded.
func TestDeadHeadContinueAndBlock(t *testing.T) {
	for _, policy := range []string{"continue", "block"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			schema, topic := testenv.Schema(t), testenv.Topic(t, 1)
			store := testenv.Store(t, schema)
			var healed atomic.Bool
			r := newRecorder(func(ctx context.Context, j *workers.Job) error {
				if *j.Version == 1 && !healed.Load() {
					return workers.Permanent(errors.New("downstream rejected v1"))
				}
				return nil
			})
			engine(t, schema, topic, `    version: {field: v, policy: newer}
    on_dead: `+policy, 2, r)
			testenv.Produce(t, topic, rec(0, "a", `{"v":1}`), rec(0, "a", `{"v":2}`), rec(0, "b", `{"v":1}`), rec(0, "b", `{"v":2}`))
			if policy == "continue" {
				testenv.Eventually(t, time.Minute, "v2s ran", func() bool { return countState(t, store, "succeeded") == 2 })
				if n := countState(t, store, "dead"); n != 2 {
					t.Fatalf("dead = %d, want 2", n)
				}
				return
			}
			testenv.Eventually(t, time.Minute, "both lanes blocked", func() bool {
				b, _ := store.LaneBlocked(context.Background())
				return b[topic] == 2
			})
			if n := countState(t, store, "waiting"); n != 2 {
				t.Fatalf("waiting = %d, want 2: a blocked lane ran past its dead head", n)
			}
			svc := dlq.New(store, nil, nil)
			var entries []pgstore.DLQEntry
			entries, err := store.DLQList(context.Background(), pgstore.DLQFilter{Limit: 10})
			if err != nil || len(entries) != 2 {
				t.Fatalf("dlq entries %d, %v", len(entries), err)
			}
			healed.Store(true)
			byKey := map[string]int64{}
			for _, e := range entries {
				j, _ := store.JobGet(context.Background(), *e.JobID)
				byKey[j.Key] = e.ID
			}
			if _, err := svc.Redrive(context.Background(), byKey["a"], "test"); err != nil {
				t.Fatal(err)
			}
			if err := svc.Discard(context.Background(), byKey["b"], "test"); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, time.Minute, "lanes unblocked and drained", func() bool {
				return countState(t, store, "succeeded") == 3
			})
			if got := r.startsOf("a"); fmt.Sprint(got) != "[1 1 2]" {
				t.Fatalf("a started %v, want [1 1 2]: the re-driven head runs again before v2", got)
			}
			if got := r.startsOf("b"); fmt.Sprint(got) != "[1 2]" {
				t.Fatalf("b started %v, want [1 2]: discarding the head moves on", got)
			}
			if b, _ := store.LaneBlocked(context.Background()); b[topic] != 0 {
				t.Fatalf("still blocked: %v", b)
			}
		})
	}
}

// A head waiting in backoff delays only its own lane.
func TestBackoffDelaysOnlyItsLane(t *testing.T) {
	t.Parallel()
	schema, topic := testenv.Schema(t), testenv.Topic(t, 1)
	store := testenv.Store(t, schema)
	var fails atomic.Int64
	release := make(chan struct{})
	r := newRecorder(func(ctx context.Context, j *workers.Job) error {
		if j.Key == "slow" && j.Source.Offset == 0 {
			select {
			case <-release:
				return nil
			default:
				fails.Add(1)
				return workers.RetryAfter(50*time.Millisecond, errors.New("not yet"))
			}
		}
		return nil
	})
	engine(t, schema, topic, `    max_attempts: 1000`, 4, r)
	recs := []*kgo.Record{rec(0, "slow", `{}`), rec(0, "slow", `{}`)}
	for i := range 50 {
		recs = append(recs, rec(0, fmt.Sprintf("fast%d", i), `{}`))
	}
	testenv.Produce(t, topic, recs...)
	testenv.Eventually(t, time.Minute, "other lanes done", func() bool { return countState(t, store, "succeeded") == 50 })
	testenv.Eventually(t, time.Minute, "the slow head retried", func() bool { return len(r.startsOf("slow")) >= 3 })
	for _, off := range r.startsOf("slow") {
		if off != 0 {
			t.Fatalf("slow lane started %v: its second job must wait behind the retrying head", r.startsOf("slow"))
		}
	}
	close(release)
	testenv.Eventually(t, time.Minute, "slow lane done", func() bool { return countState(t, store, "succeeded") == 52 })
	s := r.startsOf("slow")
	if s[len(s)-1] != 1 {
		t.Fatalf("slow lane %v: offset 1 must start last", s)
	}
}

// Applier.Apply: a handler's write and the job's completion commit
// together, and a stale version is not applied.
func TestApplyCommitsWithCompletion(t *testing.T) {
	t.Parallel()
	schema, topic := testenv.Schema(t), testenv.Topic(t, 1)
	store := testenv.Store(t, schema)
	if _, err := store.Pool().Exec(context.Background(), `CREATE TABLE customer (id text PRIMARY KEY, version bigint)`); err != nil {
		t.Fatal(err)
	}
	var applier *switchyard.Applier
	var ready sync.WaitGroup
	ready.Add(1)
	h := workers.HandlerFunc(func(ctx context.Context, j *workers.Job) error {
		ready.Wait()
		err := applier.Apply(ctx, j, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO customer VALUES ($1, $2)
				ON CONFLICT (id) DO UPDATE SET version = excluded.version`, j.Key, *j.Version)
			return err
		})
		if errors.Is(err, switchyard.ErrStale) {
			return nil
		}
		return err
	})
	eng := engine(t, schema, topic, `    version: {field: v, policy: newer}`, 2, h)
	applier = eng.Applier()
	ready.Done()
	testenv.Produce(t, topic, rec(0, "a", `{"v":2}`), rec(0, "a", `{"v":9}`), rec(0, "b", `{"v":4}`))
	testenv.Eventually(t, time.Minute, "applied", func() bool { return countState(t, store, "succeeded") == 3 })
	var v int64
	if err := store.Pool().QueryRow(context.Background(), `SELECT version FROM customer WHERE id = 'a'`).Scan(&v); err != nil || v != 9 {
		t.Fatalf("customer a at version %d (%v), want 9", v, err)
	}
	var last int64
	if err := store.Pool().QueryRow(context.Background(), `SELECT last_version FROM lanes WHERE key = 'a'`).Scan(&last); err != nil || last != 9 {
		t.Fatalf("lane a last applied %d (%v), want 9", last, err)
	}
}

// A hot key (half of all traffic) holds at most one worker, and the other
// keys run beside it instead of queueing behind its backlog.
func TestHotKeyTakesOneWorker(t *testing.T) {
	t.Parallel()
	schema, topic := testenv.Schema(t), testenv.Topic(t, 1)
	store := testenv.Store(t, schema)
	var hotNow, hotPeak atomic.Int64
	r := newRecorder(func(ctx context.Context, j *workers.Job) error {
		if j.Key == "hot" {
			n := hotNow.Add(1)
			defer hotNow.Add(-1)
			for p := hotPeak.Load(); n > p && !hotPeak.CompareAndSwap(p, n); p = hotPeak.Load() {
			}
		}
		time.Sleep(2 * time.Millisecond) // simulated work
		return nil
	})
	var recs []*kgo.Record
	for i := range 400 {
		recs = append(recs, rec(0, "hot", `{}`), rec(0, fmt.Sprintf("k%d", i), `{}`))
	}
	testenv.Produce(t, topic, recs...)
	engine(t, schema, topic, "", 8, r)
	testenv.Eventually(t, 2*time.Minute, "the other keys done", func() bool {
		var n int
		_ = store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM all_jobs WHERE key <> 'hot' AND state = 'succeeded'`).Scan(&n)
		return n == 400
	})
	hotDone := len(r.startsOf("hot"))
	t.Logf("when the 400 other keys were done, the hot key had started %d of its 400 jobs", hotDone)
	if hotDone >= 400 {
		t.Fatal("the other keys waited for the hot key's backlog")
	}
	testenv.Eventually(t, 2*time.Minute, "the hot key done", func() bool { return countState(t, store, "succeeded") == 800 })
	if p := hotPeak.Load(); p != 1 || r.overlap.Load() != 0 {
		t.Fatalf("hot key ran %d at once (overlaps %d), want 1", p, r.overlap.Load())
	}
}
