package main

// Fault test of the HTTP target protocol (SPEC §5) against a target that
// misbehaves: slow, hanging, resetting connections, throttling and
// redirecting.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// TestFaultTargetMisbehaves runs one process against a target whose
// behaviour depends on the job (its body's "id"):
//
//   - slow: answers after 300ms, within the 500ms timeout → succeeded;
//   - hang: never answers → every attempt times out, then dead with
//     reason max_attempts;
//   - reset: the connection is reset (hijacked, closed with linger 0) on
//     attempts 1 and 2 → retried, succeeded on attempt 3;
//   - throttle: 429 with Retry-After: 1 → the next attempt no sooner than
//     1s later → succeeded;
//   - redirect: 302 on a route without follow_redirects → dead at once
//     (permanent), the redirect target never called;
//   - follow307: 307 on a route with follow_redirects: true → succeeded
//     at the redirect target, which got the POST with its body;
//   - follow302: the same with 302, which would turn the POST into a
//     body-less GET: not followed, dead at once;
//   - ok: 200 → succeeded.
func TestFaultTargetMisbehaves(t *testing.T) {
	t.Parallel()
	schema := testenv.Schema(t)
	store := testenv.Store(t, schema)
	topicA := testenv.Topic(t, 1) // follow_redirects: false
	topicB := testenv.Topic(t, 1) // follow_redirects: true
	group := testenv.Name("g")
	const (
		timeout     = 500 * time.Millisecond
		maxAttempts = 3
	)
	rt := newRawTarget(t, func(w http.ResponseWriter, r *http.Request, c call) int {
		if strings.HasPrefix(r.URL.Path, "/moved") {
			w.WriteHeader(http.StatusOK)
			return http.StatusOK
		}
		var body struct{ ID string }
		_ = json.Unmarshal(c.Body, &body)
		switch body.ID {
		case "slow":
			select {
			case <-time.After(300 * time.Millisecond):
			case <-r.Context().Done():
				return 0
			}
		case "hang":
			<-r.Context().Done()
			return 0
		case "reset":
			if c.Attempt < 3 {
				resetConn(t, w)
				return 0
			}
		case "throttle":
			if c.Attempt == 1 {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusTooManyRequests)
				return http.StatusTooManyRequests
			}
		case "redirect":
			http.Redirect(w, r, "/moved-a", http.StatusFound)
			return http.StatusFound
		case "follow302":
			http.Redirect(w, r, "/moved-302", http.StatusFound)
			return http.StatusFound
		case "follow307":
			http.Redirect(w, r, "/moved-307", http.StatusTemporaryRedirect)
			return http.StatusTemporaryRedirect
		}
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	})
	route := func(topic, path string, follow bool) string {
		return fmt.Sprintf(`  - topic: %q
    kind: k
    queue: q
    dedupe: {field: id}
    max_attempts: %d
    backoff: {initial: 50ms, max: 2s}
    target: {http: {url: %q, timeout: %s, follow_redirects: %v}}
`, topic, maxAttempts, rt.srv.URL+path, timeout, follow)
	}
	cfg := writeConfig(t, testConfig{Group: group, Schema: schema, Body: `queues:
  q: {concurrency: 8, lease: 5s, max_runtime: 1m, poll_interval: 100ms}
routes:
` + route(topicA, "/a", false) + route(topicB, "/b", true)})

	p := startRun(t, "run-0", cfg)
	var recs []*kgo.Record
	for _, id := range []string{"slow", "hang", "reset", "throttle", "redirect", "ok"} {
		recs = append(recs, &kgo.Record{Topic: topicA, Partition: 0, Value: fmt.Appendf(nil, `{"id":%q}`, id)})
	}
	for _, id := range []string{"follow307", "follow302"} {
		recs = append(recs, &kgo.Record{Topic: topicB, Partition: 0, Value: fmt.Appendf(nil, `{"id":%q}`, id)})
	}
	testenv.Produce(t, topicA, recs...)
	testenv.Eventually(t, 60*time.Second, "every job to finish", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state IN ('succeeded', 'dead')`) == len(recs)
	})
	term(t, p, 30*time.Second)

	rows := jobs(t, store)
	byID := map[string]jobRow{}
	for _, j := range rows {
		byID[j.DedupeKey] = j
	}
	want := map[string]struct {
		state    string
		attempts int
		reason   string // DLQ reason, "" for none
	}{
		"slow": {"succeeded", 1, ""}, "hang": {"dead", maxAttempts, "max_attempts"}, "reset": {"succeeded", 3, ""},
		"throttle": {"succeeded", 2, ""}, "redirect": {"dead", 1, "permanent"}, "ok": {"succeeded", 1, ""},
		"follow307": {"succeeded", 1, ""}, "follow302": {"dead", 1, "permanent"},
	}
	for id, w := range want {
		j, ok := byID[id]
		if !ok {
			t.Errorf("%s: no job", id)
			continue
		}
		if j.State != w.state || j.Attempts != w.attempts {
			t.Errorf("%s: state %s after %d attempts, want %s after %d; last error %q",
				id, j.State, j.Attempts, w.state, w.attempts, j.LastError)
		}
		var reason string
		var attempts int
		n := testenv.Count(t, store, `SELECT count(*) FROM dlq_entries WHERE job_id = $1`, j.ID)
		if n > 0 {
			ctx := t.Context()
			if err := store.Pool().QueryRow(ctx, `SELECT reason, attempts FROM dlq_entries WHERE job_id = $1`, j.ID).
				Scan(&reason, &attempts); err != nil {
				t.Fatal(err)
			}
		}
		if reason != w.reason || w.reason != "" && attempts != w.attempts {
			t.Errorf("%s: DLQ reason %q attempts %d (%d entries), want %q", id, reason, attempts, n, w.reason)
		}
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM dlq_entries`); n != 3 {
		t.Errorf("%d DLQ entries, want 3 (hang, redirect, follow302)", n)
	}

	spansOf := func(id string) []span { return rt.spans.ofJob(byID[id].ID) }
	attemptsSeen := func(ss []span) map[int]int {
		m := map[int]int{}
		for _, s := range ss {
			m[s.Attempt]++
		}
		return m
	}
	// slow: one call, answered after 300ms.
	if ss := spansOf("slow"); len(ss) != 1 || ss[0].Status != http.StatusOK || ss[0].Close.Sub(ss[0].Open) < 300*time.Millisecond {
		t.Errorf("slow: calls %v, want one answered 200 after 300ms", ss)
	}
	// hang: every attempt aborted by the client at the timeout.
	hang := spansOf("hang")
	if m := attemptsSeen(hang); len(hang) != maxAttempts || m[1] != 1 || m[2] != 1 || m[3] != 1 {
		t.Errorf("hang: calls %v, want attempts 1..%d once each", hang, maxAttempts)
	}
	for _, s := range hang {
		if d := s.Close.Sub(s.Open); !s.Aborted || d < timeout-50*time.Millisecond || d > timeout+3*time.Second {
			t.Errorf("hang: call %v, want aborted by the client after about %s", s, timeout)
		}
	}
	if j := byID["hang"]; !strings.Contains(j.LastError, "timeout") {
		t.Errorf("hang: last error %q, want a timeout", j.LastError)
	}
	// reset: attempts 1 and 2 reached the target and were cut off. net/http
	// re-sends a request that carries Idempotency-Key when a pooled
	// connection fails after it was written, on the next pooled connection
	// or a fresh one, so one attempt (one token) can arrive several times.
	reset := spansOf("reset")
	m := attemptsSeen(reset)
	tokens := map[int]int64{}
	for _, s := range reset {
		if tok, ok := tokens[s.Attempt]; ok && tok != s.Token {
			t.Errorf("reset: attempt %d arrived with tokens %d and %d", s.Attempt, tok, s.Token)
		}
		tokens[s.Attempt] = s.Token
	}
	if m[1] < 1 || m[2] < 1 || m[3] != 1 || len(m) != 3 {
		t.Errorf("reset: calls %v, want attempts 1, 2 and 3", reset)
	}
	if last := reset[len(reset)-1]; last.Attempt != 3 || last.Status != http.StatusOK {
		t.Errorf("reset: last call %v, want attempt 3 answered 200", last)
	}
	t.Logf("reset: %d requests for 3 attempts (%d re-sent at once by net/http on pooled connections); last error %q",
		len(reset), len(reset)-len(m), byID["reset"].LastError)
	// throttle: the second attempt no sooner than Retry-After allows.
	if th := spansOf("throttle"); len(th) != 2 || th[0].Status != http.StatusTooManyRequests || th[1].Status != http.StatusOK {
		t.Errorf("throttle: calls %v, want a 429 then a 200", th)
	} else {
		gap := th[1].Open.Sub(th[0].Close)
		if gap < 950*time.Millisecond || gap > 10*time.Second {
			t.Errorf("throttle: second attempt %s after the 429 with Retry-After: 1, want about 1s", gap)
		}
		t.Logf("throttle: second attempt %s after the 429", gap.Round(time.Millisecond))
	}
	// redirect without follow_redirects: one call, permanent, never followed.
	if rd := spansOf("redirect"); len(rd) != 1 || rd[0].Status != http.StatusFound {
		t.Errorf("redirect: calls %v, want one answered 302", rd)
	}
	if j := byID["redirect"]; !strings.Contains(j.LastError, "302") {
		t.Errorf("redirect: last error %q, want the 302 status", j.LastError)
	}
	for _, s := range rt.spans.all() {
		if s.Path == "/moved-a" {
			t.Errorf("the redirect target of a route without follow_redirects was called: %v", s)
		}
	}
	// follow307: the POST, its headers and body reach the redirect target.
	f307 := spansOf("follow307")
	if len(f307) != 2 || f307[1].Path != "/moved-307" || f307[1].Method != http.MethodPost ||
		string(f307[1].Body) != `{"id":"follow307"}` || f307[1].Token != f307[0].Token || f307[1].Status != http.StatusOK {
		t.Errorf("follow307: calls %v, want the same POST, body and token at /moved-307 answered 200", f307)
	}
	// follow302: following would turn the POST into a body-less GET, so
	// the target does not follow it even with follow_redirects: the job
	// is dead at once with the 302, and the redirect target is never called.
	f302 := spansOf("follow302")
	if j := byID["follow302"]; j.State != "dead" || len(f302) != 1 || !strings.Contains(j.LastError, "302") {
		t.Errorf("follow302: state %s, calls %v, last error %q; want dead at once with the 302", j.State, f302, j.LastError)
	}

	all := rt.spans.all()
	produced := map[[2]int64]bool{}
	lostA, dupsA := sourceCheck(t, store, topicA, onlyRoute(rows, topicA), sources(recs, topicA, produced))
	lostB, dupsB := sourceCheck(t, store, topicB, onlyRoute(rows, topicB), sources(recs, topicB, map[[2]int64]bool{}))
	_, violations := overlapCheck(byJob(all))
	for _, v := range violations {
		t.Errorf("I4: %s", v)
	}
	accepted, why := staleAccepted(rows, all)
	for _, w := range why {
		t.Errorf("I4: %s", w)
	}
	faultSummary{produced: len(recs), jobs: len(rows), lost: lostA + lostB,
		duplicateJobs: dupsA + dupsB, orderViolations: len(violations), staleCompletionsAccepted: accepted,
		redeliveries: redeliveries(all)}.report(t, "target_misbehaves")
}

// onlyRoute returns the rows of one route (routes are named by topic).
func onlyRoute(rows []jobRow, topic string) []jobRow {
	var out []jobRow
	for _, j := range rows {
		if j.Route == topic {
			out = append(out, j)
		}
	}
	return out
}

// sources adds the (partition, offset) of the records of one topic to m.
func sources(recs []*kgo.Record, topic string, m map[[2]int64]bool) map[[2]int64]bool {
	for _, r := range recs {
		if r.Topic == topic {
			m[[2]int64{int64(r.Partition), r.Offset}] = true
		}
	}
	return m
}
