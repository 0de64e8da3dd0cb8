package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/internal/ingest"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// records are n records of unique ids from first on, spread over 4
// partitions.
func records(first, n int) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	for i := range n {
		recs[i] = &kgo.Record{Partition: int32(i % 4), Value: fmt.Appendf(nil, `{"id":"r%d"}`, first+i)}
	}
	return recs
}

// api calls a process's admin API and returns the status and body.
func api(t *testing.T, addr, method, path string) (int, string) {
	t.Helper()
	return apiAs(t, addr, method, path, "")
}

// apiAs is api with an Authorization header (none when empty).
func apiAs(t *testing.T, addr, method, path, auth string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := cl.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestPauseHoldsEveryProcess: a queue paused through one process's API
// stops claims in both processes of the fleet within a second, while
// ingest goes on; a paused route stops ingest in both while its queue
// runs; each resumes where it stopped, and every record ends as exactly
// one job, called once (SPEC §2 I10, §6).
func TestPauseHoldsEveryProcess(t *testing.T) {
	t.Parallel()
	schema := testenv.Schema(t)
	store := testenv.Store(t, schema)
	topic := testenv.Topic(t, 4)
	group := testenv.Name("g")
	tg := newTarget(t)
	c := testConfig{Topic: topic, Group: group, Schema: schema, TargetURL: tg.URL(), Dedupe: true}
	cfgB := writeConfig(t, c)
	c.Listen = "127.0.0.1:0"
	pA := startRun(t, "run-a", writeConfig(t, c))
	startRun(t, "run-b", cfgB)
	addr := adminAddr(t, pA)
	succeeded := func() int { return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'succeeded'`) }

	testenv.Produce(t, topic, records(0, 200)...)
	testenv.Eventually(t, 60*time.Second, "200 jobs to succeed", func() bool { return succeeded() == 200 })

	if code, body := api(t, addr, "POST", "/v1/queues/q/pause"); code != http.StatusOK || !strings.Contains(body, `"paused":true`) {
		t.Fatalf("pause queue: %d %s", code, body)
	}
	pausedAt := time.Now()
	testenv.Produce(t, topic, records(200, 200)...)
	testenv.Eventually(t, 30*time.Second, "the new records ingested while the queue is paused", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'queued'`) == 200
	})
	time.Sleep(time.Until(pausedAt.Add(2500 * time.Millisecond)))
	if n := len(tg.received()); n != 200 {
		t.Fatalf("%d calls at the target 2.5s after the queue was paused, want the 200 from before", n)
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE started_at > now() - interval '1.5 seconds'`); n != 0 {
		t.Fatalf("%d jobs started in the last 1.5s of a paused queue", n)
	}
	if code, body := api(t, addr, "GET", "/v1/queues"); code != http.StatusOK || !strings.Contains(body, `"paused":true`) {
		t.Fatalf("GET /v1/queues does not show the pause: %d %s", code, body)
	}

	// Pause the route, then resume the queue: the queued jobs run, the
	// records produced meanwhile wait in Kafka.
	if code, body := api(t, addr, "POST", "/v1/routes/"+topic+"/pause"); code != http.StatusOK {
		t.Fatalf("pause route: %d %s", code, body)
	}
	time.Sleep(1500 * time.Millisecond)
	if code, body := api(t, addr, "POST", "/v1/queues/q/resume"); code != http.StatusOK || !strings.Contains(body, `"paused":false`) {
		t.Fatalf("resume queue: %d %s", code, body)
	}
	testenv.Eventually(t, 60*time.Second, "the 200 held jobs to succeed after the resume", func() bool { return succeeded() == 400 })
	testenv.Produce(t, topic, records(400, 100)...)
	time.Sleep(2 * time.Second)
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs`); n != 400 {
		t.Fatalf("%d jobs 2s after producing 100 records to a paused route, want 400", n)
	}
	if code, body := api(t, addr, "GET", "/v1/routes"); code != http.StatusOK || !strings.Contains(body, `"paused":true`) {
		t.Fatalf("GET /v1/routes does not show the pause: %d %s", code, body)
	}
	// The 100 records wait in Kafka: the route's lag says so, over all
	// four partitions, whichever process owns them.
	// They were produced more than 2 s ago: the lag in seconds is the age
	// of each partition's first record not stored.
	if lag := routeLag(t, addr); lag.Records != 100 || len(lag.Partitions) != 4 || lag.Seconds < 2 {
		t.Fatalf("GET /v1/routes lag %+v, want 100 records over 4 partitions, 2 s old or more", lag)
	}
	if _, body := api(t, addr, "GET", "/metrics"); !strings.Contains(body,
		fmt.Sprintf(`switchyard_ingest_paused{cause="operator",route=%q} 1`, topic)) {
		t.Fatalf("/metrics does not show the route held by the operator:\n%s", grepLines(body, "switchyard_ingest_paused"))
	}
	if _, body := api(t, addr, "GET", "/metrics"); !strings.Contains(body,
		fmt.Sprintf(`switchyard_ingest_topic_paused{cause="operator",topic=%q} 1`, topic)) {
		t.Fatalf("/metrics does not show the topic held by the operator (SwitchyardIngestBehind leaves it out by it):\n%s",
			grepLines(body, "switchyard_ingest_topic_paused"))
	}

	if code, body := api(t, addr, "POST", "/v1/routes/"+topic+"/resume"); code != http.StatusOK {
		t.Fatalf("resume route: %d %s", code, body)
	}
	testenv.Eventually(t, 60*time.Second, "all 500 records to succeed as jobs", func() bool { return succeeded() == 500 })
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs`); n != 500 {
		t.Fatalf("%d jobs for 500 records", n)
	}
	if calls := tg.received(); len(calls) != 500 {
		t.Fatalf("%d calls at the target for 500 jobs that never failed, want one each", len(calls))
	}
	if stored, end := storedOffsets(t, store, group, topic), endOffsets(t, testenv.Admin(t), topic); !offsetsCovered(stored, end) {
		t.Fatalf("stored offsets %v do not reach the end %v", stored, end)
	}
	if lag := routeLag(t, addr); lag.Records != 0 || lag.Seconds != 0 {
		t.Fatalf("GET /v1/routes lag %+v once every record is stored, want 0", lag)
	}
	if code, _ := api(t, addr, "POST", "/v1/queues/nope/pause"); code != http.StatusNotFound {
		t.Errorf("pausing an unknown queue answered %d, want 404", code)
	}
}

// routeLag is the lag GET /v1/routes reports for the one route there is.
func routeLag(t *testing.T, addr string) ingest.TopicLag {
	t.Helper()
	code, body := api(t, addr, "GET", "/v1/routes")
	var page struct {
		Items []struct {
			Lag      *ingest.TopicLag `json:"lag"`
			LagError string           `json:"lag_error"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(body), &page); code != http.StatusOK || err != nil || len(page.Items) != 1 ||
		page.Items[0].Lag == nil {
		t.Fatalf("GET /v1/routes: %d %s (%v)", code, body, err)
	}
	return *page.Items[0].Lag
}

// samplePeak runs query (a count) every 5 ms from now on; the function it
// returns stops the sampling and says the highest count seen.
func samplePeak(t *testing.T, store *pgstore.Store, query string) func() int64 {
	t.Helper()
	stop, done := make(chan struct{}), make(chan struct{})
	var peak int64
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			var n int64
			// Not count: no t.Fatal off the test's goroutine.
			if store.Pool().QueryRow(context.Background(), query).Scan(&n) == nil {
				peak = max(peak, n)
			}
		}
	}()
	var once sync.Once
	stopNow := func() { once.Do(func() { close(stop); <-done }) }
	t.Cleanup(stopNow)
	return func() int64 { stopNow(); return peak }
}

func grepLines(s, sub string) string {
	var out []string
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return strings.Join(out, "\n")
}

// TestBackpressureHoldsIngestAtMaxDepth: with a slow target and
// max_depth 100, two ingest processes at once, each reading half of the
// partitions, never let the queue hold more than the limit plus one poll
// (fetch_max_records 20) per ingesting process of 5,000 records'
// unstarted jobs, also across a kill -9 of one while it is held and the
// start of a third; every record becomes one job, called once.
func TestBackpressureHoldsIngestAtMaxDepth(t *testing.T) {
	t.Parallel()
	const (
		total, maxDepth, poll, ingesters = 5000, 100, 20, 2
	)
	schema := testenv.Schema(t)
	store := testenv.Store(t, schema)
	topic := testenv.Topic(t, 4)
	group := testenv.Name("g")
	tg := newTarget(t)
	tg.setBehaviour(func(*http.Request, call) int { time.Sleep(5 * time.Millisecond); return 0 })
	cfg := writeConfig(t, testConfig{Group: group, Schema: schema, KafkaExtra: fmt.Sprintf(", fetch_max_records: %d", poll),
		Body: fmt.Sprintf(`queues:
  q: {concurrency: 4, poll_interval: 100ms, max_depth: %d}
routes:
  - {topic: %q, kind: k, queue: q, dedupe: {field: id}, target: {http: {url: %q, timeout: 5s}}}
`, maxDepth, topic, tg.URL())})
	testenv.Produce(t, topic, records(0, total)...)

	peak := samplePeak(t, store, `SELECT count(*) FROM all_jobs WHERE state IN ('waiting', 'queued', 'retrying')`)
	startRun(t, "work", cfg, "--role", "work")
	ingest := startRun(t, "ingest-0", cfg, "--role", "ingest")
	startRun(t, "ingest-1", cfg, "--role", "ingest")
	ingest.waitLog(30*time.Second, `"cause":"backpressure"`)
	testenv.Eventually(t, 60*time.Second, "a third of the jobs to run", func() bool { return len(tg.received()) >= total/3 })
	ingest.kill()
	startRun(t, "ingest-2", cfg, "--role", "ingest")
	testenv.Eventually(t, 120*time.Second, "every record to succeed as a job", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'succeeded'`) == total
	})
	peakDepth := peak()
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs`); n != total {
		t.Fatalf("%d jobs for %d records", n, total)
	}
	if calls := tg.received(); len(calls) != total {
		t.Fatalf("%d calls at the target for %d jobs, want one each", len(calls), total)
	}
	t.Logf("peak of unstarted jobs: %d (max_depth %d, one poll %d, %d ingesting processes)", peakDepth, maxDepth, poll, ingesters)
	// One poll per process that ingested around the peak: the two alive,
	// and the one killed, whose last batch may commit as its successor
	// starts.
	if p := peakDepth; p > maxDepth+(ingesters+1)*poll {
		t.Fatalf("the queue held %d unstarted jobs, over max_depth %d plus one poll of %d per ingesting process", p, maxDepth, poll)
	}
	// The hold itself was seen in the log; the sampler, 10 ms apart,
	// sees the queue near its limit too.
	if p := peakDepth; p < maxDepth/2 {
		t.Fatalf("the queue never came near max_depth (peak %d): the test did not exercise backpressure", p)
	}
}

// TestCoalescedRecordsRunOnce: 1,000 records of one key (the record's
// own, the route's default) produced while its queue is paused become one
// job to run — the newest record's — and 999 coalesced; after the resume
// the target receives that one (coalesce: latest, SPEC §3).
func TestCoalescedRecordsRunOnce(t *testing.T) {
	t.Parallel()
	const n = 1000
	schema := testenv.Schema(t)
	store := testenv.Store(t, schema)
	topic := testenv.Topic(t, 1)
	group := testenv.Name("g")
	tg := newTarget(t)
	cfg := writeConfig(t, testConfig{Group: group, Schema: schema, Listen: "127.0.0.1:0", Body: fmt.Sprintf(`queues:
  q: {concurrency: 4, poll_interval: 100ms}
routes:
  - {topic: %q, kind: k, queue: q, coalesce: latest, target: {http: {url: %q, timeout: 5s}}}
`, topic, tg.URL())})
	p := startRun(t, "run", cfg)
	addr := adminAddr(t, p)
	if code, body := api(t, addr, "POST", "/v1/queues/q/pause"); code != http.StatusOK {
		t.Fatalf("pause: %d %s", code, body)
	}
	time.Sleep(time.Second) // the pause reaches the pool (the claim honours it at once)
	recs := make([]*kgo.Record, n)
	for i := range n {
		recs[i] = &kgo.Record{Key: []byte("A"), Value: fmt.Appendf(nil, `{"seq":%d}`, i)}
	}
	testenv.Produce(t, topic, recs...)
	testenv.Eventually(t, 60*time.Second, "every record ingested", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs`) == n
	})
	if c := testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'coalesced'`); c != n-1 {
		t.Fatalf("%d jobs coalesced, want %d", c, n-1)
	}
	if code, body := api(t, addr, "POST", "/v1/queues/q/resume"); code != http.StatusOK {
		t.Fatalf("resume: %d %s", code, body)
	}
	testenv.Eventually(t, 30*time.Second, "the one job to succeed", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'succeeded'`) == 1
	})
	calls := tg.received()
	if len(calls) != 1 || !strings.Contains(string(calls[0].Body), fmt.Sprintf(`"seq":%d`, n-1)) {
		t.Fatalf("target received %v; want one call with the newest record (seq %d)", calls, n-1)
	}
	testenv.Eventually(t, 10*time.Second, "the coalesced jobs counted", func() bool {
		_, body := api(t, addr, "GET", "/metrics")
		return strings.Contains(body, fmt.Sprintf(`switchyard_job_attempts_total{kind="k",outcome="coalesced"} %d`, n-1))
	})
}

// TestMaxRunningHoldsAcrossProcesses: a route's max_running of 3 holds
// for two processes of 8 workers each together — at the target and in
// the table — also while one of them is killed with jobs running, whose
// slots come back when their leases expire; every record is one job
// that succeeds (SPEC §2 I9).
func TestMaxRunningHoldsAcrossProcesses(t *testing.T) {
	t.Parallel()
	cappedBurst(t, 300, 30*time.Millisecond, "lease: 2s, ", true)
}

// TestMaxRunningSharesSettleInABurst: two processes at the default job
// lease (30 s: shares renewed every 10 s when idle) meet a burst of 200
// jobs of a route with max_running 3 and run 3 at once within it, never
// more. The process that leases first takes all 3 and the other none;
// they settle on a split of all 3 only as they lease again, which they
// do every second while the route has work (internal/flow/doc.go).
// Renewed only every 10 s, they ran at most 2 through the ~5 s burst.
func TestMaxRunningSharesSettleInABurst(t *testing.T) {
	t.Parallel()
	cappedBurst(t, 200, 50*time.Millisecond, "", false)
}

// cappedBurst runs total records of a route with max_running 3, each
// job held hold at the target, through two processes of 8 workers
// (queue settings queueOpts), killing one of them a third of the way
// when kill; every record must end as one succeeded job, and the cap
// be reached at the target, never passed.
func cappedBurst(t *testing.T, total int, hold time.Duration, queueOpts string, kill bool) {
	const maxRunning = 3
	schema := testenv.Schema(t)
	store := testenv.Store(t, schema)
	topic := testenv.Topic(t, 4)
	tg := newTarget(t)
	var flight inFlight
	tg.setBehaviour(flight.holding(hold, all))
	cfg := writeConfig(t, testConfig{Group: testenv.Name("g"), Schema: schema, Body: fmt.Sprintf(`queues:
  q: {concurrency: 8, %spoll_interval: 100ms}
routes:
  - {topic: %q, kind: k, queue: q, max_running: %d, dedupe: {field: id}, target: {http: {url: %q, timeout: 5s}}}
`, queueOpts, topic, maxRunning, tg.URL())})
	a := startRun(t, "run-a", cfg)
	startRun(t, "run-b", cfg)
	testenv.Produce(t, topic, records(0, total)...)
	if kill {
		testenv.Eventually(t, 60*time.Second, "a third of the jobs to run", func() bool { return len(tg.received()) >= total/3 })
		a.kill()
	}
	testenv.Eventually(t, 120*time.Second, "every job to succeed", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'succeeded'`) == total
	})
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs`); n != total {
		t.Fatalf("%d jobs for %d records", n, total)
	}
	// At the target, not in the table: a job whose handler returned
	// stops counting before its outcome is written (internal/flow/doc.go),
	// so its row may still read running beside its successor's.
	capReached(t, flight.peaks()["all"], maxRunning)
}

// capReached fails t unless peak, the most requests in flight at once at
// the target, is maxRunning: over it, the cap did not hold; under it, it
// never bound, so the test proved nothing.
func capReached(t *testing.T, peak, maxRunning int) {
	t.Helper()
	t.Logf("peak in flight at the target %d (max_running %d)", peak, maxRunning)
	if peak > maxRunning {
		t.Fatalf("%d requests in flight at once at the target, over max_running %d", peak, maxRunning)
	}
	if peak < maxRunning {
		t.Fatalf("never more than %d in flight: the cap was not reached, so the test proved nothing", peak)
	}
}
