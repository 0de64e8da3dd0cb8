package pgstore_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
	"github.com/switchyard-dev/switchyard/jobstate"
)

// A count of the jobs by state reads every active job, so QueueStats
// reuses a slow one for twenty times its duration; a cheap one never. The
// rest of the stats (here the oldest runnable age) is read afresh.
func TestQueueDepthIsReusedOnlyWhenCountingIsSlow(t *testing.T) {
	t.Parallel()
	for took, want := range map[time.Duration]time.Duration{
		0: 0, 49 * time.Millisecond: 0, 50 * time.Millisecond: time.Second, 3 * time.Second: time.Minute,
	} {
		if got := pgstore.DepthReuse(took); got != want {
			t.Errorf("a count that took %v is reused for %v, want %v", took, got, want)
		}
	}

	ctx := context.Background()
	s := testenv.MigratedStore(t)
	n := 0
	enqueue := func(runAt time.Time) {
		t.Helper()
		n++
		if _, err := s.JobEnqueue(ctx, pgstore.NewJob{Origin: pgstore.OriginAPI, Route: "r", Kind: "k", Queue: "q",
			DedupeKey: fmt.Sprint(n), Payload: []byte(`{}`), MaxAttempts: 3, RunAt: &runAt}, pgstore.Actor{By: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	stats := func() (queued int64, age float64) {
		t.Helper()
		st, err := s.QueueStats(ctx, pgstore.Groups{})
		if err != nil || st["q"] == nil {
			t.Fatalf("queue stats: %v, %v", st, err)
		}
		return st["q"].Jobs[string(jobstate.Queued)], st["q"].OldestRunnableAgeSeconds
	}

	s.SetDepthReuse(func(time.Duration) time.Duration { return time.Hour })
	enqueue(time.Now())
	if queued, _ := stats(); queued != 1 {
		t.Fatalf("queued %d, want 1", queued)
	}
	enqueue(time.Now().Add(-time.Hour))
	if queued, age := stats(); queued != 1 || age < 3000 {
		t.Fatalf("queued %d, oldest runnable %.0fs; want the reused count 1 and the new job's hour", queued, age)
	}

	s.SetDepthReuse(func(time.Duration) time.Duration { return 0 })
	if queued, _ := stats(); queued != 2 {
		t.Fatalf("queued %d, want 2", queued)
	}
	enqueue(time.Now())
	if queued, _ := stats(); queued != 3 {
		t.Fatalf("queued %d, want 3: a count is not reused when the rule says so", queued)
	}
}

// A queued job whose group runs as many jobs as its cap allows is held
// behind its group's head: with the route's cap given, QueueStats counts
// it in the oldest waiting age and finds the oldest runnable job among
// the others — another tenant's, or an unlimited route's; without, the
// held job is the runnable age, as before groups were known.
func TestQueueStatsCountsAGroupAtItsCapAsWaiting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	enqueue := func(route, group string, age time.Duration) int64 {
		t.Helper()
		return enqueueGrouped(t, s, route, group, time.Now().Add(-age))
	}
	// Tenant A: two running (its cap), three queued from an hour ago.
	for range 2 {
		id := enqueue("g", "A", 2*time.Hour)
		if _, err := s.Pool().Exec(ctx, `UPDATE jobs SET state = 'running', lease_expires_at = now() + interval '1 hour' WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		enqueue("g", "A", time.Hour)
	}
	enqueue("g", "B", 10*time.Minute) // one running of two: B has room
	if _, err := s.Pool().Exec(ctx, `UPDATE jobs SET state = 'running', lease_expires_at = now() + interval '1 hour'
		WHERE id = $1`, enqueue("g", "B", 3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	enqueue("plain", "", 5*time.Minute)

	ages := func(g pgstore.Groups) (runnable, waiting float64) {
		t.Helper()
		st, err := s.QueueStats(ctx, g)
		if err != nil || st["q"] == nil {
			t.Fatalf("queue stats: %v, %v", st, err)
		}
		return st["q"].OldestRunnableAgeSeconds, st["q"].OldestWaitingAgeSeconds
	}
	capped := func(n int) pgstore.Groups {
		return pgstore.Groups{Routes: map[string]pgstore.GroupRoute{"g": {Queue: "q", Cap: n}}, Only: map[string]bool{"q": false}}
	}
	if r, w := ages(capped(2)); !near(r, 10*time.Minute) || !near(w, time.Hour) {
		t.Errorf("with A at its cap: runnable %.0fs, waiting %.0fs; want B's 600s and A's 3600s", r, w)
	}
	if r, w := ages(capped(3)); !near(r, time.Hour) || w != 0 {
		t.Errorf("with room in every group: runnable %.0fs, waiting %.0fs; want A's 3600s and 0", r, w)
	}
	if r, _ := ages(pgstore.Groups{}); !near(r, time.Hour) {
		t.Errorf("without the caps: runnable %.0fs, want A's 3600s", r)
	}
	// B at its cap too: the unlimited route's job is the oldest runnable.
	if r, w := ages(capped(1)); !near(r, 5*time.Minute) || !near(w, time.Hour) {
		t.Errorf("with every group at its cap: runnable %.0fs, waiting %.0fs; want the plain route's 300s and A's 3600s", r, w)
	}
}

// A job's detail names its group and says whether the group's cap is
// what holds it: SPEC §1's "waiting behind its group's head", which its
// state (queued) does not say.
func TestJobDetailSaysWhetherItsGroupHoldsIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	past, later := time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	var running []int64
	for range 2 { // tenant A at its cap of 2
		running = append(running, enqueueGrouped(t, s, "g", "A", past))
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE jobs SET state = 'running', lease_expires_at = now() + interval '1 hour'
		WHERE id = ANY($1)`, running); err != nil {
		t.Fatal(err)
	}
	held, notYet := enqueueGrouped(t, s, "g", "A", past), enqueueGrouped(t, s, "g", "A", later)
	roomy, plain := enqueueGrouped(t, s, "g", "B", past), enqueueGrouped(t, s, "plain", "", past)
	caps := pgstore.Groups{Routes: map[string]pgstore.GroupRoute{"g": {Queue: "q", Cap: 2}}, Only: map[string]bool{"q": false}}

	for _, c := range []struct {
		what string
		id   int64
		want *pgstore.GroupPosition
	}{
		{"a runnable job of a group at its cap", held, &pgstore.GroupPosition{Value: "A", MaxRunning: 2, Running: 2, Held: true}},
		{"a job of that group due later", notYet, &pgstore.GroupPosition{Value: "A", MaxRunning: 2, Running: 2}},
		{"a running job of it", running[0], &pgstore.GroupPosition{Value: "A", MaxRunning: 2, Running: 2}},
		{"a job of a group with room", roomy, &pgstore.GroupPosition{Value: "B", MaxRunning: 2}},
		{"a job of a route with no group", plain, nil},
	} {
		d, err := s.JobGetDetail(ctx, c.id, caps)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(d.Group, c.want) {
			t.Errorf("%s: group %+v, want %+v", c.what, d.Group, c.want)
		}
	}
	// Without the config's groups nothing is said, not a cap of 0.
	if d, err := s.JobGetDetail(ctx, held, pgstore.Groups{}); err != nil || d.Group != nil {
		t.Errorf("without groups: %+v, %v; want no group", d.Group, err)
	}
}

// enqueueGrouped enqueues a job of route in queue q, of group (none:
// ""), to run at runAt, and returns its id.
func enqueueGrouped(t *testing.T, s *pgstore.Store, route, group string, runAt time.Time) int64 {
	t.Helper()
	e, err := s.JobEnqueue(context.Background(), pgstore.NewJob{Origin: pgstore.OriginAPI, Route: route, Kind: "k", Queue: "q",
		Group: group, DedupeKey: testenv.Name("d"), Payload: []byte(`{}`), MaxAttempts: 3, RunAt: &runAt}, pgstore.Actor{By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return e.ID
}

// near reports whether an age in seconds is within a minute of want.
func near(got float64, want time.Duration) bool {
	return got > want.Seconds()-60 && got < want.Seconds()+60
}

// A flood held at its cap, longer than the window of jobs QueueStats
// reads past held ones: a queue that only grouped routes feed finds its
// oldest runnable job by its groups, exactly; a queue that others feed
// too says the age of the window's last job, which nothing behind it can
// be older than (high, never low).
func TestQueueStatsPastALongHeldFlood(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	at := func(age time.Duration) *time.Time { t := time.Now().Add(-age); return &t }
	var b pgstore.IngestBatch
	job := func(group string, age time.Duration) pgstore.NewJob {
		return pgstore.NewJob{Route: "g", Kind: "k", Queue: "q", Group: group, DedupeKey: fmt.Sprint(len(b.Jobs)),
			Payload: []byte("{}"), MaxAttempts: 1, Topic: "t", Offset: int64(len(b.Jobs)), RunAt: at(age)}
	}
	for i := range pgstore.HeldWindow + 50 {
		b.Jobs = append(b.Jobs, job("A", 3*time.Hour-time.Duration(i)*time.Second))
	}
	b.Jobs = append(b.Jobs, job("B", 10*time.Minute))
	if _, err := s.IngestCommit(ctx, b); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE jobs SET state = 'running', lease_expires_at = now() + interval '1 hour'
		WHERE id IN (SELECT id FROM jobs WHERE grp = 'A' ORDER BY scheduled_at LIMIT 2)`); err != nil {
		t.Fatal(err)
	}
	groups := pgstore.Groups{Routes: map[string]pgstore.GroupRoute{"g": {Queue: "q", Cap: 2}}, Only: map[string]bool{"q": true}}
	st, err := s.QueueStats(ctx, groups)
	if err != nil {
		t.Fatal(err)
	}
	if r, w := st["q"].OldestRunnableAgeSeconds, st["q"].OldestWaitingAgeSeconds; !near(r, 10*time.Minute) || !near(w, 3*time.Hour-2*time.Second) {
		t.Errorf("a queue of grouped routes only: runnable %.0fs, waiting %.0fs; want B's 600s and A's 10798s", r, w)
	}
	groups.Only["q"] = false
	if st, err = s.QueueStats(ctx, groups); err != nil {
		t.Fatal(err)
	}
	// The window's last job is A's 1,002nd oldest (two run).
	if r, want := st["q"].OldestRunnableAgeSeconds, 3*time.Hour-time.Duration(pgstore.HeldWindow+1)*time.Second; !near(r, want) {
		t.Errorf("a queue other routes feed too: runnable %.0fs, want the window's last, %.0fs", r, want.Seconds())
	}
}
