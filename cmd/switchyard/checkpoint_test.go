package main

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// TestHTTPTargetResumesFromItsCheckpoint: SPEC §5 HTTP checkpoints. The
// first attempt saves "page 3" through POST /v1/jobs/{id}/checkpoint with
// its Switchyard-Attempt-Secret alone, then hangs; its
// process is killed (-9). The attempt after the lease expires, in another
// process, receives Switchyard-Checkpoint and finishes from page 3. The
// first attempt's secret then saves nothing (409, I4), nor does a forged
// one; a checkpoint over 4 KiB is refused.
func TestHTTPTargetResumesFromItsCheckpoint(t *testing.T) {
	t.Parallel()
	schema := testenv.Schema(t)
	store := testenv.Store(t, schema)
	topic := testenv.Topic(t, 1)
	tg := newTarget(t)
	var mu sync.Mutex
	var addr string
	var first http.Header // the first attempt's request headers
	resumed := make(chan string, 4)
	saved := make(chan int, 1) // the first attempt's checkpoint status, once its POST returned
	tg.setBehaviour(func(r *http.Request, c call) int {
		if c.Attempt > 1 {
			cp, _ := base64.StdEncoding.DecodeString(r.Header.Get("Switchyard-Checkpoint"))
			resumed <- string(cp)
			return 0
		}
		mu.Lock()
		first = r.Header.Clone()
		a := addr
		mu.Unlock()
		// As SPEC §5 has it: the attempt's secret, no token.
		code := postCheckpoint(t, a, c.JobID, "", r.Header.Get("Switchyard-Attempt-Secret"), "page 3")
		select {
		case saved <- code:
		default: // a first attempt called twice; the test reads only one
		}
		<-r.Context().Done() // cut off by the kill
		return 0
	})
	cfg := writeConfig(t, testConfig{Group: testenv.Name("g"), Schema: schema, Listen: "127.0.0.1:0", Body: fmt.Sprintf(`queues:
  q: {concurrency: 1, lease: 2s, poll_interval: 100ms}
routes:
  - {topic: %q, kind: k, queue: q, dedupe: {field: id}, backoff: {initial: 10ms, max: 10ms}, target: {http: {url: %q, timeout: 1m}}}
`, topic, tg.URL())})
	a := startRun(t, "run-a", cfg)
	mu.Lock()
	addr = adminAddr(t, a)
	mu.Unlock()
	testenv.Produce(t, topic, records(0, 1)...)
	// Kill only once the POST has its answer: the row commits before the
	// response is written, so a kill timed by the row can cut the answer.
	select {
	case code := <-saved:
		if code != http.StatusNoContent {
			t.Fatalf("checkpoint of the first attempt: %d, want 204", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the first attempt did not save its checkpoint within 30 s")
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE checkpoint = 'page 3'`); n != 1 {
		t.Fatalf("checkpoint answered 204 but %d jobs hold it", n)
	}
	a.kill()
	b := startRun(t, "run-b", cfg)
	select {
	case cp := <-resumed:
		if cp != "page 3" {
			t.Fatalf("the next attempt received checkpoint %q, want %q", cp, "page 3")
		}
	case <-time.After(60 * time.Second):
		t.Fatal("no second attempt within 60 s")
	}
	testenv.Eventually(t, 30*time.Second, "the job to succeed", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'succeeded'`) == 1
	})

	addrB := adminAddr(t, b)
	var id int64
	if err := store.Pool().QueryRow(t.Context(), `SELECT id FROM all_jobs`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	token, secret := first.Get("Switchyard-Token"), first.Get("Switchyard-Attempt-Secret")
	mu.Unlock()
	for _, tok := range []string{token, ""} {
		if code := postCheckpoint(t, addrB, id, tok, secret, "page 9"); code != http.StatusConflict {
			t.Errorf("checkpoint of the lost first attempt (Switchyard-Token %q): %d, want 409", tok, code)
		}
	}
	if code := postCheckpoint(t, addrB, id, token, strings.Repeat("0", 64), "page 9"); code != http.StatusConflict {
		t.Errorf("checkpoint with a forged secret: %d, want 409", code)
	}
	if code := postCheckpoint(t, addrB, id, token, secret, strings.Repeat("x", 5000)); code != http.StatusRequestEntityTooLarge {
		t.Errorf("checkpoint of 5,000 bytes: %d, want 413", code)
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE checkpoint = 'page 3'`); n != 1 {
		t.Errorf("the refused checkpoints changed the job's")
	}
}

// postCheckpoint saves data as an attempt's checkpoint (with the
// Switchyard-Token header unless token is empty) and returns the status;
// it does not fail the test, as a target's goroutine calls it.
func postCheckpoint(t *testing.T, addr string, id int64, token, secret, data string) int {
	req, err := http.NewRequest("POST", fmt.Sprintf("http://%s/v1/jobs/%d/checkpoint", addr, id), strings.NewReader(data))
	if err != nil {
		t.Error(err)
		return 0
	}
	if token != "" {
		req.Header.Set("Switchyard-Token", token)
	}
	req.Header.Set("Switchyard-Attempt-Secret", secret)
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := cl.Do(req)
	if err != nil {
		t.Error(err)
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}
