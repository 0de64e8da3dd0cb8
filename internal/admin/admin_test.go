package admin

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/switchyard-dev/switchyard/internal/dlq"
	"github.com/switchyard-dev/switchyard/internal/ingest"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/jobstate"
	"github.com/switchyard-dev/switchyard/workers"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// dbURL is the real Postgres every test runs against.
func dbURL(t *testing.T) string {
	t.Helper()
	url := os.Getenv("SWITCHYARD_DATABASE_URL")
	if url == "" {
		t.Fatal("SWITCHYARD_DATABASE_URL is not set: run `make test`, or `deploy/local/postgres.sh start` " +
			"and export what `deploy/local/postgres.sh env` prints")
	}
	return url
}

// newStore opens a store on a schema of its own, migrated or not, and
// drops the schema when the test ends.
func newStore(t *testing.T, migrate bool) *pgstore.Store {
	t.Helper()
	ctx := context.Background()
	st, err := pgstore.Open(ctx, pgstore.Config{URL: dbURL(t), Schema: "t_admin_" + randomHex(t), MaxConns: 4})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		if err := st.DropSchema(context.Background()); err != nil {
			t.Errorf("drop schema: %v", err)
		}
		st.Close()
	})
	if migrate {
		if _, err := st.Migrate(ctx); err != nil {
			t.Fatalf("migrate: %v", err)
		}
	}
	return st
}

func randomHex(t *testing.T) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// env is a running admin server over a store.
type env struct {
	store *pgstore.Store
	url   string
	token string // sent as a bearer token when non-empty
}

func newEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	st := newStore(t, true)
	return serve(t, cfg, st, zaptest.NewLogger(t))
}

func serve(t *testing.T, cfg Config, st *pgstore.Store, log *zap.Logger) *env {
	t.Helper()
	ts := httptest.NewServer(New(cfg, st, log).Handler())
	t.Cleanup(ts.Close)
	return &env{store: st, url: ts.URL, token: cfg.Token}
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (e *env) do(t *testing.T, method, path string, body io.Reader, auth string) reply {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return reply{status: res.StatusCode, header: res.Header, body: b}
}

// get sends GET with the env's token, if any.
func (e *env) get(t *testing.T, path string) reply {
	t.Helper()
	auth := ""
	if e.token != "" {
		auth = "Bearer " + e.token
	}
	return e.do(t, "GET", path, nil, auth)
}

// must asserts the status and returns the reply for decoding.
func (r reply) must(t *testing.T, status int) reply {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	return r
}

func decode[T any](t *testing.T, r reply) T {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var v T
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("decoding %s: %v", r.body, err)
	}
	return v
}

// wantError asserts the SPEC's error shape, status and field.
func wantError(t *testing.T, r reply, status int, field string) errorBody {
	t.Helper()
	r.must(t, status)
	e := decode[errorBody](t, r)
	if e.Error == "" || e.Field != field {
		t.Errorf("error body %s: want a message and field %q", r.body, field)
	}
	return e
}

func newJob(queue, key string, offset int64) pgstore.NewJob {
	return pgstore.NewJob{
		Route: "orders", Kind: "order.sync", Queue: queue, Key: key,
		DedupeKey: strconv.FormatInt(offset, 10), Payload: []byte(`{"n":1}`),
		HeaderKeys: []string{}, HeaderVals: [][]byte{}, MaxAttempts: 3,
		Topic: "orders", Partition: 0, Offset: offset,
	}
}

// seed ingests jobs and poison in one batch, advancing each partition's
// stored offset past its records as ingest does.
func seed(t *testing.T, st *pgstore.Store, jobs []pgstore.NewJob, poison []pgstore.Poison) {
	t.Helper()
	type tp struct {
		topic string
		part  int32
	}
	next := map[tp]int64{}
	mark := func(topic string, part int32, off int64) {
		k := tp{topic, part}
		next[k] = max(next[k], off+1)
	}
	for _, j := range jobs {
		mark(j.Topic, j.Partition, j.Offset)
	}
	for _, p := range poison {
		mark(p.Topic, p.Partition, p.Offset)
	}
	b := pgstore.IngestBatch{Group: "g", Jobs: jobs, Poison: poison}
	for k, n := range next {
		b.Offsets = append(b.Offsets, pgstore.OffsetAdvance{Topic: k.topic, Partition: k.part, Expected: -1, Next: n})
	}
	if _, err := st.IngestCommit(context.Background(), b); err != nil {
		t.Fatalf("ingest: %v", err)
	}
}

// claim moves n queued jobs of queue to running, as a worker would.
func claim(t *testing.T, st *pgstore.Store, queue string, n int) []pgstore.Lease {
	t.Helper()
	jobs, _, err := st.JobClaim(context.Background(), pgstore.JobClaimParams{
		Queue: queue, Limit: n, Lease: time.Minute, MaxRuntime: time.Hour})
	if err != nil || len(jobs) != n {
		t.Fatalf("claim %d from %s: got %d, %v", n, queue, len(jobs), err)
	}
	var leases []pgstore.Lease
	for _, j := range jobs {
		leases = append(leases, pgstore.Lease{ID: j.ID, Token: j.Token})
	}
	return leases
}

// kill ends a claimed job as dead with a permanent error, which parks it.
func kill(t *testing.T, st *pgstore.Store, l pgstore.Lease) {
	t.Helper()
	done, err := st.JobComplete(context.Background(), []pgstore.Outcome{{
		ID: l.ID, Token: l.Token, State: "dead", Reason: "permanent", Error: "HTTP 422: bad order"}})
	if err != nil || !done.Applied[l.Token] {
		t.Fatalf("complete job %d: %v %v", l.ID, done.Applied, err)
	}
}

// fail ends a claimed job's attempt with an error: retrying at once, or
// dead and parked as max_attempts.
func fail(t *testing.T, st *pgstore.Store, l pgstore.Lease, msg string, dead bool) {
	t.Helper()
	o := pgstore.Outcome{ID: l.ID, Token: l.Token, State: "retrying", Error: msg}
	if dead {
		o.State, o.Reason = "dead", "max_attempts"
	}
	done, err := st.JobComplete(context.Background(), []pgstore.Outcome{o})
	if err != nil || !done.Applied[l.Token] {
		t.Fatalf("fail job %d: %v %v", l.ID, done.Applied, err)
	}
}

// runToDeath runs the only runnable job of queue through its attempts,
// each failing, until it dies; the last one is attempt max.
func runToDeath(t *testing.T, st *pgstore.Store, queue string, from, max int, msg string) pgstore.Lease {
	t.Helper()
	var l pgstore.Lease
	for n := from; n <= max; n++ {
		l = claim(t, st, queue, 1)[0]
		fail(t, st, l, msg, n == max)
	}
	return l
}

// parkedEntry is the parked DLQ entry of job id.
func parkedEntry(t *testing.T, st *pgstore.Store, id int64) int64 {
	t.Helper()
	entries, err := st.DLQList(context.Background(), pgstore.DLQFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.JobID != nil && *e.JobID == id {
			return e.ID
		}
	}
	t.Fatalf("job %d has no parked entry", id)
	return 0
}

func jobIDs(t *testing.T, st *pgstore.Store) []int64 {
	t.Helper()
	jobs, err := st.JobList(context.Background(), pgstore.JobFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	return ids
}

func TestJobGet(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	j := newJob("interactive", "cust-1", 42)
	j.Partition = 3
	v := int64(7)
	j.Version = &v
	seed(t, e.store, []pgstore.NewJob{j}, nil)
	id := jobIDs(t, e.store)[0]

	r := e.get(t, fmt.Sprintf("/v1/jobs/%d", id)).must(t, http.StatusOK)
	got := decode[map[string]any](t, r)
	var keys []string
	for k := range got {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	wantKeys := []string{"attempts", "created_at", "dlq_entry_id", "errors", "finished_at", "headers", "id", "key", "kind", "last_error",
		"max_attempts", "payload_base64", "queue", "redrives", "route", "scheduled_at", "source", "started_at", "state", "version"}
	if !slices.Equal(keys, wantKeys) {
		t.Errorf("fields %v, want %v", keys, wantKeys)
	}
	want := map[string]any{
		"id": float64(id), "kind": "order.sync", "queue": "interactive", "route": "orders",
		"state": "queued", "key": "cust-1", "version": float64(7), "attempts": float64(0),
		"max_attempts": float64(3), "last_error": nil, "started_at": nil, "finished_at": nil,
		"source":   map[string]any{"topic": "orders", "partition": float64(3), "offset": float64(42)},
		"redrives": []any{},
	}
	for k, w := range want {
		if !reflect.DeepEqual(got[k], w) {
			t.Errorf("%s = %#v, want %#v", k, got[k], w)
		}
	}
	for _, k := range []string{"created_at", "scheduled_at"} {
		if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(got[k])); err != nil {
			t.Errorf("%s = %v: %v", k, got[k], err)
		}
	}

	t.Run("not found", func(t *testing.T) {
		t.Parallel()
		missing := id + 1000
		r := e.get(t, fmt.Sprintf("/v1/jobs/%d", missing))
		got := wantError(t, r, http.StatusNotFound, "id")
		if want := fmt.Sprintf("job %d not found", missing); got.Error != want {
			t.Errorf("error %q, want %q", got.Error, want)
		}
	})
	for bad, want := range map[string]string{
		"abc": "", "0": "", "-5": "", "1.5": "", "+1": "", "01": "",
		"99999999999999999999": "99999999999999999999 is larger than any id (at most 9223372036854775807)",
	} {
		if want == "" {
			want = "id must be a positive integer, without a sign or leading zeros"
		}
		t.Run("bad id "+bad, func(t *testing.T) {
			t.Parallel()
			got := wantError(t, e.get(t, "/v1/jobs/"+bad), http.StatusBadRequest, "id")
			if got.Error != want {
				t.Errorf("error %q, want %q", got.Error, want)
			}
		})
	}
}

// A re-drive starts a job's attempts at 1 again and keeps its errors: the
// job's detail lists its re-drives, each with the number of errors before
// it, so that a reader can tell the runs apart (1, 2, 3 | 1, 2, 3).
// POST /v1/jobs/{id}/cancel ends an unfinished job cancelled and answers
// it; a job that has finished is a 409 that says which state it ended in
// (I8: the problem named, not "a state"), and an unknown id a 404.
func TestJobCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	seed(t, e.store, []pgstore.NewJob{newJob("interactive", "c1", 1), newJob("interactive", "c2", 2)}, nil)
	ids := jobIDs(t, e.store)
	kill(t, e.store, claim(t, e.store, "interactive", 1)[0])
	dead, queued := ids[0], ids[1]

	r := e.send(t, "POST", fmt.Sprintf("/v1/jobs/%d/cancel", queued), "").must(t, http.StatusOK)
	if got := decode[pgstore.JobRow](t, r); got.ID != queued || got.State != jobstate.Cancelled {
		t.Errorf("cancel answered job %d in state %s, want job %d cancelled", got.ID, got.State, queued)
	}
	for id, state := range map[int64]jobstate.State{dead: jobstate.Dead, queued: jobstate.Cancelled} {
		msg := wantError(t, e.send(t, "POST", fmt.Sprintf("/v1/jobs/%d/cancel", id), ""), http.StatusConflict, "").Error
		if want := fmt.Sprintf("job %d has finished already (%s)", id, state); !strings.Contains(msg, want) {
			t.Errorf("cancel of a %s job: error %q, want it to say %q", state, msg, want)
		}
	}
	wantError(t, e.send(t, "POST", "/v1/jobs/999999/cancel", ""), http.StatusNotFound, "id")
}

func TestJobGetRedrives(t *testing.T) {
	t.Parallel()
	st := newStore(t, true)
	e := serve(t, Config{DLQ: dlq.New(st, nil, nil)}, st, zaptest.NewLogger(t))
	seed(t, st, []pgstore.NewJob{newJob("interactive", "cust-1", 1)}, nil)
	id := runToDeath(t, st, "interactive", 1, 3, "HTTP 503").ID
	type detail struct {
		Attempts int `json:"attempts"`
		Errors   []struct {
			Attempt int       `json:"attempt"`
			At      time.Time `json:"at"`
		} `json:"errors"`
		Redrives []pgstore.JobRedrive `json:"redrives"`
	}
	redrive := func() int64 {
		t.Helper()
		entry := parkedEntry(t, st, id)
		e.do(t, "POST", fmt.Sprintf("/v1/dlq/%d/redrive", entry), nil, "").must(t, http.StatusOK)
		return entry
	}
	first := redrive()
	runToDeath(t, st, "interactive", 1, 3, "HTTP 500")
	second := redrive()
	l := claim(t, st, "interactive", 1)[0]
	fail(t, st, l, "HTTP 500", false)

	d := decode[detail](t, e.get(t, fmt.Sprintf("/v1/jobs/%d", id)).must(t, http.StatusOK))
	var attempts []int
	for _, x := range d.Errors {
		attempts = append(attempts, x.Attempt)
	}
	if !slices.Equal(attempts, []int{1, 2, 3, 1, 2, 3, 1}) || d.Attempts != 1 {
		t.Fatalf("errors of attempts %v, attempts %d; want 1 2 3 1 2 3 1, and 1", attempts, d.Attempts)
	}
	if len(d.Redrives) != 2 {
		t.Fatalf("re-drives %+v, want 2", d.Redrives)
	}
	for i, want := range []struct {
		entry  int64
		before int
	}{{first, 3}, {second, 6}} {
		r := d.Redrives[i]
		if r.EntryID != want.entry || r.By != "anonymous" || r.ErrorsBefore != want.before {
			t.Errorf("re-drive %d: %+v, want entry %d by anonymous after %d errors", i, r, want.entry, want.before)
		}
		if prev, next := d.Errors[want.before-1].At, d.Errors[want.before].At; !prev.Before(r.At) || !r.At.Before(next) {
			t.Errorf("re-drive %d at %s, not between the errors at %s and %s", i, r.At, prev, next)
		}
	}
}

// pages follows next from path until it is empty and returns every item
// and the size of each page.
func pages[T any](t *testing.T, e *env, path string, id func(T) int64) ([]T, []int) {
	t.Helper()
	var all []T
	var sizes []int
	after := ""
	for range 100 {
		p := decode[page[T]](t, e.get(t, path+after).must(t, http.StatusOK))
		all = append(all, p.Items...)
		sizes = append(sizes, len(p.Items))
		if p.Next == "" {
			return all, sizes
		}
		if want := strconv.FormatInt(id(p.Items[len(p.Items)-1]), 10); p.Next != want {
			t.Fatalf("next %q, want the last id %s", p.Next, want)
		}
		after = "&after=" + p.Next
	}
	t.Fatalf("%s: pagination does not end", path)
	return nil, nil
}

// ascendingUnique checks that ids strictly increase, so no item was
// repeated across pages.
func ascendingUnique(t *testing.T, ids []int64) {
	t.Helper()
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("ids not strictly ascending at %d: %v", i, ids)
		}
	}
}

func TestJobList(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	var jobs []pgstore.NewJob
	for i := range 25 {
		jobs = append(jobs, newJob("a", fmt.Sprintf("k%d", i%5), int64(i)))
	}
	for i := 25; i < 30; i++ {
		jobs = append(jobs, newJob("b", "", int64(i)))
	}
	seed(t, e.store, jobs, nil)
	claim(t, e.store, "b", 2)
	jobID := func(j pgstore.JobRow) int64 { return j.ID }
	idsOf := func(js []pgstore.JobRow) []int64 {
		var ids []int64
		for _, j := range js {
			ids = append(ids, j.ID)
		}
		return ids
	}

	t.Run("three pages", func(t *testing.T) {
		t.Parallel()
		got, sizes := pages(t, e, "/v1/jobs?queue=a&limit=10", jobID)
		if !slices.Equal(sizes, []int{10, 10, 5}) {
			t.Errorf("page sizes %v, want [10 10 5]", sizes)
		}
		ascendingUnique(t, idsOf(got))
		for _, j := range got {
			if j.Queue != "a" {
				t.Errorf("job %d in queue %q", j.ID, j.Queue)
			}
		}
		if len(got) != 25 {
			t.Errorf("%d jobs, want 25", len(got))
		}
	})
	t.Run("exact multiple of the limit", func(t *testing.T) {
		t.Parallel()
		// 30 jobs in pages of 10: the third page is full yet the last,
		// and must say so rather than point at an empty fourth page.
		got, sizes := pages(t, e, "/v1/jobs?limit=10", jobID)
		if !slices.Equal(sizes, []int{10, 10, 10}) {
			t.Errorf("page sizes %v, want [10 10 10]", sizes)
		}
		ids := idsOf(got)
		ascendingUnique(t, ids)
		if !slices.Equal(ids, jobIDs(t, e.store)) {
			t.Errorf("ids %v, want every job", ids)
		}
	})
	for _, c := range []struct {
		query string
		n     int
	}{
		{"", 30},
		{"?key=k1&queue=a", 5},
		{"?state=running", 2},
		{"?state=queued&queue=b", 3},
		{"?state=dead", 0},
	} {
		t.Run("filter "+c.query, func(t *testing.T) {
			t.Parallel()
			r := e.get(t, "/v1/jobs"+c.query).must(t, http.StatusOK)
			if c.n == 0 && !bytes.Contains(r.body, []byte(`"items":[]`)) {
				t.Errorf("empty list is not []: %s", r.body)
			}
			p := decode[page[pgstore.JobRow]](t, r)
			if len(p.Items) != c.n || p.Next != "" {
				t.Errorf("%d items, next %q; want %d, \"\"", len(p.Items), p.Next, c.n)
			}
		})
	}
}

func TestListValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	for _, c := range []struct{ path, field string }{
		{"/v1/jobs?state=bogus", "state"},
		{"/v1/jobs?state=queued&state=dead", "state"},
		{"/v1/jobs?limit=0", "limit"},
		{"/v1/jobs?limit=501", "limit"},
		{"/v1/jobs?limit=ten", "limit"},
		{"/v1/jobs?after=-1", "after"},
		{"/v1/jobs?after=abc", "after"},
		{"/v1/jobs?stat=dead", "stat"},
		{"/v1/jobs?queue=%ff", "queue"},
		{"/v1/jobs?key=a%00b", "key"},
		{"/v1/jobs?%zz", ""},
		{"/v1/dlq?reason=oops", "reason"},
		{"/v1/dlq?state=dead", "state"},
		{"/v1/dlq?limit=100000", "limit"},
		{"/v1/dlq?after=1.5", "after"},
	} {
		t.Run(c.path, func(t *testing.T) {
			t.Parallel()
			wantError(t, e.get(t, c.path), http.StatusBadRequest, c.field)
		})
	}
}

func TestDLQ(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	// Not UTF-8, with a NUL: only base64 carries it through JSON intact.
	raw := []byte{0xff, 0x00, 0xfe, 'x', 0x80}
	poison := []pgstore.Poison{{
		Reason: "decode", Route: "orders", Queue: "interactive", Error: "invalid character",
		Payload: raw, HeaderKeys: []string{"trace"}, HeaderVals: [][]byte{{0xc3, 0x28}},
		Topic: "orders", Partition: 0, Offset: 10,
	}}
	for off := int64(11); off < 14; off++ {
		poison = append(poison, pgstore.Poison{Reason: "missing_field", Route: "orders", Queue: "interactive",
			Error: "customer_id: missing", Payload: []byte(`{}`), Topic: "orders", Partition: 0, Offset: off})
	}
	seed(t, e.store, []pgstore.NewJob{newJob("interactive", "cust-9", 14)}, poison)
	dead := claim(t, e.store, "interactive", 1)[0]
	kill(t, e.store, dead)
	entryID := func(d pgstore.DLQEntry) int64 { return d.ID }

	r := e.get(t, "/v1/dlq?reason=decode").must(t, http.StatusOK)
	p := decode[page[pgstore.DLQEntry]](t, r)
	if len(p.Items) != 1 {
		t.Fatalf("decode entries: %s", r.body)
	}
	d := p.Items[0]
	if d.JobID != nil || d.Queue != "interactive" || d.LastError != "invalid character" {
		t.Errorf("entry %+v", d)
	}
	// A list leaves the record's bytes out: a page costs bounded memory.
	for _, field := range []string{"payload_base64", "headers", "errors"} {
		if bytes.Contains(r.body, []byte(`"`+field+`"`)) {
			t.Errorf("list answer carries %s: %s", field, r.body)
		}
	}
	if !bytes.Contains(r.body, []byte(`"job_id":null`)) {
		t.Errorf("poison entry's job_id is not null: %s", r.body)
	}
	if d.Source == nil || *d.Source != (pgstore.SourceRow{Topic: "orders", Partition: 0, Offset: 10}) {
		t.Errorf("source %+v", d.Source)
	}

	t.Run("get", func(t *testing.T) {
		t.Parallel()
		r := e.get(t, fmt.Sprintf("/v1/dlq/%d", d.ID)).must(t, http.StatusOK)
		got := decode[pgstore.DLQEntry](t, r)
		if !bytes.Contains(r.body, []byte(`"payload_base64":"`+base64.StdEncoding.EncodeToString(raw)+`"`)) {
			t.Errorf("payload not base64 in %s", r.body)
		}
		wantHeaders := []pgstore.HeaderRow{{Key: "trace", Value: []byte{0xc3, 0x28}}}
		if !reflect.DeepEqual(got.Headers, wantHeaders) {
			t.Errorf("headers %+v, want %+v", got.Headers, wantHeaders)
		}
		if len(got.Errors) == 0 {
			t.Errorf("no error history in %s", r.body)
		}
		got.Payload, got.Headers, got.Errors, got.RecordKey = nil, nil, nil, nil
		if !reflect.DeepEqual(got, d) {
			t.Errorf("got %+v, want %+v", got, d)
		}
	})
	t.Run("dead job", func(t *testing.T) {
		t.Parallel()
		p := decode[page[pgstore.DLQEntry]](t, e.get(t, "/v1/dlq?reason=permanent&queue=interactive&route=orders").must(t, http.StatusOK))
		if len(p.Items) != 1 {
			t.Fatalf("%d permanent entries, want 1", len(p.Items))
		}
		got := p.Items[0]
		if got.JobID == nil || *got.JobID != dead.ID || got.Attempts != 1 || got.LastError != "HTTP 422: bad order" {
			t.Errorf("entry %+v", got)
		}
	})
	t.Run("pages", func(t *testing.T) {
		t.Parallel()
		got, sizes := pages(t, e, "/v1/dlq?limit=2", entryID)
		if !slices.Equal(sizes, []int{2, 2, 1}) {
			t.Errorf("page sizes %v, want [2 2 1]", sizes)
		}
		var ids []int64
		for _, g := range got {
			ids = append(ids, g.ID)
		}
		ascendingUnique(t, ids)
	})
	t.Run("other queue", func(t *testing.T) {
		t.Parallel()
		r := e.get(t, "/v1/dlq?queue=bulk").must(t, http.StatusOK)
		if !bytes.Equal(bytes.TrimSpace(r.body), []byte(`{"items":[],"next":""}`)) {
			t.Errorf("body %s", r.body)
		}
	})
	t.Run("not found", func(t *testing.T) {
		t.Parallel()
		got := wantError(t, e.get(t, "/v1/dlq/999999"), http.StatusNotFound, "id")
		if got.Error != "DLQ entry 999999 not found" {
			t.Errorf("error %q", got.Error)
		}
	})
	t.Run("bad id", func(t *testing.T) {
		t.Parallel()
		wantError(t, e.get(t, "/v1/dlq/x"), http.StatusBadRequest, "id")
	})
}

// GET /v1/queues with the config's group caps: a tenant at its cap is
// waiting behind its group's head, not runnable.
func TestQueuesCountAHeldGroupAsWaiting(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{Queues: []string{"tenants"},
		Groups: pgstore.Groups{Routes: map[string]pgstore.GroupRoute{"orders": {Queue: "tenants", Cap: 1}}, Only: map[string]bool{"tenants": true}}})
	var jobs []pgstore.NewJob
	for i := range 2 {
		j := newJob("tenants", "", int64(i))
		j.Group = "T"
		jobs = append(jobs, j)
	}
	seed(t, e.store, jobs, nil)
	claim(t, e.store, "tenants", 1)
	p := decode[page[pgstore.QueueStat]](t, e.get(t, "/v1/queues").must(t, http.StatusOK))
	if len(p.Items) != 1 {
		t.Fatalf("queues %+v, want tenants alone", p.Items)
	}
	if q := p.Items[0]; q.OldestRunnableAgeSeconds != 0 || q.OldestWaitingAgeSeconds <= 0 || q.Jobs["queued"] != 1 {
		t.Errorf("tenants: runnable age %v, waiting age %v, queued %d; want 0, above 0 and 1 (held, still queued)",
			q.OldestRunnableAgeSeconds, q.OldestWaitingAgeSeconds, q.Jobs["queued"])
	}
	// The held job says so, and why.
	queued := decode[page[pgstore.JobRow]](t, e.get(t, "/v1/jobs?state=queued").must(t, http.StatusOK))
	if len(queued.Items) != 1 {
		t.Fatalf("queued jobs %+v, want the held one", queued.Items)
	}
	j := decode[pgstore.JobDetail](t, e.get(t, fmt.Sprintf("/v1/jobs/%d", queued.Items[0].ID)).must(t, http.StatusOK))
	if want := (pgstore.GroupPosition{Value: "T", MaxRunning: 1, Running: 1, Held: true}); j.Group == nil || *j.Group != want {
		t.Errorf("the held job's group %+v, want %+v", j.Group, want)
	}
}

func TestQueues(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{Queues: []string{"interactive", "bulk", "idle"}})
	var jobs []pgstore.NewJob
	for i := range 4 {
		jobs = append(jobs, newJob("interactive", "", int64(i)))
	}
	jobs = append(jobs, newJob("adhoc", "", 4))
	seed(t, e.store, jobs, []pgstore.Poison{{Reason: "too_large", Route: "orders", Queue: "bulk",
		Error: "record over 1048576 bytes", Payload: []byte{}, Topic: "orders", Partition: 1, Offset: 0}})
	leases := claim(t, e.store, "interactive", 2)
	kill(t, e.store, leases[0])

	p := decode[page[pgstore.QueueStat]](t, e.get(t, "/v1/queues").must(t, http.StatusOK))
	var names []string
	byName := map[string]pgstore.QueueStat{}
	for _, q := range p.Items {
		names = append(names, q.Queue)
		byName[q.Queue] = q
	}
	if want := []string{"adhoc", "bulk", "idle", "interactive"}; !slices.Equal(names, want) || p.Next != "" {
		t.Fatalf("queues %v next %q, want %v", names, p.Next, want)
	}
	zeroDLQ := map[string]int64{"decode": 0, "missing_field": 0, "too_large": 0, "permanent": 0, "max_attempts": 0, "gap": 0}
	withDLQ := func(reason string, n int64) map[string]int64 {
		m := maps.Clone(zeroDLQ)
		m[reason] = n
		return m
	}
	zeroJobs := map[string]int64{"waiting": 0, "queued": 0, "running": 0, "retrying": 0, "dead": 0, "reserved": 0}
	want := map[string]pgstore.QueueStat{
		"idle": {Queue: "idle", Jobs: zeroJobs, DLQ: zeroDLQ},
		"bulk": {Queue: "bulk", Jobs: zeroJobs, DLQ: withDLQ("too_large", 1)},
		"interactive": {Queue: "interactive", Running: 1, Dead: 1, DLQ: withDLQ("permanent", 1),
			Jobs: map[string]int64{"waiting": 0, "queued": 2, "running": 1, "retrying": 0, "dead": 1, "reserved": 0}},
	}
	for name, w := range want {
		got := byName[name]
		w.OldestRunnableAgeSeconds = got.OldestRunnableAgeSeconds
		if !reflect.DeepEqual(got, w) {
			t.Errorf("%s: got %+v, want %+v", name, got, w)
		}
	}
	if age := byName["interactive"].OldestRunnableAgeSeconds; age <= 0 {
		t.Errorf("interactive oldest runnable age %v, want > 0", age)
	}
	if age := byName["idle"].OldestRunnableAgeSeconds; age != 0 {
		t.Errorf("idle oldest runnable age %v, want 0", age)
	}
	if byName["adhoc"].Jobs["queued"] != 1 {
		t.Errorf("adhoc %+v, want 1 queued", byName["adhoc"])
	}
}

// A refused checkpoint names the attempt by its Switchyard-Token, as
// such: the target also holds a Switchyard-Attempt number, and "attempt
// 7" for token 7 sends its author looking at the wrong header. Without
// the token, it names the job that no attempt holds.
func TestCheckpointRefusalNamesTheToken(t *testing.T) {
	t.Parallel()
	key := make([]byte, 32)
	e := newEnv(t, Config{AttemptKey: key})
	post := func(token, secret string) reply {
		req, err := http.NewRequest("POST", e.url+"/v1/jobs/42/checkpoint", strings.NewReader("page 3"))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Switchyard-Token", token)
		}
		req.Header.Set("Switchyard-Attempt-Secret", secret)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return reply{status: res.StatusCode, header: res.Header, body: b}
	}
	for _, c := range []struct {
		name, token, secret, field, want string
	}{
		{"a secret not the attempt's", "7", strings.Repeat("0", 64), "Switchyard-Attempt-Secret",
			"not the secret of job 42's attempt with Switchyard-Token 7"},
		// Job 42 does not exist: the right secret, but nothing held.
		{"an attempt that holds nothing", "7", workers.AttemptSecret(key, 42, 7), "Switchyard-Token",
			"the attempt with Switchyard-Token 7 no longer holds job 42"},
		// The secret alone (SPEC §5) is checked against the attempt
		// that holds the job now: none.
		{"the secret alone, of a job no attempt holds", "", workers.AttemptSecret(key, 42, 7), "Switchyard-Attempt-Secret",
			"no attempt holds job 42"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := wantError(t, post(c.token, c.secret), http.StatusConflict, c.field)
			if !strings.Contains(e.Error, c.want) {
				t.Errorf("error %q, want it to say %q", e.Error, c.want)
			}
		})
	}
}

func TestToken(t *testing.T) {
	t.Parallel()
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "switchyard_up 1\n")
	})
	e := newEnv(t, Config{Token: "s3cret", Metrics: metrics, AttemptKey: make([]byte, 32)})
	for _, c := range []struct {
		name, path, auth string
		status           int
	}{
		{"no token", "/v1/queues", "", http.StatusUnauthorized},
		{"wrong token", "/v1/queues", "Bearer s3cre", http.StatusUnauthorized},
		{"longer token", "/v1/queues", "Bearer s3cret2", http.StatusUnauthorized},
		{"basic scheme", "/v1/queues", "Basic s3cret", http.StatusUnauthorized},
		{"bare token", "/v1/queues", "s3cret", http.StatusUnauthorized},
		{"right token", "/v1/queues", "Bearer s3cret", http.StatusOK},
		{"scheme is case-insensitive", "/v1/queues", "bearer s3cret", http.StatusOK},
		{"more than one space after the scheme", "/v1/queues", "BEARER  s3cret", http.StatusOK},
		{"unknown /v1 path needs the token first", "/v1/nope", "", http.StatusUnauthorized},
		{"unknown /v1 path with the token", "/v1/nope", "Bearer s3cret", http.StatusNotFound},
		{"actions need the token", "/v1/jobs/1/cancel", "", http.StatusUnauthorized},
		// Its attempt's secret is its credential; this one has none.
		{"a checkpoint needs no token", "/v1/jobs/1/checkpoint", "", http.StatusBadRequest},
		{"nor a look-alike path", "/v1/jobs/1/checkpoint/x", "", http.StatusUnauthorized},
		{"healthz is open", "/healthz", "", http.StatusOK},
		{"metrics are open", "/metrics", "", http.StatusOK},
		{"dashboard is open", "/", "", http.StatusOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			method := "GET"
			if strings.HasSuffix(c.path, "/cancel") || strings.Contains(c.path, "/checkpoint") {
				method = "POST"
			}
			r := e.do(t, method, c.path, nil, c.auth).must(t, c.status)
			if r.header.Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("no nosniff header")
			}
			if strings.HasPrefix(c.path, "/v1/") && r.header.Get("Cache-Control") != "no-store" {
				t.Errorf("Cache-Control %q on %s", r.header.Get("Cache-Control"), c.path)
			}
			if c.status == http.StatusUnauthorized {
				if r.header.Get("WWW-Authenticate") != "Bearer" {
					t.Errorf("WWW-Authenticate %q", r.header.Get("WWW-Authenticate"))
				}
				wantError(t, r, http.StatusUnauthorized, "")
			}
			if c.path == "/metrics" && string(r.body) != "switchyard_up 1\n" {
				t.Errorf("metrics body %q", r.body)
			}
		})
	}
}

// Named tokens: each authenticates as its holder, a read token may only
// read (every POST is 403, and nothing happens), an operate token may
// act, and the audit log names the holder of the token that acted.
func TestNamedTokensAndRoles(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{Token: "op-s3cret", Queues: []string{"bulk"}, Tokens: []Token{
		{Name: "grafana", Secret: "ro-s3cret"}, {Name: "oncall", Secret: "oncall-s3cret", Operate: true}}})
	for _, c := range []struct {
		name, method, path, auth string
		status                   int
	}{
		{"read token reads", "GET", "/v1/queues", "Bearer ro-s3cret", http.StatusOK},
		{"read token may not act", "POST", "/v1/queues/bulk/pause", "Bearer ro-s3cret", http.StatusForbidden},
		{"an unknown token", "GET", "/v1/queues", "Bearer ro-s3cret2", http.StatusUnauthorized},
		{"operate token acts", "POST", "/v1/queues/bulk/pause", "Bearer oncall-s3cret", http.StatusOK},
		{"the default token acts", "POST", "/v1/queues/bulk/resume", "Bearer op-s3cret", http.StatusOK},
	} {
		r := e.do(t, c.method, c.path, nil, c.auth).must(t, c.status)
		if c.status == http.StatusForbidden {
			if b := wantError(t, r, http.StatusForbidden, "Authorization"); !strings.Contains(b.Error, "token grafana has role read") {
				t.Errorf("%s: %q", c.name, b.Error)
			}
		}
	}
	for auth, want := range map[string]string{"Bearer ro-s3cret": `{"name":"grafana","role":"read"}`,
		"Bearer oncall-s3cret": `{"name":"oncall","role":"operate"}`, "Bearer op-s3cret": `{"name":"default","role":"operate"}`} {
		if r := e.do(t, "GET", "/v1/whoami", nil, auth).must(t, http.StatusOK); strings.TrimSpace(string(r.body)) != want {
			t.Errorf("whoami with %s: %s, want %s", auth, r.body, want)
		}
	}
	type entry struct{ Actor, Action, Target string }
	got := decode[page[entry]](t, e.do(t, "GET", "/v1/audit", nil, "Bearer ro-s3cret").must(t, http.StatusOK))
	want := []entry{{"default", "resume", "queue/bulk"}, {"oncall", "pause", "queue/bulk"}}
	if fmt.Sprint(got.Items) != fmt.Sprint(want) {
		t.Fatalf("GET /v1/audit: %+v, want %+v (the read token's refused pause is not there: it did nothing)", got.Items, want)
	}
	wantError(t, e.do(t, "GET", "/v1/audit?action=frob", nil, "Bearer ro-s3cret"), http.StatusBadRequest, "action")
}

type readyReply struct {
	Status string            `json:"status"`
	Error  string            `json:"error"`
	Checks map[string]string `json:"checks"`
}

func TestReadyz(t *testing.T) {
	t.Parallel()
	t.Run("ready", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, Config{Ready: func(ctx context.Context) error {
			if d, ok := ctx.Deadline(); !ok || time.Until(d) > readyTimeout {
				return errors.New("no deadline of at most 2s")
			}
			return nil
		}})
		got := decode[readyReply](t, e.get(t, "/readyz").must(t, http.StatusOK))
		want := readyReply{Status: "ok", Checks: map[string]string{"postgres": "ok", "migrations": "ok", "kafka": "ok"}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("got %+v, want %+v", got, want)
		}
	})
	t.Run("not migrated", func(t *testing.T) {
		t.Parallel()
		e := serve(t, Config{}, newStore(t, false), zaptest.NewLogger(t))
		got := decode[readyReply](t, e.get(t, "/readyz").must(t, http.StatusServiceUnavailable))
		want := readyReply{Error: "not ready", Checks: map[string]string{
			"postgres": "ok", "migrations": fmt.Sprintf("at 0, want %d: run `switchyard migrate` first", pgstore.LatestVersion())}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("got %+v, want %+v", got, want)
		}
	})
	t.Run("kafka down", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, Config{Ready: func(context.Context) error { return errors.New("no broker reachable") }})
		got := decode[readyReply](t, e.get(t, "/readyz").must(t, http.StatusServiceUnavailable))
		if got.Checks["kafka"] != "no broker reachable" || got.Checks["postgres"] != "ok" {
			t.Errorf("checks %v", got.Checks)
		}
	})
}

// TestDatabaseDown checks that a database failure is a 503 on /readyz and
// a generic 500 on the API, with the real error in the log only.
func TestDatabaseDown(t *testing.T) {
	t.Parallel()
	st, err := pgstore.Open(context.Background(), pgstore.Config{URL: dbURL(t), Schema: "t_admin_" + randomHex(t), MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	st.Close() // every query now fails with "closed pool"
	core, logs := observer.New(zap.WarnLevel)
	e := serve(t, Config{}, st, zap.New(core))

	got := decode[readyReply](t, e.get(t, "/readyz").must(t, http.StatusServiceUnavailable))
	if got.Checks["postgres"] != "unreachable" {
		t.Errorf("checks %v", got.Checks)
	}
	for _, path := range []string{"/v1/jobs", "/v1/jobs/1", "/v1/dlq", "/v1/dlq/1", "/v1/queues"} {
		r := e.get(t, path)
		got := wantError(t, r, http.StatusInternalServerError, "")
		if got.Error != "internal error; see the server log" {
			t.Errorf("%s: error %q leaks detail", path, got.Error)
		}
	}
	failed := logs.FilterMessage("request failed").All()
	if len(failed) != 5 {
		t.Fatalf("%d request failures logged, want 5", len(failed))
	}
	if msg := fmt.Sprint(failed[0].ContextMap()["error"]); !strings.Contains(msg, "closed") {
		t.Errorf("logged error %q lacks the cause", msg)
	}
}

func TestRouting(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	for _, c := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{"GET", "/nope", http.StatusNotFound, ""},
		{"GET", "/v1", http.StatusNotFound, ""},
		{"GET", "/v1/jobs/1/nope", http.StatusNotFound, ""},
		{"GET", "/metrics", http.StatusNotFound, ""}, // no Metrics handler configured
		{"DELETE", "/v1/jobs/1", http.StatusMethodNotAllowed, "GET, HEAD"},
		{"GET", "/v1/jobs/1/cancel", http.StatusMethodNotAllowed, "POST"},
		{"POST", "/v1/queues", http.StatusMethodNotAllowed, "GET, HEAD"},
		{"POST", "/healthz", http.StatusMethodNotAllowed, "GET, HEAD"},
		{"POST", "/v1/dlq/1/redrive", http.StatusNotImplemented, ""},
		{"POST", "/v1/dlq/1/discard", http.StatusNotImplemented, ""},
		{"POST", "/v1/queues/bulk/jobs", http.StatusNotImplemented, ""},
	} {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			t.Parallel()
			r := e.do(t, c.method, c.path, nil, "")
			got := wantError(t, r, c.status, "")
			if c.status == http.StatusNotImplemented && got.Error != "not implemented yet" {
				t.Errorf("error %q", got.Error)
			}
			if r.header.Get("Allow") != c.allow {
				t.Errorf("Allow %q, want %q", r.header.Get("Allow"), c.allow)
			}
		})
	}
	t.Run("healthz", func(t *testing.T) {
		t.Parallel()
		got := decode[map[string]string](t, e.get(t, "/healthz").must(t, http.StatusOK))
		if got["status"] != "ok" {
			t.Errorf("healthz %v", got)
		}
	})
	t.Run("dashboard", func(t *testing.T) {
		t.Parallel()
		r := e.get(t, "/").must(t, http.StatusOK)
		if ct := r.header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
			t.Errorf("Content-Type %q", ct)
		}
		csp := r.header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Errorf("dashboard's Content-Security-Policy %q: want scripts from this server only", csp)
		}
		if !bytes.Contains(r.body, []byte(`src="ui/app.js"`)) {
			t.Errorf("dashboard does not load its script from /ui/")
		}
		js := e.get(t, "/ui/app.js").must(t, http.StatusOK)
		if ct := js.header.Get("Content-Type"); ct != "text/javascript; charset=utf-8" {
			t.Errorf("/ui/app.js Content-Type %q", ct)
		}
		if !bytes.Contains(js.body, []byte(`"v1/queues"`)) || !bytes.Contains(js.body, []byte("sessionStorage")) ||
			bytes.Contains(js.body, []byte("innerHTML")) {
			t.Errorf("the dashboard's script does not poll /v1/queues with a stored token, or uses innerHTML")
		}
		e.get(t, "/ui/index.html").must(t, http.StatusNotFound)
		e.get(t, "/ui/nope.js").must(t, http.StatusNotFound)
	})
}

func TestBodyLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	big := bytes.Repeat([]byte("x"), 2<<20)
	r := e.do(t, "POST", "/v1/queues/bulk/jobs", bytes.NewReader(big), "")
	wantError(t, r, http.StatusRequestEntityTooLarge, "")
	// Just under the limit reaches the handler.
	r = e.do(t, "POST", "/v1/queues/bulk/jobs", bytes.NewReader(big[:maxBodyBytes]), "")
	wantError(t, r, http.StatusNotImplemented, "")
}

func TestNewHTTPServer(t *testing.T) {
	t.Parallel()
	h := http.NotFoundHandler()
	s := NewHTTPServer("127.0.0.1:0", h)
	if s.Addr != "127.0.0.1:0" || s.ReadHeaderTimeout != 5*time.Second || s.ReadTimeout != 30*time.Second ||
		s.WriteTimeout != 60*time.Second || s.IdleTimeout != 120*time.Second || s.MaxHeaderBytes != 16*maxHeaderBytes {
		t.Errorf("server %+v", s)
	}
}

// A route whose topic Kafka does not know (a typo in the config, or a
// topic not created yet) says so in lag_error, rather than showing
// neither a lag nor an error.
func TestRouteOfATopicKafkaDoesNotKnow(t *testing.T) {
	t.Parallel()
	lag := func(context.Context, []string) (map[string]ingest.TopicLag, error) {
		return map[string]ingest.TopicLag{"orders": {Partitions: []ingest.PartitionPos{{Partition: 0}}}}, nil
	}
	e := newEnv(t, Config{Queues: []string{"q"}, Lag: lag,
		Routes: []RouteConfig{{Name: "orders", Topic: "orders", Queue: "q"}, {Name: "refunds", Topic: "ordres", Queue: "q"}}})
	got := decode[struct{ Items []Route }](t, e.get(t, "/v1/routes").must(t, http.StatusOK))
	if len(got.Items) != 2 {
		t.Fatalf("routes: %+v", got.Items)
	}
	if r := got.Items[0]; r.Name != "orders" || r.Lag == nil || r.LagError != "" {
		t.Errorf("orders: lag %v, lag_error %q; want its lag", r.Lag, r.LagError)
	}
	if r := got.Items[1]; r.Name != "refunds" || r.Lag != nil || !strings.Contains(r.LagError, `kafka has no topic "ordres"`) {
		t.Errorf("refunds: lag %v, lag_error %q; want no lag and an error naming the topic", r.Lag, r.LagError)
	}
}
