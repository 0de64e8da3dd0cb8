package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// TestRunAtDelaysRecordsAndAPIJobs: through the real broker and a real
// process, a record whose run_at field is 3 s ahead, and a job posted
// with Switchyard-Delay: 3, are delivered no sooner than that and then
// once; GET /v1/jobs/{id} shows the time as scheduled_at; a record whose
// run_at does not parse is parked (decode) and its partition moves on; a
// record without it, and one with a time past, run at once. A kill -9
// and restart while the jobs wait changes none of it (the time is a
// column, not a timer).
func TestRunAtDelaysRecordsAndAPIJobs(t *testing.T) {
	t.Parallel()
	schema := testenv.Schema(t)
	store := testenv.Store(t, schema)
	topic := testenv.Topic(t, 1)
	tg := newTarget(t)
	var mu sync.Mutex
	delivered := map[string]time.Time{}
	tg.setBehaviour(func(_ *http.Request, c call) int {
		var v struct{ ID string }
		_ = json.Unmarshal(c.Body, &v)
		mu.Lock()
		delivered[v.ID] = time.Now()
		mu.Unlock()
		return 0
	})
	cfg := writeConfig(t, testConfig{Group: testenv.Name("g"), Schema: schema, Listen: "127.0.0.1:0", Body: fmt.Sprintf(`queues:
  q: {concurrency: 2, poll_interval: 100ms}
routes:
  - {topic: %q, kind: k, queue: q, dedupe: {field: id}, run_at: {field: send_at}, target: {http: {url: %q, timeout: 5s}}}
`, topic, tg.URL())})
	p := startRun(t, "run-a", cfg)
	addr := adminAddr(t, p)

	start := time.Now()
	ahead := start.Add(3 * time.Second).UTC()
	testenv.Produce(t, topic,
		&kgo.Record{Value: fmt.Appendf(nil, `{"id":"timed","send_at":%q}`, ahead.Format(time.RFC3339Nano))},
		&kgo.Record{Value: []byte(`{"id":"bad","send_at":"next tuesday"}`)},
		&kgo.Record{Value: []byte(`{"id":"now"}`)},
		&kgo.Record{Value: []byte(`{"id":"past","send_at":"2020-01-01T00:00:00Z"}`)},
	)
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/queues/q/jobs?kind=k", strings.NewReader(`{"id":"api"}`))
	req.Header.Set("Idempotency-Key", "api-1")
	req.Header.Set("Switchyard-Delay", "3")
	res, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var created struct{ ID int64 }
	_ = json.NewDecoder(res.Body).Decode(&created)
	res.Body.Close()
	if res.StatusCode != http.StatusAccepted || created.ID == 0 {
		t.Fatalf("POST with Switchyard-Delay: %d, job %d", res.StatusCode, created.ID)
	}
	req, _ = http.NewRequest("POST", "http://"+addr+"/v1/queues/q/jobs?kind=k", strings.NewReader(`{"id":"x"}`))
	req.Header.Set("Idempotency-Key", "api-2")
	req.Header.Set("Switchyard-Run-At", "at noon")
	if res, err := cl.Do(req); err != nil {
		t.Fatal(err)
	} else if res.Body.Close(); res.StatusCode != http.StatusBadRequest {
		t.Fatalf("POST with a bad Switchyard-Run-At: %d, want 400", res.StatusCode)
	}

	testenv.Eventually(t, 30*time.Second, "the two records that run at once to be delivered", func() bool {
		return len(tg.received()) >= 2
	})
	testenv.Eventually(t, 30*time.Second, "the bad record to be parked", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM dlq_entries WHERE reason = 'decode' AND last_error LIKE '%run_at%'`) == 1
	})
	if code, body := api(t, addr, "GET", fmt.Sprintf("/v1/jobs/%d", created.ID)); code != http.StatusOK ||
		!strings.Contains(body, `"scheduled_at"`) {
		t.Fatalf("GET the delayed job: %d %s", code, body)
	} else {
		var j struct {
			ScheduledAt time.Time `json:"scheduled_at"`
			State       string    `json:"state"`
		}
		if err := json.Unmarshal([]byte(body), &j); err != nil || j.State != "queued" || j.ScheduledAt.Before(start.Add(2900*time.Millisecond)) {
			t.Fatalf("the delayed job reads %+v (%v), want queued for about 3 s from the request", j, err)
		}
	}
	// Restart while the two wait: their times are in their rows.
	p.kill()
	startRun(t, "run-b", cfg)
	testenv.Eventually(t, 30*time.Second, "all four jobs to be delivered", func() bool { return len(tg.received()) == 4 })
	testenv.Eventually(t, 30*time.Second, "all four jobs to succeed", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'succeeded'`) == 4
	})
	mu.Lock()
	defer mu.Unlock()
	for _, id := range []string{"timed", "api"} {
		// The API's delay counts from the request, a moment after start.
		if at := delivered[id]; at.Sub(start) < 3*time.Second {
			t.Fatalf("job %s was delivered %s after the start, before its time (3 s)", id, at.Sub(start))
		}
	}
	t.Logf("delivered after the start: timed %s, api %s, now %s",
		delivered["timed"].Sub(start), delivered["api"].Sub(start), delivered["now"].Sub(start))
}
