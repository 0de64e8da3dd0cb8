package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// TestResultsOfHTTPJobs: through the broker and a real process, a 2xx
// body becomes the job's result — GET /v1/jobs/{id} carries it, and
// GET /v1/jobs/{id}/result answers it raw with its content type, never
// to be sniffed or run as a page; a route with result_max_bytes 0 keeps
// none.
func TestResultsOfHTTPJobs(t *testing.T) {
	t.Parallel()
	schema := testenv.Schema(t)
	store := testenv.Store(t, schema)
	kept, dropped := testenv.Topic(t, 1), testenv.Topic(t, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"rendered":%q}`, r.Header.Get("Switchyard-Job-Id"))
	}))
	t.Cleanup(srv.Close)
	url := srv.URL
	cfg := writeConfig(t, testConfig{Group: testenv.Name("g"), Schema: schema, Listen: "127.0.0.1:0", Body: fmt.Sprintf(`queues:
  q: {concurrency: 2, poll_interval: 100ms}
routes:
  - {topic: %q, kind: k, queue: q, target: {http: {url: %q, timeout: 5s}}}
  - {topic: %q, kind: k2, queue: q, result_max_bytes: 0, target: {http: {url: %q, timeout: 5s}}}
`, kept, url, dropped, url)})
	addr := adminAddr(t, startRun(t, "run-a", cfg))
	testenv.Produce(t, kept, &kgo.Record{Value: []byte(`{}`)})
	testenv.Produce(t, dropped, &kgo.Record{Value: []byte(`{}`)})
	testenv.Eventually(t, 30*time.Second, "both jobs to succeed", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'succeeded'`) == 2
	})
	var keptID, droppedID int64
	if err := store.Pool().QueryRow(t.Context(), `SELECT
		(SELECT id FROM all_jobs WHERE route = $1), (SELECT id FROM all_jobs WHERE route = $2)`, kept, dropped).Scan(&keptID, &droppedID); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`{"rendered":"%d"}`, keptID)

	code, body := api(t, addr, "GET", fmt.Sprintf("/v1/jobs/%d", keptID))
	var job struct {
		Result *struct {
			ContentType string `json:"content_type"`
			Bytes       int    `json:"bytes"`
			Base64      []byte `json:"body_base64"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(body), &job); code != http.StatusOK || err != nil || job.Result == nil ||
		job.Result.ContentType != "application/json" || string(job.Result.Base64) != want || job.Result.Bytes != len(want) {
		t.Fatalf("GET /v1/jobs/%d: %d %s (%v), want its result %s", keptID, code, body, err, want)
	}

	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := cl.Get(fmt.Sprintf("http://%s/v1/jobs/%d/result", addr, keptID))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || string(raw) != want || res.Header.Get("Content-Type") != "application/json" ||
		res.Header.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(res.Header.Get("Content-Security-Policy"), "sandbox") {
		t.Fatalf("GET result: %d %q %v", res.StatusCode, raw, res.Header)
	}
	if code, body := api(t, addr, "GET", fmt.Sprintf("/v1/jobs/%d/result", droppedID)); code != http.StatusNotFound ||
		!strings.Contains(body, `"field":"result"`) {
		t.Fatalf("GET the result of a route that keeps none: %d %s, want 404 naming result", code, body)
	}
	if code, body := api(t, addr, "GET", fmt.Sprintf("/v1/jobs/%d", droppedID)); code != http.StatusOK || strings.Contains(body, `"result"`) {
		t.Fatalf("GET /v1/jobs/%d: %d %s, want no result", droppedID, code, body)
	}
	// The CLI shows a job as the API does.
	if code, stdout, stderr := runCLI("jobs", "get", "--config", cfg, "--json", fmt.Sprint(keptID)); code != exitOK ||
		!strings.Contains(stdout, `"content_type": "application/json"`) {
		t.Fatalf("switchyard jobs get %d: exit %d\n%s%s", keptID, code, stdout, stderr)
	}
}
