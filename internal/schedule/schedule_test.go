package schedule

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap/zaptest"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// clock is a settable now.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func at(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse("15:04:05", s)
	if err != nil {
		t.Fatal(err)
	}
	return time.Date(2026, 11, 30, v.Hour(), v.Minute(), v.Second(), 0, time.UTC)
}

func scheduler(t *testing.T, store *pgstore.Store, c *clock, sc config.Schedule) *Scheduler {
	t.Helper()
	return pausable(t, store, c, sc, nil)
}

func pausable(t *testing.T, store *pgstore.Store, c *clock, sc config.Schedule, paused func(string) bool) *Scheduler {
	t.Helper()
	s, err := New(store, zaptest.NewLogger(t), []Schedule{defaulted(sc)}, paused)
	if err != nil {
		t.Fatal(err)
	}
	s.now = c.now
	return s
}

func defaulted(sc config.Schedule) Schedule {
	cfg := config.Config{Schedules: []config.Schedule{sc}}
	cfg.SetDefaults()
	return Schedule{Schedule: cfg.Schedules[0], MaxAttempts: 3}
}

// slots lists the slots of a schedule's jobs, as HH:MM, in order.
func slots(t *testing.T, store *pgstore.Store, name string) []string {
	t.Helper()
	rows, err := store.Pool().Query(context.Background(),
		`SELECT dedupe_key FROM all_jobs WHERE route = $1 ORDER BY dedupe_key`, Route(name))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		var sec int64
		if _, err := fmtSscan(k, &sec); err != nil {
			t.Fatal(err)
		}
		out = append(out, time.Unix(sec, 0).UTC().Format("15:04"))
	}
	return out
}

func tick(t *testing.T, s *Scheduler, c *clock, now string) {
	t.Helper()
	c.t = at(t, now)
	if err := s.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func want(t *testing.T, store *pgstore.Store, name string, w ...string) {
	t.Helper()
	got := slots(t, store, name)
	if len(got) != len(w) {
		t.Fatalf("%s: slots %v, want %v", name, got, w)
	}
	for i := range w {
		if got[i] != w[i] {
			t.Fatalf("%s: slots %v, want %v", name, got, w)
		}
	}
}

func TestSlotsFireOnceAcrossProcesses(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	c := &clock{}
	sc := config.Schedule{Name: "every-minute", Cron: "* * * * *", Kind: "k", Queue: "q", Overlap: "allow"}
	a, b := scheduler(t, store, c, sc), scheduler(t, store, c, sc)
	tick(t, a, c, "10:00:30")
	tick(t, b, c, "10:00:30")
	want(t, store, sc.Name) // a new schedule does not backfill
	tick(t, a, c, "10:01:02")
	tick(t, b, c, "10:01:02")
	tick(t, a, c, "10:01:40")
	want(t, store, sc.Name, "10:01")
	tick(t, b, c, "10:02:01")
	tick(t, a, c, "10:02:03")
	want(t, store, sc.Name, "10:01", "10:02")
	var state string
	var runAt time.Time
	if err := store.Pool().QueryRow(context.Background(), `SELECT state, scheduled_at FROM all_jobs WHERE route = $1
		ORDER BY id LIMIT 1`, Route(sc.Name)).Scan(&state, &runAt); err != nil {
		t.Fatal(err)
	}
	if state != "queued" || !runAt.Equal(at(t, "10:01:00")) {
		t.Fatalf("job %s runnable from %s, want queued from the slot 10:01", state, runAt)
	}
}

// After downtime, a restarted process resumes from the last slot in the
// database and applies the misfire policy to the slots it missed.
func TestMisfirePolicies(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	for _, c := range []struct {
		misfire string
		want    []string
	}{
		{"run_once", []string{"10:00", "10:10"}},
		{"skip", []string{"10:00"}},
		{"catch_up", []string{"10:00", "10:05", "10:10"}},
	} {
		t.Run(c.misfire, func(t *testing.T) {
			clk := &clock{}
			sc := config.Schedule{Name: "five-" + c.misfire, Cron: "*/5 * * * *", Kind: "k", Queue: "q", Misfire: c.misfire, Overlap: "allow"}
			s := scheduler(t, store, clk, sc)
			tick(t, s, clk, "09:59:00")
			tick(t, s, clk, "10:00:10")
			want(t, store, sc.Name, "10:00")
			// Down from 10:00:30 to 10:12: the slots 10:05 and 10:10 are missed.
			restarted := scheduler(t, store, clk, sc)
			tick(t, restarted, clk, "10:12:00")
			want(t, store, sc.Name, c.want...)
		})
	}
}

func TestOverlapSkipAndJitter(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	clk := &clock{}
	sc := config.Schedule{Name: "no-overlap", Cron: "* * * * *", Kind: "k", Queue: "q",
		Jitter: config.Duration(20 * time.Second)}
	s := scheduler(t, store, clk, sc)
	tick(t, s, clk, "10:00:30")
	tick(t, s, clk, "10:01:01")
	tick(t, s, clk, "10:02:01") // 10:01's job is still queued: skipped
	want(t, store, sc.Name, "10:01")
	if _, err := store.Pool().Exec(context.Background(),
		`UPDATE jobs SET state = 'succeeded', finished_at = now() WHERE route = $1`, Route(sc.Name)); err != nil {
		t.Fatal(err)
	}
	tick(t, s, clk, "10:03:01")
	want(t, store, sc.Name, "10:01", "10:03")
	rows, err := store.Pool().Query(context.Background(), `SELECT dedupe_key, scheduled_at FROM all_jobs WHERE route = $1`, Route(sc.Name))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var runAt time.Time
		if err := rows.Scan(&k, &runAt); err != nil {
			t.Fatal(err)
		}
		var sec int64
		if _, err := fmtSscan(k, &sec); err != nil {
			t.Fatal(err)
		}
		if d := runAt.Sub(time.Unix(sec, 0)); d < 0 || d > 20*time.Second {
			t.Errorf("slot %s runnable %s after it, want within the 20s jitter", k, d)
		}
	}
}

func fmtSscan(k string, sec *int64) (int, error) { return fmt.Sscanf(k, "slot/%d", sec) }

// A paused schedule's slots pass without jobs, and resuming does not
// catch up on them; a trigger makes a job now, audited, beside the
// slots; the status shows the next slot and the last slot's job.
func TestPauseTriggerAndStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := testenv.MigratedStore(t)
	c := &clock{}
	var paused atomic.Bool
	sc := config.Schedule{Name: "pausable", Cron: "* * * * *", Kind: "k", Queue: "q", Overlap: "allow"}
	s := pausable(t, store, c, sc, func(name string) bool { return name == sc.Name && paused.Load() })
	tick(t, s, c, "10:00:30")
	tick(t, s, c, "10:01:02")
	paused.Store(true)
	tick(t, s, c, "10:02:05")
	tick(t, s, c, "10:03:05")
	paused.Store(false)
	tick(t, s, c, "10:03:30")
	tick(t, s, c, "10:04:02")
	want(t, store, sc.Name, "10:01", "10:04")

	st, err := StatusOf(ctx, store, defaulted(sc), false, at(t, "10:04:40"))
	if err != nil || !st.NextSlot.Equal(at(t, "10:05:00")) || st.LastSlot == nil || !st.LastSlot.Equal(at(t, "10:04:00")) ||
		st.LastJobID == nil || st.LastJobState == nil || *st.LastJobState != "queued" {
		t.Fatalf("status: %+v %v", st, err)
	}
	enq, err := Trigger(ctx, store, defaulted(sc), "oncall", at(t, "10:04:45"))
	if err != nil || !enq.Created {
		t.Fatalf("trigger: %+v %v", enq, err)
	}
	audit, err := store.AuditList(ctx, pgstore.AuditFilter{Limit: 5})
	if err != nil || len(audit) != 1 || audit[0].Actor != "oncall" || audit[0].Action != pgstore.AuditTrigger ||
		audit[0].Target != Route(sc.Name) {
		t.Fatalf("audit after a trigger: %+v %v", audit, err)
	}
	// The trigger's job is not a slot: the last slot stays 10:04.
	if st, err := StatusOf(ctx, store, defaulted(sc), false, at(t, "10:04:50")); err != nil || !st.LastSlot.Equal(at(t, "10:04:00")) {
		t.Fatalf("status after a trigger: %+v %v", st, err)
	}
}

// sharedSlots lists, as HH:MM in order, the slots of a schedule's jobs
// stored under route r (a route of its kind, shared with other
// schedules): their dedupe keys end in the schedule's name.
func sharedSlots(t *testing.T, store *pgstore.Store, r, name string) []string {
	t.Helper()
	rows, err := store.Pool().Query(context.Background(), `SELECT dedupe_key FROM all_jobs
		WHERE route = $1 AND origin = 'schedule' AND dedupe_key LIKE 'slot/%' ORDER BY dedupe_key`, r)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range keys {
		if len(k) == 25+1+len(name) && k[25:] == "/"+name {
			var sec int64
			if _, err := fmtSscan(k[:25], &sec); err != nil {
				t.Fatal(err)
			}
			out = append(out, time.Unix(sec, 0).UTC().Format("15:04"))
		}
	}
	return out
}

// A schedule whose jobs join the route of their kind (Schedule.Route)
// stores them there, in the route's group, each dedupe key ending in
// the schedule's name. It resumes where it left off under its own route
// before (misfire, overlap), and never reads another schedule's slots
// on the same route, even one whose name extends its own.
func TestScheduleUnderItsKindsRoute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := testenv.MigratedStore(t)
	clk := &clock{}
	sc := config.Schedule{Name: "a", Cron: "* * * * *", Kind: "k", Queue: "q", Misfire: "catch_up", Overlap: "skip"}
	own := scheduler(t, store, clk, sc)
	tick(t, own, clk, "10:00:30")
	tick(t, own, clk, "10:01:02")
	want(t, store, sc.Name, "10:01")

	shared := func(sc config.Schedule) *Scheduler {
		s := defaulted(sc)
		s.Route, s.Group, s.TTL = "r", pgstore.GroupAll, time.Minute
		sch, err := New(store, zaptest.NewLogger(t), []Schedule{s}, nil)
		if err != nil {
			t.Fatal(err)
		}
		sch.now = clk.now
		return sch
	}
	// Where it left off is its own route's 10:01, which is still queued:
	// overlap skip holds 10:02 and 10:03, then catch_up runs the rest.
	moved := defaulted(sc)
	moved.Route = "r"
	if last, _, err := lastSlot(ctx, store, moved); err != nil || !last.Equal(at(t, "10:01:00")) {
		t.Fatalf("last slot %s %v, want 10:01 from the schedule's own route", last, err)
	}
	a := shared(sc)
	tick(t, a, clk, "10:03:02")
	if got := sharedSlots(t, store, "r", "a"); len(got) != 0 {
		t.Fatalf("slots %v while the job of 10:01 under the schedule's own route is queued (overlap skip)", got)
	}
	if _, err := store.Pool().Exec(ctx, `UPDATE jobs SET state = 'succeeded', finished_at = now() WHERE route = $1`,
		Route(sc.Name)); err != nil {
		t.Fatal(err)
	}
	tick(t, a, clk, "10:04:02")
	if got := sharedSlots(t, store, "r", "a"); fmt.Sprint(got) != "[10:04]" {
		t.Fatalf("slots under the route of the kind %v, want [10:04]", got)
	}
	// A second schedule on the route, whose name extends the first's, has
	// later slots; the first, restarted, resumes from its own.
	ab := config.Schedule{Name: "a/b", Cron: "* * * * *", Kind: "k", Queue: "q", Overlap: "allow"}
	b := shared(ab)
	tick(t, b, clk, "10:05:30")
	tick(t, b, clk, "10:06:02")
	tick(t, b, clk, "10:07:02")
	if _, err := store.Pool().Exec(ctx, `UPDATE jobs SET state = 'succeeded', finished_at = now()
		WHERE route = 'r' AND dedupe_key LIKE '%/a'`); err != nil {
		t.Fatal(err)
	}
	sc.Overlap = "allow" // catch_up's runs, one after the other
	restarted := shared(sc)
	tick(t, restarted, clk, "10:07:10")
	if got := sharedSlots(t, store, "r", "a"); fmt.Sprint(got) != "[10:04 10:05 10:06 10:07]" {
		t.Fatalf("slots of a after a restart %v, want [10:04 10:05 10:06 10:07] (caught up from its own last slot)", got)
	}
	if got := sharedSlots(t, store, "r", "a/b"); fmt.Sprint(got) != "[10:06 10:07]" {
		t.Fatalf("slots of a/b %v, want [10:06 10:07]", got)
	}
	var groups []string
	rows, err := store.Pool().Query(ctx, `SELECT DISTINCT grp FROM all_jobs WHERE route = 'r'`)
	if err == nil {
		groups, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil || fmt.Sprint(groups) != "[*]" {
		t.Fatalf("group values of the route's scheduled jobs %v %v, want [*]", groups, err)
	}
	// The route's ttl, from when the job may run: the slot, or the tick
	// that enqueued it (seconds later; minutes for a slot caught up).
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE route = 'r'
		AND NOT coalesce(deadline - scheduled_at BETWEEN interval '1 minute' AND interval '4 minutes', false)`); n != 0 {
		t.Fatalf("%d scheduled jobs of the route without the route's ttl from their run time", n)
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs
		WHERE route = 'r' AND deadline = '2026-11-30 10:08:10Z'::timestamptz`); n != 3 {
		t.Fatalf("%d jobs caught up at 10:07:10 with the ttl from then, want 10:05, 10:06 and 10:07", n)
	}
	st, err := StatusOf(ctx, store, moved, false, at(t, "10:07:20"))
	if err != nil || st.LastSlot == nil || !st.LastSlot.Equal(at(t, "10:07:00")) || st.LastJobID == nil {
		t.Fatalf("status of a: %+v %v", st, err)
	}
}

// Of: a schedule joins the first route of its kind in its queue, in the
// group its limits count it in, and takes attempts from the first route
// of its kind anywhere.
func TestOfJoinsTheRouteOfItsKind(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]byte(`
kafka: {brokers: ["k:9092"]}
postgres: {url: "postgres://u@h/db"}
queues: {bulk: {}, interactive: {}}
routes:
  - {topic: t1, name: grouped, kind: g, queue: bulk, group: {field: tenant, max_running: 1}, target: {go: true}}
  - {topic: t2, name: capped, kind: c, queue: bulk, max_running: 2, max_attempts: 4, ttl: 90s, target: {go: true}}
  - {topic: t3, name: rated, kind: r, queue: bulk, rate_limit: {limit: 5, per: 1s}, target: {go: true}}
  - {topic: t4, name: free, kind: f, queue: interactive, max_attempts: 6, target: {go: true}}
schedules:
  - {name: sg, cron: "* * * * *", kind: g, queue: bulk}
  - {name: sc, cron: "* * * * *", kind: c, queue: bulk}
  - {name: sr, cron: "* * * * *", kind: r, queue: bulk}
  - {name: sf, cron: "* * * * *", kind: f, queue: interactive}
  - {name: elsewhere, cron: "* * * * *", kind: f, queue: bulk}
  - {name: handler, cron: "* * * * *", kind: go.only, queue: bulk}
`), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range Of(cfg) {
		got = append(got, fmt.Sprintf("%s:%s:%s:%d:%s:%v:%s", s.Name, s.Route, s.Group, s.MaxAttempts, s.TTL, s.Own(), s.Like))
	}
	want := []string{
		"sg:grouped:schedule/sg:8:0s:false:grouped",
		"sc:capped:*:4:1m30s:false:capped",
		"sr:rated:*:8:0s:false:rated",
		"sf:free::6:0s:false:free",
		"elsewhere:schedule/elsewhere::6:0s:true:free",
		"handler:schedule/handler::8:0s:true:",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Of:\n got %v\nwant %v", got, want)
	}
}
