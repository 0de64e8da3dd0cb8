package admin

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/bulk"
	"github.com/switchyard-dev/switchyard/internal/dlq"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/schedule"
)

// The console's endpoints: a job's detail with its payload, headers and
// lane position; retry-now; the counted bulk re-drive; lanes; schedules
// with pause, resume and trigger; and the queues' new fields.
func TestConsoleEndpoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStore(t, true)
	sc := config.Schedule{Name: "nightly", Cron: "0 2 * * *", Kind: "reconcile", Queue: "bulk"}
	cfg := config.Config{Schedules: []config.Schedule{sc}}
	cfg.SetDefaults()
	e := serve(t, Config{DLQ: dlq.New(st, nil, nil), Queues: []string{"bulk", "interactive"},
		Concurrency: map[string]int{"bulk": 4, "interactive": 16},
		Schedules:   []schedule.Schedule{{Schedule: cfg.Schedules[0], MaxAttempts: 3}}}, st, zaptest.NewLogger(t))

	// A lane of three jobs of key "a": the head and two waiting behind it.
	lane := &pgstore.LanePolicy{Policy: "none", OnDead: "block", GapTimeout: time.Minute, GapPolicy: "park"}
	var jobs []pgstore.NewJob
	for i := range 3 {
		j := newJob("interactive", "a", int64(i))
		j.Lane, j.HeaderKeys, j.HeaderVals = lane, []string{"content-type"}, [][]byte{[]byte("application/json")}
		jobs = append(jobs, j)
	}
	seed(t, st, append(jobs, newJob("bulk", "b", 10), newJob("bulk", "c", 11)), nil)
	ids := jobIDs(t, st)
	type detail struct {
		Payload []byte `json:"payload_base64"`
		Headers []struct {
			Key   string `json:"key"`
			Value []byte `json:"value_base64"`
		} `json:"headers"`
		Lane *pgstore.LanePosition `json:"lane"`
	}
	third := decode[detail](t, e.get(t, fmt.Sprintf("/v1/jobs/%d", ids[2])).must(t, http.StatusOK))
	if string(third.Payload) != `{"n":1}` || len(third.Headers) != 1 || string(third.Headers[0].Value) != "application/json" ||
		third.Lane == nil || third.Lane.Position != 2 || third.Lane.Waiting != 2 || third.Lane.HeadJobID == nil ||
		*third.Lane.HeadJobID != ids[0] || third.Lane.LastApplied != nil || third.Lane.Gap != nil {
		t.Fatalf("the third job of the lane: %+v (lane %+v)", third, third.Lane)
	}
	if head := decode[detail](t, e.get(t, fmt.Sprintf("/v1/jobs/%d", ids[0])).must(t, http.StatusOK)); head.Lane == nil ||
		head.Lane.Position != 0 {
		t.Fatalf("the head: lane %+v, want position 0", head.Lane)
	}
	if bulk := decode[detail](t, e.get(t, fmt.Sprintf("/v1/jobs/%d", ids[3])).must(t, http.StatusOK)); bulk.Lane != nil {
		t.Fatalf("an unordered job has a lane: %+v", bulk.Lane)
	}

	// Retry-now: a delayed job runs now; a queued one that may run is 409.
	if _, err := st.Pool().Exec(ctx, `UPDATE jobs SET scheduled_at = now() + interval '1 hour' WHERE id = $1`, ids[3]); err != nil {
		t.Fatal(err)
	}
	e.do(t, "POST", fmt.Sprintf("/v1/jobs/%d/retry", ids[3]), nil, "").must(t, http.StatusOK)
	wantError(t, e.do(t, "POST", fmt.Sprintf("/v1/jobs/%d/retry", ids[3]), nil, ""), http.StatusConflict, "")

	// Both bulk jobs die; the counted re-drive takes them only at the count.
	for _, l := range claim(t, st, "bulk", 2) {
		kill(t, st, l)
	}
	type count struct{ Count int64 }
	if c := decode[count](t, e.get(t, "/v1/dlq/count?queue=bulk").must(t, http.StatusOK)); c.Count != 2 {
		t.Fatalf("count: %d, want 2", c.Count)
	}
	wantError(t, e.do(t, "POST", "/v1/dlq/redrive?queue=bulk&expect=3", nil, ""), http.StatusConflict, "expect")
	wantError(t, e.do(t, "POST", "/v1/dlq/redrive?queue=bulk", nil, ""), http.StatusBadRequest, "expect")
	type redriven struct {
		Redriven int
		Failed   []bulk.Failure
	}
	if r := decode[redriven](t, e.do(t, "POST", "/v1/dlq/redrive?queue=bulk&expect=2", nil, "").must(t, http.StatusOK)); r.Redriven != 2 ||
		len(r.Failed) != 0 {
		t.Fatalf("re-drive all matching: %+v", r)
	}
	if c := decode[count](t, e.get(t, "/v1/dlq/count?queue=bulk").must(t, http.StatusOK)); c.Count != 0 {
		t.Fatalf("count after: %d, want 0", c.Count)
	}
	// A re-driven entry is neither re-driven nor discarded again: 409
	// naming its job, and its id still answers.
	var entry, redriveJob int64
	if err := st.Pool().QueryRow(ctx, `SELECT id, redrive_job_id FROM dlq_entries ORDER BY id LIMIT 1`).
		Scan(&entry, &redriveJob); err != nil {
		t.Fatal(err)
	}
	for _, action := range []string{"redrive", "discard"} {
		got := wantError(t, e.do(t, "POST", fmt.Sprintf("/v1/dlq/%d/%s", entry, action), nil, ""), http.StatusConflict, "")
		if want := fmt.Sprintf("entry %d was re-driven already, to job %d", entry, redriveJob); !strings.Contains(got.Error, want) {
			t.Errorf("%s of a re-driven entry: %q, want it to say %q", action, got.Error, want)
		}
	}
	e.get(t, fmt.Sprintf("/v1/dlq/%d", entry)).must(t, http.StatusOK)

	// The re-driven jobs die again; the counted discard drops their new
	// entries, only at the count too, and audits each (below).
	for _, l := range claim(t, st, "bulk", 2) {
		kill(t, st, l)
	}
	wantError(t, e.do(t, "POST", "/v1/dlq/discard?queue=bulk&expect=1", nil, ""), http.StatusConflict, "expect")
	wantError(t, e.do(t, "POST", "/v1/dlq/discard?queue=bulk", nil, ""), http.StatusBadRequest, "expect")
	type discarded struct {
		Discarded int
		Failed    []bulk.Failure
	}
	if r := decode[discarded](t, e.do(t, "POST", "/v1/dlq/discard?queue=bulk&expect=2", nil, "").must(t, http.StatusOK)); r.Discarded != 2 ||
		r.Failed == nil || len(r.Failed) != 0 {
		t.Fatalf("discard all matching: %+v", r)
	}
	if c := decode[count](t, e.get(t, "/v1/dlq/count?queue=bulk").must(t, http.StatusOK)); c.Count != 0 {
		t.Fatalf("count after the discard: %d, want 0", c.Count)
	}

	// Lanes: the interactive lane, with two waiting behind its head.
	lanes := decode[page[pgstore.LaneRow]](t, e.get(t, "/v1/lanes").must(t, http.StatusOK))
	if len(lanes.Items) != 1 || lanes.Items[0].Key != "a" || lanes.Items[0].Waiting != 2 || lanes.Items[0].Blocked {
		t.Fatalf("lanes: %+v", lanes.Items)
	}
	if blocked := decode[page[pgstore.LaneRow]](t, e.get(t, "/v1/lanes?blocked=true").must(t, http.StatusOK)); len(blocked.Items) != 0 {
		t.Fatalf("blocked lanes: %+v", blocked.Items)
	}
	wantError(t, e.get(t, "/v1/lanes?blocked=maybe"), http.StatusBadRequest, "blocked")

	// Schedules: listed with the next slot; paused; triggered.
	scheds := decode[page[schedule.Status]](t, e.get(t, "/v1/schedules").must(t, http.StatusOK))
	if len(scheds.Items) != 1 || scheds.Items[0].Name != "nightly" || scheds.Items[0].Paused ||
		scheds.Items[0].NextSlot.Hour() != 2 || scheds.Items[0].LastSlot != nil {
		t.Fatalf("schedules: %+v", scheds.Items)
	}
	e.do(t, "POST", "/v1/schedules/nightly/pause", nil, "").must(t, http.StatusOK)
	if s := decode[page[schedule.Status]](t, e.get(t, "/v1/schedules").must(t, http.StatusOK)); !s.Items[0].Paused {
		t.Fatalf("not paused: %+v", s.Items)
	}
	wantError(t, e.do(t, "POST", "/v1/schedules/nope/pause", nil, ""), http.StatusNotFound, "name")
	type triggered struct {
		Name string
		Job  pgstore.JobRow
	}
	if tr := decode[triggered](t, e.do(t, "POST", "/v1/schedules/nightly/trigger", nil, "").must(t, http.StatusOK)); tr.Job.Kind != "reconcile" ||
		tr.Job.Queue != "bulk" || tr.Job.State != "queued" {
		t.Fatalf("trigger: %+v", tr)
	}

	// Queues: concurrency and the oldest waiting job's age.
	queues := decode[page[pgstore.QueueStat]](t, e.get(t, "/v1/queues").must(t, http.StatusOK))
	for _, q := range queues.Items {
		if q.Queue == "interactive" && (q.Concurrency != 16 || q.OldestWaitingAgeSeconds <= 0) {
			t.Fatalf("interactive: %+v", q)
		}
	}
	audit := decode[page[pgstore.AuditEntry]](t, e.get(t, "/v1/audit").must(t, http.StatusOK))
	var actions []string
	for _, a := range audit.Items {
		actions = append(actions, a.Action+" "+a.Target)
	}
	want := fmt.Sprintf("[trigger schedule/nightly pause schedule/nightly discard dlq/4 discard dlq/3 redrive dlq/%d redrive dlq/%d retry job/%d]",
		2, 1, ids[3])
	if fmt.Sprint(actions) != want {
		t.Fatalf("audit: %v, want %s", actions, want)
	}
}

// GET /v1/lanes pages like every list: next is "" only on the last page,
// and passed as after it resumes where the page ended, in the list's
// order (blocked first, then the longest, then by route and key), whatever
// the route and key hold.
func TestLanesPages(t *testing.T) {
	t.Parallel()
	st := newStore(t, true)
	e := serve(t, Config{}, st, zaptest.NewLogger(t))
	lane := &pgstore.LanePolicy{Policy: "none", OnDead: "block", GapTimeout: time.Minute, GapPolicy: "park"}
	var jobs []pgstore.NewJob
	offset := int64(0)
	for _, l := range []struct {
		queue, key string
		jobs       int
	}{{"other", "d", 2}, {"q", "a é", 3}, {"q", "b.1", 2}, {"q", "c", 2}} {
		for range l.jobs {
			j := newJob(l.queue, l.key, offset)
			j.Lane = lane
			jobs = append(jobs, j)
			offset++
		}
	}
	seed(t, st, jobs, nil)
	kill(t, st, claim(t, st, "other", 1)[0]) // d's head dies: d is blocked, one job behind it

	var got []string
	path := "/v1/lanes?limit=2"
	for range 3 {
		p := decode[page[pgstore.LaneRow]](t, e.get(t, path).must(t, http.StatusOK))
		for _, l := range p.Items {
			got = append(got, fmt.Sprintf("%s:%t:%d", l.Key, l.Blocked, l.Waiting))
		}
		if p.Next == "" {
			break
		}
		path = "/v1/lanes?limit=2&after=" + url.QueryEscape(p.Next)
	}
	if want := []string{"d:true:1", "a é:false:2", "b.1:false:1", "c:false:1"}; !slices.Equal(got, want) {
		t.Fatalf("lanes over pages of 2: %q, want %q", got, want)
	}
	if p := decode[page[pgstore.LaneRow]](t, e.get(t, "/v1/lanes?limit=4").must(t, http.StatusOK)); len(p.Items) != 4 || p.Next != "" {
		t.Fatalf("a page as long as the list: %d lanes, next %q; want 4 and no next", len(p.Items), p.Next)
	}
	if p := decode[page[pgstore.LaneRow]](t, e.get(t, "/v1/lanes?blocked=true&limit=1").must(t, http.StatusOK)); len(p.Items) != 1 ||
		p.Items[0].Key != "d" || p.Items[0].Waiting != 1 || p.Next != "" {
		t.Fatalf("blocked lanes: %+v, next %q; want d alone, with its one waiting job", p.Items, p.Next)
	}
	for _, bad := range []string{"17", "x", "yes.1.6f.6b", "true.-1.6f.6b", "true.1.6f", "true.1.6f.6", "true.1.6F.6b",
		"true.1234567890123456789.6f.6b"} {
		wantError(t, e.get(t, "/v1/lanes?after="+url.QueryEscape(bad)), http.StatusBadRequest, "after")
	}
	// A made-up cursor of the right form is a place in the list too, even
	// when its bytes are no text Postgres takes.
	e.get(t, "/v1/lanes?after=false.0.ff00.00").must(t, http.StatusOK)
}

// slowRedrives is a DLQ whose bulk re-drive takes a while, as one of
// tens of thousands of entries does.
type slowRedrives struct {
	DLQActions
	took time.Duration
}

func (d slowRedrives) RedriveMatching(context.Context, dlq.Bulk) (bulk.Result, error) {
	time.Sleep(d.took)
	return bulk.Result{Matching: 3, Done: 3}, nil
}

// A bulk re-drive answers however long it ran: past the server's
// WriteTimeout its answer (how many, which failed) was lost, and the
// client got an empty reply for a re-drive that was done.
func TestBulkRedriveAnswersPastTheWriteTimeout(t *testing.T) {
	t.Parallel()
	ts := httptest.NewUnstartedServer(New(Config{DLQ: slowRedrives{took: 600 * time.Millisecond}}, newStore(t, true),
		zaptest.NewLogger(t)).Handler())
	ts.Config.WriteTimeout = 200 * time.Millisecond
	ts.Start()
	t.Cleanup(ts.Close)
	res, err := http.Post(ts.URL+"/v1/dlq/redrive?expect=3", "", nil)
	if err != nil {
		t.Fatalf("POST /v1/dlq/redrive past the write timeout: %v", err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK || !strings.Contains(string(body), `"redriven":3`) {
		t.Fatalf("POST /v1/dlq/redrive past the write timeout: %d %s %v", res.StatusCode, body, err)
	}
}

// POST /v1/jobs/cancel cancels every unfinished job matching, at the
// count GET /v1/jobs/count gave, each as a single cancel does: a running
// one loses its lease, a cancelled lane head hands its lane to the next
// job, and finished jobs are never touched.
func TestBulkCancel(t *testing.T) {
	t.Parallel()
	st := newStore(t, true)
	e := serve(t, Config{Queues: []string{"bulk", "interactive"}}, st, zaptest.NewLogger(t))
	lane := &pgstore.LanePolicy{Policy: "none", OnDead: "block", GapTimeout: time.Minute, GapPolicy: "park"}
	head, next := newJob("interactive", "a", 0), newJob("interactive", "a", 1)
	head.Lane, next.Lane = lane, lane
	seed(t, st, []pgstore.NewJob{head, next, newJob("bulk", "b", 2), newJob("bulk", "c", 3), newJob("bulk", "d", 4)}, nil)
	ids := jobIDs(t, st)
	kill(t, st, claim(t, st, "bulk", 1)[0]) // finished: dead
	running := claim(t, st, "bulk", 1)[0]

	type count struct{ Count int64 }
	for q, want := range map[string]int64{"": 4, "?queue=bulk": 2, "?state=running": 1, "?state=waiting": 1, "?key=a": 2} {
		if c := decode[count](t, e.get(t, "/v1/jobs/count"+q).must(t, http.StatusOK)); c.Count != want {
			t.Errorf("GET /v1/jobs/count%s: %d, want %d", q, c.Count, want)
		}
	}
	wantError(t, e.get(t, "/v1/jobs/count?state=dead"), http.StatusBadRequest, "state")
	wantError(t, e.do(t, "POST", "/v1/jobs/cancel?queue=bulk&expect=3", nil, ""), http.StatusConflict, "expect")
	wantError(t, e.do(t, "POST", "/v1/jobs/cancel?queue=bulk", nil, ""), http.StatusBadRequest, "expect")
	type cancelled struct {
		Cancelled int
		Failed    []bulk.Failure
	}
	if r := decode[cancelled](t, e.do(t, "POST", "/v1/jobs/cancel?queue=bulk&expect=2", nil, "").must(t, http.StatusOK)); r.Cancelled != 2 ||
		r.Failed == nil || len(r.Failed) != 0 {
		t.Fatalf("cancel all matching queue=bulk: %+v", r)
	}
	if c, err := st.JobCancelled(context.Background(), []pgstore.Lease{running}); err != nil || !c[running.Token] {
		t.Errorf("the running job's lease is not lost to the cancel: %v %v", c, err)
	}
	// The lane's head goes; the job behind it is queued, not cancelled
	// with it (it was waiting, and state=queued does not match it).
	if r := decode[cancelled](t, e.do(t, "POST", "/v1/jobs/cancel?key=a&state=queued&expect=1", nil, "").must(t, http.StatusOK)); r.Cancelled != 1 {
		t.Fatalf("cancel the lane's head: %+v", r)
	}
	states := map[int64]string{}
	for _, id := range ids {
		states[id] = string(decode[pgstore.JobRow](t, e.get(t, fmt.Sprintf("/v1/jobs/%d", id)).must(t, http.StatusOK)).State)
	}
	want := map[int64]string{ids[0]: "cancelled", ids[1]: "queued", ids[2]: "dead", ids[3]: "cancelled", ids[4]: "cancelled"}
	if fmt.Sprint(states) != fmt.Sprint(want) {
		t.Errorf("after the cancels: %v, want %v", states, want)
	}
	if c := decode[count](t, e.get(t, "/v1/jobs/count").must(t, http.StatusOK)); c.Count != 1 {
		t.Errorf("unfinished after the cancels: %d, want 1", c.Count)
	}
}
