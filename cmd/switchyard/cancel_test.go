package main

import (
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// TestCancelStopsARunningAttemptAtOnce: SPEC §6 prompt cancel, over two
// processes. Two jobs hang at a target that answers only when its
// request is cancelled; leases are a minute long, so no heartbeat comes
// in time. POST /v1/jobs/{id}/cancel to one process aborts each HTTP
// attempt within a second, whichever process runs it; the jobs end
// cancelled, are never retried, and the processes count the outcome
// cancelled.
func TestCancelStopsARunningAttemptAtOnce(t *testing.T) {
	t.Parallel()
	store, topic, tg, aborted, addrs := hangingFleet(t, 2, 1, false)
	testenv.Produce(t, topic, records(0, 2)...)
	// One worker each: the two jobs run in the two processes.
	testenv.Eventually(t, 60*time.Second, "both jobs to be running at the target", func() bool {
		return len(tg.received()) == 2
	})
	for _, call := range tg.received() {
		start := time.Now()
		code, body := api(t, addrs[0], "POST", fmt.Sprintf("/v1/jobs/%d/cancel", call.JobID))
		if code != http.StatusOK {
			t.Fatalf("cancel job %d: %d %s", call.JobID, code, body)
		}
		testenv.Eventually(t, 5*time.Second, fmt.Sprintf("job %d's attempt to be aborted", call.JobID), func() bool {
			_, ok := aborted()[call.JobID]
			return ok
		})
		took := aborted()[call.JobID].Sub(start)
		t.Logf("job %d: attempt aborted %s after the cancel", call.JobID, took.Round(time.Millisecond))
		if took > time.Second {
			t.Fatalf("job %d's attempt was aborted %s after the cancel, want within 1 s", call.JobID, took)
		}
	}
	testenv.Eventually(t, 10*time.Second, "the processes to count two cancelled attempts", func() bool {
		return cancelledAttempts(t, addrs) == 2
	})
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'cancelled'`); n != 2 {
		t.Fatalf("%d cancelled jobs, want 2", n)
	}
	time.Sleep(500 * time.Millisecond)
	if calls := tg.received(); len(calls) != 2 {
		t.Fatalf("%d calls at the target, want 2: a cancelled job is never retried", len(calls))
	}
}

// hangingFleet runs two processes of one config: queue q of concurrency
// workers fed by a new topic of partitions partitions (ordered by record
// key if ordered), leases of a minute (no heartbeat in a test's time), and
// a target whose calls answer only once their request is cancelled. It
// returns the processes' store, the topic, the target, when each job's
// attempt was aborted, and the processes' admin addresses.
func hangingFleet(t *testing.T, partitions int32, concurrency int, ordered bool) (*pgstore.Store, string, *target, func() map[int64]time.Time, []string) {
	schema := testenv.Schema(t)
	topic := testenv.Topic(t, partitions)
	tg := newTarget(t)
	var mu sync.Mutex
	aborted := map[int64]time.Time{}
	tg.setBehaviour(func(r *http.Request, c call) int {
		<-r.Context().Done()
		mu.Lock()
		aborted[c.JobID] = time.Now()
		mu.Unlock()
		return 0
	})
	cfg := writeConfig(t, testConfig{Group: testenv.Name("g"), Schema: schema, Listen: "127.0.0.1:0", Body: fmt.Sprintf(`queues:
  q: {concurrency: %d, lease: 60s, poll_interval: 100ms}
routes:
  - {topic: %q, kind: k, queue: q, dedupe: {field: id}, ordered: %t, target: {http: {url: %q, timeout: 5m}}}
`, concurrency, topic, ordered, tg.URL())})
	a, b := startRun(t, "run-a", cfg), startRun(t, "run-b", cfg)
	return testenv.Store(t, schema), topic, tg, func() map[int64]time.Time {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(aborted)
	}, []string{adminAddr(t, a), adminAddr(t, b)}
}

var reCancelled = regexp.MustCompile(`(?m)^switchyard_job_attempts_total\{kind="k",outcome="cancelled"\} (\d+)$`)

// cancelledAttempts sums the cancelled attempts the processes report.
func cancelledAttempts(t *testing.T, addrs []string) int {
	t.Helper()
	n := 0
	for _, addr := range addrs {
		_, body := api(t, addr, "GET", "/metrics")
		if m := reCancelled.FindStringSubmatch(body); m != nil {
			v, _ := strconv.Atoi(m[1])
			n += v
		}
	}
	return n
}

// A bulk cancel (POST /v1/jobs/cancel, chunks of jobs in one statement)
// stops the running attempts in every process at once, as a single
// cancel does, and the queued jobs never start: six attempts hang at the
// target across two processes, ten jobs wait behind them, and one
// request cancels all sixteen. The heartbeat (a third of a 60 s lease)
// cannot be what stops them.
func TestBulkCancelStopsRunningAttemptsInEveryProcess(t *testing.T) {
	t.Parallel()
	store, topic, tg, aborted, addrs := hangingFleet(t, 4, 3, false)
	testenv.Produce(t, topic, records(0, 16)...)
	testenv.Eventually(t, 60*time.Second, "six attempts running at the target and ten jobs queued", func() bool {
		return len(tg.received()) == 6 && testenv.Count(t, store, `SELECT count(*) FROM jobs WHERE state = 'queued'`) == 10
	})
	code, body := api(t, addrs[0], "POST", "/v1/jobs/cancel?queue=q&expect=16")
	if code != http.StatusOK || compactJSON(t, body) != `{"cancelled":16,"failed":[]}` {
		t.Fatalf("bulk cancel: %d %s", code, body)
	}
	testenv.Eventually(t, 5*time.Second, "the six running attempts to be aborted", func() bool {
		return len(aborted()) == 6
	})
	testenv.Eventually(t, 10*time.Second, "the processes to count six cancelled attempts", func() bool {
		return cancelledAttempts(t, addrs) == 6
	})
	if n := testenv.Count(t, store, `SELECT count(*) FROM jobs WHERE state = 'cancelled'`); n != 16 {
		t.Fatalf("%d cancelled jobs, want 16", n)
	}
	if n := testenv.Count(t, store, `SELECT count(DISTINCT target) FROM audit_log WHERE action = 'cancel'`); n != 16 {
		t.Fatalf("%d jobs audited as cancelled, want 16", n)
	}
	time.Sleep(500 * time.Millisecond)
	if calls := tg.received(); len(calls) != 6 {
		t.Fatalf("%d calls at the target, want 6: a cancelled job never starts", len(calls))
	}
}

// A bulk cancel of an ordered route's backlog starts none of the jobs it
// cancels: six lanes' heads hang at the target across two processes, 24
// jobs wait behind each, and one request cancels all 150, in two chunks.
// Cancelled before the jobs behind them in the second chunk, each head
// would promote its lane's next job, which a worker freed by the head's
// abort would start.
func TestBulkCancelOfLanesStartsNoJobBehindAHead(t *testing.T) {
	t.Parallel()
	store, topic, tg, aborted, addrs := hangingFleet(t, 4, 3, true)
	recs := records(0, 150)
	for i, r := range recs {
		// One partition, so that ids follow the records and every lane
		// spans both chunks.
		r.Key, r.Partition = fmt.Appendf(nil, "k%d", i%6), 0
	}
	testenv.Produce(t, topic, recs...)
	testenv.Eventually(t, 60*time.Second, "six heads running at the target and 144 jobs waiting", func() bool {
		return len(tg.received()) == 6 && testenv.Count(t, store, `SELECT count(*) FROM jobs WHERE state = 'waiting'`) == 144
	})
	code, body := api(t, addrs[1], "POST", "/v1/jobs/cancel?queue=q&expect=150")
	if code != http.StatusOK || compactJSON(t, body) != `{"cancelled":150,"failed":[]}` {
		t.Fatalf("bulk cancel: %d %s", code, body)
	}
	testenv.Eventually(t, 5*time.Second, "the six heads' attempts to be aborted", func() bool {
		return len(aborted()) >= 6
	})
	if n := testenv.Count(t, store, `SELECT count(*) FROM audit_log WHERE action = 'cancel' AND detail->>'was' = 'waiting'`); n != 144 {
		t.Errorf("%d jobs cancelled while waiting, want the 144 behind the heads", n)
	}
	time.Sleep(500 * time.Millisecond)
	if calls := tg.received(); len(calls) != 6 {
		t.Fatalf("%d calls at the target, want the 6 heads': a job behind a head was started", len(calls))
	}
}
