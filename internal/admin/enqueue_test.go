package admin

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap/zaptest"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/ingest"
)

// enqueueEnv serves the admin API with a real ingest.Enqueuer over two
// queues: "q" (an unordered route of kind "k" and an ordered one of kind
// "ordered") and "small" (max_depth 2).
func enqueueEnv(t *testing.T) *env {
	t.Helper()
	return enqueueEnvTraced(t, nil)
}

// enqueueEnvTraced is enqueueEnv with its actions traced by tracer (nil:
// tracing off).
func enqueueEnvTraced(t *testing.T, tracer trace.Tracer) *env {
	t.Helper()
	c := config.Config{Routes: []config.Route{
		{Topic: "t1", Kind: "k", Queue: "q", MaxRecordBytes: 64},
		{Topic: "t2", Kind: "ordered", Queue: "q", Ordered: true},
		{Topic: "t3", Kind: "s", Queue: "small"},
		{Topic: "t4", Kind: "versioned", Queue: "q", Ordered: true,
			Version: &config.Version{FieldRef: config.FieldRef{Field: "v"}, Policy: "newer"}},
		{Topic: "t5", Kind: "keyed", Queue: "q", Ordered: true, Key: config.FieldRef{Field: "customer.id"}},
	}}
	c.SetDefaults()
	var routes []*ingest.Route
	for _, r := range c.Routes {
		cr, err := ingest.CompileRoute(r)
		if err != nil {
			t.Fatal(err)
		}
		routes = append(routes, cr)
	}
	st := newStore(t, true)
	enq := ingest.NewEnqueuer(st, routes, map[string]int{"q": 0, "small": 2})
	return serve(t, Config{Enqueue: enq, Tracer: tracer}, st, zaptest.NewLogger(t))
}

func (e *env) enqueue(t *testing.T, path, key, contentType, body string, headers ...string) reply {
	t.Helper()
	req, err := http.NewRequest("POST", e.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return reply{status: res.StatusCode, header: res.Header, body: b}
}

func TestEnqueue(t *testing.T) {
	t.Parallel()
	e := enqueueEnv(t)
	type answer struct {
		ID      int64  `json:"id"`
		State   string `json:"state"`
		Created bool   `json:"created"`
	}
	first := decode[answer](t, e.enqueue(t, "/v1/queues/q/jobs?kind=k", "order-17", "application/json", `{"n":17}`).
		must(t, http.StatusAccepted))
	if first.State != "queued" || !first.Created {
		t.Fatalf("first enqueue %+v, want a created queued job", first)
	}
	again := e.enqueue(t, "/v1/queues/q/jobs?kind=k", "order-17", "application/json", `{"n":17}`).must(t, http.StatusAccepted)
	if a := decode[answer](t, again); a.ID != first.ID || a.Created {
		t.Fatalf("repeated enqueue %+v, want job %d again, not created", a, first.ID)
	}
	if loc := again.header.Get("Location"); loc != fmt.Sprintf("/v1/jobs/%d", first.ID) {
		t.Fatalf("Location %q", loc)
	}
	job := decode[map[string]any](t, e.get(t, fmt.Sprintf("/v1/jobs/%d", first.ID)).must(t, http.StatusOK))
	if job["kind"] != "k" || job["queue"] != "q" {
		t.Fatalf("job %v", job)
	}
	var payload []byte
	var hk []string
	var hv [][]byte
	if err := e.store.Pool().QueryRow(context.Background(), `SELECT payload, header_keys, header_values FROM all_jobs WHERE id = $1`,
		first.ID).Scan(&payload, &hk, &hv); err != nil {
		t.Fatal(err)
	}
	if string(payload) != `{"n":17}` || len(hk) != 1 || hk[0] != "content-type" || !bytes.Equal(hv[0], []byte("application/json")) {
		t.Fatalf("stored payload %q headers %v %q", payload, hk, hv)
	}

	for _, c := range []struct {
		name, path, key, body string
		status                int
		field                 string
	}{
		{"no idempotency key", "/v1/queues/q/jobs?kind=k", "", "{}", http.StatusBadRequest, "Idempotency-Key"},
		{"no kind", "/v1/queues/q/jobs", "a", "{}", http.StatusBadRequest, "kind"},
		{"unknown kind", "/v1/queues/q/jobs?kind=nope", "a", "{}", http.StatusBadRequest, "kind"},
		{"kind of another queue", "/v1/queues/q/jobs?kind=s", "a", "{}", http.StatusBadRequest, "kind"},
		{"ordered kind without a key", "/v1/queues/q/jobs?kind=ordered", "a", "{}", http.StatusBadRequest, "Switchyard-Key"},
		{"unknown queue", "/v1/queues/nope/jobs?kind=k", "a", "{}", http.StatusNotFound, "queue"},
		{"over max_record_bytes", "/v1/queues/q/jobs?kind=k", "a", strings.Repeat("x", 65), http.StatusBadRequest, "body"},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantError(t, e.enqueue(t, c.path, c.key, "", c.body), c.status, c.field)
		})
	}

	// An ordered route's jobs join their key's lane: the first is its head.
	wantError(t, e.enqueue(t, "/v1/queues/q/jobs?kind=versioned", "v0", "", "{}", "Switchyard-Key", "c"),
		http.StatusBadRequest, "Switchyard-Version")
	wantError(t, e.enqueue(t, "/v1/queues/q/jobs?kind=versioned", "v0", "", "{}", "Switchyard-Key", "c",
		"Switchyard-Version", "seven"), http.StatusBadRequest, "Switchyard-Version")
	e.enqueue(t, "/v1/queues/q/jobs?kind=versioned", "v0", "", "{}", "Switchyard-Key", "c",
		"Switchyard-Version", "7").must(t, http.StatusAccepted)
	for i, want := range []string{"queued", "waiting"} {
		a := decode[answer](t, e.enqueue(t, "/v1/queues/q/jobs?kind=ordered", fmt.Sprint("o", i), "", "{}",
			"Switchyard-Key", "cust-9").must(t, http.StatusAccepted))
		if a.State != want || !a.Created {
			t.Fatalf("ordered job %d: %+v, want created %s", i, a, want)
		}
	}

	for i := range 2 {
		e.enqueue(t, "/v1/queues/small/jobs?kind=s", fmt.Sprint("s", i), "", "{}").must(t, http.StatusAccepted)
	}
	full := e.enqueue(t, "/v1/queues/small/jobs?kind=s", "s2", "", "{}")
	wantError(t, full, http.StatusTooManyRequests, "queue")
	if full.header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	// A retry of an accepted request gets its answer, full queue or not.
	e.enqueue(t, "/v1/queues/small/jobs?kind=s", "s1", "", "{}").must(t, http.StatusAccepted)
	if n := count(t, e, `SELECT count(*) FROM all_jobs`); n != 6 {
		t.Fatalf("%d jobs, want 6 (one per accepted idempotency key)", n)
	}
}

// The API decodes a body as its route decodes a record: a route keyed by
// a body field takes the key from the body, and a body the route would
// park is a 400 that says why. Headers, when given, win.
func TestEnqueueDecodesLikeIngest(t *testing.T) {
	t.Parallel()
	e := enqueueEnv(t)
	type answer struct {
		ID int64 `json:"id"`
	}
	keyOf := func(id int64) string {
		job := decode[map[string]any](t, e.get(t, fmt.Sprintf("/v1/jobs/%d", id)).must(t, http.StatusOK))
		return fmt.Sprint(job["key"])
	}
	a := decode[answer](t, e.enqueue(t, "/v1/queues/q/jobs?kind=keyed", "k1", "application/json", `{"customer":{"id":"c-7"}}`).
		must(t, http.StatusAccepted))
	if k := keyOf(a.ID); k != "c-7" {
		t.Errorf("key %q, want c-7 from the body", k)
	}
	a = decode[answer](t, e.enqueue(t, "/v1/queues/q/jobs?kind=keyed", "k2", "", `{"customer":{"id":"c-7"}}`,
		"Switchyard-Key", "c-8").must(t, http.StatusAccepted))
	if k := keyOf(a.ID); k != "c-8" {
		t.Errorf("key %q, want c-8 from Switchyard-Key", k)
	}
	for _, c := range []struct {
		name, kind, body, field, has string
		headers                      []string
	}{
		{"body not JSON", "keyed", "not json", "body", "value is not JSON", nil},
		{"key field not text", "keyed", `{"customer":{"id":{"a":1}}}`, "body", "is an object", nil},
		{"key field missing", "keyed", `{}`, "Switchyard-Key", "field customer.id", nil},
		{"key field not UTF-8", "keyed", "{\"customer\":{\"id\":\"\xff\"}}", "body", "not valid UTF-8", nil},
		{"version field missing", "versioned", `{}`, "Switchyard-Version", "field v", []string{"Switchyard-Key", "c"}},
		{"key header too long", "ordered", `{}`, "Switchyard-Key", "over the 1024-byte limit", []string{"Switchyard-Key", strings.Repeat("k", 3000)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := wantError(t, e.enqueue(t, "/v1/queues/q/jobs?kind="+c.kind, "x-"+c.name, "", c.body, c.headers...),
				http.StatusBadRequest, c.field)
			if !strings.Contains(got.Error, c.has) {
				t.Errorf("error %q, want it to say %q", got.Error, c.has)
			}
		})
	}
	got := wantError(t, e.enqueue(t, "/v1/queues/q/jobs?kind=k", strings.Repeat("i", 3000), "", `{}`),
		http.StatusBadRequest, "Idempotency-Key")
	if !strings.Contains(got.Error, "over the 1024-byte limit") {
		t.Errorf("error %q", got.Error)
	}
}

// The same Idempotency-Key with a different body is a new request under a
// used key: 409, pointing at the job the key made; the same body is a
// retry and gets its answer.
func TestEnqueueKeyReusedForAnotherBody(t *testing.T) {
	t.Parallel()
	e := enqueueEnv(t)
	first := e.enqueue(t, "/v1/queues/q/jobs?kind=k", "order-1", "", `{"n":1}`).must(t, http.StatusAccepted)
	e.enqueue(t, "/v1/queues/q/jobs?kind=k", "order-1", "", `{"n":1}`).must(t, http.StatusAccepted)
	r := e.enqueue(t, "/v1/queues/q/jobs?kind=k", "order-1", "", `{"n":2}`)
	wantError(t, r, http.StatusConflict, "Idempotency-Key")
	if r.header.Get("Location") != first.header.Get("Location") {
		t.Errorf("Location %q, want the first job's %q", r.header.Get("Location"), first.header.Get("Location"))
	}
	if n := count(t, e, `SELECT count(*) FROM all_jobs`); n != 1 {
		t.Fatalf("%d jobs, want 1", n)
	}
}

// A full queue answers a used key as a queue with room does: the same
// body is a retry and gets its job, a different body is the same 409.
func TestEnqueueKeyReusedWhenQueueFull(t *testing.T) {
	t.Parallel()
	e := enqueueEnv(t)
	first := e.enqueue(t, "/v1/queues/small/jobs?kind=s", "s-1", "", "body-1").must(t, http.StatusAccepted)
	e.enqueue(t, "/v1/queues/small/jobs?kind=s", "s-2", "", "body-2").must(t, http.StatusAccepted)
	wantError(t, e.enqueue(t, "/v1/queues/small/jobs?kind=s", "s-3", "", "body-3"), http.StatusTooManyRequests, "queue")

	retry := e.enqueue(t, "/v1/queues/small/jobs?kind=s", "s-1", "", "body-1").must(t, http.StatusAccepted)
	if retry.header.Get("Location") != first.header.Get("Location") {
		t.Errorf("retry's Location %q, want the first job's %q", retry.header.Get("Location"), first.header.Get("Location"))
	}
	r := e.enqueue(t, "/v1/queues/small/jobs?kind=s", "s-1", "", "DIFFERENT body")
	got := wantError(t, r, http.StatusConflict, "Idempotency-Key")
	if !strings.Contains(got.Error, "different body") {
		t.Errorf("error %q, want the 409 of a key reused for a different body", got.Error)
	}
	if r.header.Get("Location") != first.header.Get("Location") {
		t.Errorf("Location %q, want the first job's %q", r.header.Get("Location"), first.header.Get("Location"))
	}
	if n := count(t, e, `SELECT count(*) FROM all_jobs`); n != 2 {
		t.Fatalf("%d jobs, want 2", n)
	}
}

func count(t *testing.T, e *env, sql string) int {
	t.Helper()
	var n int
	if err := e.store.Pool().QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
