package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// A job posted to the admin API runs through its route's target like a
// record's would: the body byte for byte, its Content-Type kept; a repeat
// with the same Idempotency-Key makes no second job.
func TestAPIEnqueueRuns(t *testing.T) {
	t.Parallel()
	schema, topic, group := testenv.Schema(t), testenv.Topic(t, 1), testenv.Name("g")
	store := testenv.Store(t, schema)
	tg := newTarget(t)
	var contentType string
	tg.setBehaviour(func(r *http.Request, c call) int {
		contentType = r.Header.Get("Content-Type")
		return 0
	})
	cfg := writeConfig(t, testConfig{Group: group, Schema: schema, Listen: "127.0.0.1:0", Body: fmt.Sprintf(`queues:
  q: {concurrency: 2, poll_interval: 100ms}
routes:
  - {topic: %q, kind: order.sync, queue: q, target: {http: {url: %q, timeout: 5s}}}
`, topic, tg.URL())})
	p := startRun(t, "run-api", cfg)
	addr := adminAddr(t, p)
	post := func() int {
		t.Helper()
		cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		req, _ := http.NewRequest("POST", "http://"+addr+"/v1/queues/q/jobs?kind=order.sync", strings.NewReader(`{"order":42}`))
		req.Header.Set("Idempotency-Key", "order-42")
		req.Header.Set("Content-Type", "application/json")
		res, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusAccepted {
			t.Fatalf("enqueue: %d %s", res.StatusCode, b)
		}
		return res.StatusCode
	}
	post()
	testenv.Eventually(t, 30*time.Second, "the target called", func() bool { return len(tg.received()) == 1 })
	post()
	testenv.Eventually(t, 30*time.Second, "the job succeeded", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'succeeded'`) == 1
	})
	got := tg.received()
	if len(got) != 1 || string(got[0].Body) != `{"order":42}` || contentType != "application/json" {
		t.Fatalf("target received %v with Content-Type %q; want one call with the posted body as JSON", got, contentType)
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs`); n != 1 {
		t.Fatalf("%d jobs for one idempotency key, want 1", n)
	}
}
