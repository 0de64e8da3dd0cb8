package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// A schedule run by two processes makes one job per slot, delivered
// through the target of the route of its kind. (Up to a minute: the
// schedule fires on the minute.)
func TestScheduleRunsOncePerSlot(t *testing.T) {
	t.Parallel()
	schema, topic, group := testenv.Schema(t), testenv.Topic(t, 1), testenv.Name("g")
	store := testenv.Store(t, schema)
	tg := newTarget(t)
	cfg := writeConfig(t, testConfig{Group: group, Schema: schema, Body: fmt.Sprintf(`queues:
  q: {concurrency: 2, poll_interval: 100ms}
routes:
  - {topic: %q, kind: report.rebuild, queue: q, target: {http: {url: %q, timeout: 5s}}}
schedules:
  - {name: rebuild, cron: "* * * * *", kind: report.rebuild, queue: q, overlap: allow}
`, topic, tg.URL())})
	startRun(t, "run-a", cfg)
	startRun(t, "run-b", cfg)
	testenv.Eventually(t, 90*time.Second, "the scheduled job delivered", func() bool { return len(tg.received()) >= 1 })
	// Both processes have seen the slot by the time its job ran; give the
	// slower one two of its 1s ticks more to try to enqueue it again. Not
	// a synchronisation: what is awaited is a second job that must never
	// come, and a process that finds the slot's job there already makes
	// no sign of it (no log line, no row).
	time.Sleep(2 * time.Second)
	if n, slots := testenv.Count(t, store, `SELECT count(*) FROM all_jobs`), testenv.Count(t, store, `SELECT count(DISTINCT dedupe_key) FROM all_jobs`); n != slots {
		t.Fatalf("%d jobs for %d slots, want one per slot", n, slots)
	}
	c := tg.received()[0]
	if !strings.Contains(string(c.Body), `"schedule":"rebuild"`) || !strings.Contains(string(c.Body), `"slot":`) {
		t.Fatalf("scheduled call body %q", c.Body)
	}
}

// A schedule whose kind nothing can run is refused at start.
func TestScheduleKindWithoutHandler(t *testing.T) {
	t.Parallel()
	schema, topic := testenv.Schema(t), testenv.Topic(t, 1)
	cfg := writeConfig(t, testConfig{Group: testenv.Name("g"), Schema: schema, Body: fmt.Sprintf(`queues:
  q: {concurrency: 1}
routes:
  - {topic: %q, kind: k, queue: q, target: {http: {url: "http://127.0.0.1:1/"}}}
schedules:
  - {name: orphan, cron: "0 * * * *", kind: nobody.runs.this, queue: q}
`, topic)})
	p := startRun(t, "run-orphan", cfg)
	if code := p.wait(30 * time.Second); code == 0 {
		t.Fatal("run started with a schedule nothing can run")
	}
	if !strings.Contains(p.log.String(), "schedules[0].kind") {
		t.Fatalf("the error does not name the field:\n%s", tail(p.log.String(), 2000))
	}
}

// A paused schedule makes no job in any of two processes, its slots
// passing; resumed through one process's API, the next slot makes one
// job, once. (Up to two minutes: the schedule fires on the minute.)
func TestSchedulePauseHoldsEveryProcess(t *testing.T) {
	t.Parallel()
	schema, topic, group := testenv.Schema(t), testenv.Topic(t, 1), testenv.Name("g")
	store := testenv.Store(t, schema)
	tg := newTarget(t)
	body := fmt.Sprintf(`queues:
  q: {concurrency: 2, poll_interval: 100ms}
routes:
  - {topic: %q, kind: report.rebuild, queue: q, target: {http: {url: %q, timeout: 5s}}}
schedules:
  - {name: rebuild, cron: "* * * * *", kind: report.rebuild, queue: q, overlap: allow}
`, topic, tg.URL())
	// Paused before either process starts: each reads the pauses before
	// its first tick.
	if _, err := store.Pause(t.Context(), pgstore.PauseSchedule, "rebuild", "test"); err != nil {
		t.Fatal(err)
	}
	a := startRun(t, "run-a", writeConfig(t, testConfig{Group: group, Schema: schema, Listen: "127.0.0.1:0", Body: body}))
	startRun(t, "run-b", writeConfig(t, testConfig{Group: group, Schema: schema, Body: body}))
	addr := adminAddr(t, a)
	// A whole slot passes while paused: the next minute, and 3 s more.
	time.Sleep(time.Until(time.Now().Truncate(time.Minute).Add(time.Minute + 3*time.Second)))
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE origin = 'schedule'`); n != 0 {
		t.Fatalf("%d jobs of a paused schedule", n)
	}
	if code, body := api(t, addr, "POST", "/v1/schedules/rebuild/resume"); code != http.StatusOK {
		t.Fatalf("resume: %d %s", code, body)
	}
	testenv.Eventually(t, 90*time.Second, "the next slot's job delivered", func() bool { return len(tg.received()) >= 1 })
	time.Sleep(2 * time.Second) // as in TestScheduleRunsOncePerSlot: a second job must never come
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE origin = 'schedule'`); n != 1 {
		t.Fatalf("%d jobs after the resume, want the one of the next slot (the slots passed while paused are not caught up)", n)
	}
}

// A schedule's jobs join the route of their kind in their queue and share
// its fleet-wide max_running with the route's records: two processes,
// a cap of 3, 200 records and 8 triggered runs arriving while the records
// hold the slots, never more than 3 requests in flight at the target;
// every record and every run is one job of the route, called once
// (SPEC §2 I9).
func TestScheduledJobsShareTheRouteCap(t *testing.T) {
	t.Parallel()
	const recs, runs, maxRunning = 200, 8, 3
	schema, topic, group := testenv.Schema(t), testenv.Topic(t, 4), testenv.Name("g")
	store := testenv.Store(t, schema)
	tg := newTarget(t)
	var flight inFlight
	tg.setBehaviour(flight.holding(50*time.Millisecond, all))
	// The cron names a minute a year: the runs are the triggers'.
	body := fmt.Sprintf(`queues:
  q: {concurrency: 8, poll_interval: 100ms}
routes:
  - {topic: %q, kind: sweep, queue: q, max_running: %d, dedupe: {field: id}, target: {http: {url: %q, timeout: 5s}}}
schedules:
  - {name: nightly, cron: "0 0 1 1 *", kind: sweep, queue: q, overlap: allow}
`, topic, maxRunning, tg.URL())
	a := startRun(t, "run-a", writeConfig(t, testConfig{Group: group, Schema: schema, Listen: "127.0.0.1:0", Body: body}))
	startRun(t, "run-b", writeConfig(t, testConfig{Group: group, Schema: schema, Body: body}))
	addr := adminAddr(t, a)
	testenv.Produce(t, topic, records(0, recs)...)
	testenv.Eventually(t, 60*time.Second, "the records' jobs to start", func() bool { return len(tg.received()) >= maxRunning })
	for range runs {
		if code, body := api(t, addr, "POST", "/v1/schedules/nightly/trigger"); code != http.StatusOK {
			t.Fatalf("trigger: %d %s", code, body)
		}
	}
	testenv.Eventually(t, 120*time.Second, "every job to succeed", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'succeeded'`) == recs+runs
	})
	// The runs, had they been a route of their own, would have run at
	// once beside the records' jobs (8 more in flight).
	capReached(t, flight.peaks()["all"], maxRunning)
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE route = $1 AND origin = 'schedule'`, topic); n != runs {
		t.Fatalf("%d scheduled jobs under the route of their kind, want %d", n, runs)
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs`); n != recs+runs {
		t.Fatalf("%d jobs for %d records and %d runs", n, recs, runs)
	}
	scheduled := 0
	for _, c := range tg.received() {
		if strings.Contains(string(c.Body), `"schedule":"nightly"`) {
			scheduled++
		}
	}
	if got := len(tg.received()); got != recs+runs || scheduled != runs {
		t.Fatalf("%d calls, %d of them scheduled runs; want %d and %d", got, scheduled, recs+runs, runs)
	}
}

// A schedule's jobs under a grouped route are a group of their own, held
// to the group's max_running across two processes (here 1: the runs of
// an overlap: allow schedule, triggered at once, run one at a time);
// under a rate-limited route they are counted in its one group. Either
// way every run is one job of the route, called once.
func TestScheduledJobsJoinGroupedAndRatedRoutes(t *testing.T) {
	t.Parallel()
	const runs = 5
	schema, group := testenv.Schema(t), testenv.Name("g")
	grouped, rated := testenv.Topic(t, 1), testenv.Topic(t, 1)
	store := testenv.Store(t, schema)
	tg := newTarget(t)
	var flight inFlight
	tg.setBehaviour(flight.holding(100*time.Millisecond, func(c call) string {
		var body struct{ Schedule string }
		_ = json.Unmarshal(c.Body, &body)
		return body.Schedule
	}))
	body := fmt.Sprintf(`queues:
  q: {concurrency: 8, lease: 2s, poll_interval: 100ms}
routes:
  - {topic: %q, kind: per-tenant, queue: q, group: {field: tenant, max_running: 1}, target: {http: {url: %q, timeout: 5s}}}
  - {topic: %q, kind: paced, queue: q, rate_limit: {limit: 50, per: 1s}, target: {http: {url: %[2]q, timeout: 5s}}}
schedules:
  - {name: sg, cron: "0 0 1 1 *", kind: per-tenant, queue: q, overlap: allow}
  - {name: sr, cron: "0 0 1 1 *", kind: paced, queue: q, overlap: allow}
`, grouped, tg.URL(), rated)
	a := startRun(t, "run-a", writeConfig(t, testConfig{Group: group, Schema: schema, Listen: "127.0.0.1:0", Body: body}))
	startRun(t, "run-b", writeConfig(t, testConfig{Group: group, Schema: schema, Body: body}))
	addr := adminAddr(t, a)
	for range runs {
		for _, name := range []string{"sg", "sr"} {
			if code, body := api(t, addr, "POST", "/v1/schedules/"+name+"/trigger"); code != http.StatusOK {
				t.Fatalf("trigger %s: %d %s", name, code, body)
			}
		}
	}
	testenv.Eventually(t, 60*time.Second, "every run to succeed", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'succeeded'`) == 2*runs
	})
	for _, c := range []struct{ route, grp string }{{grouped, "schedule/sg"}, {rated, "*"}} {
		if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE route = $1 AND grp = $2 AND origin = 'schedule'`,
			c.route, c.grp); n != runs {
			t.Fatalf("%d scheduled jobs of route %s in group %q, want %d", n, c.route, c.grp, runs)
		}
	}
	if n := len(tg.received()); n != 2*runs {
		t.Fatalf("%d calls for %d runs", n, 2*runs)
	}
	peak := flight.peaks()
	t.Logf("peak runs in flight at the target: %v", peak)
	if peak["sg"] != 1 {
		t.Fatalf("%d runs of sg in flight at once, want 1 (its group's max_running)", peak["sg"])
	}
}
