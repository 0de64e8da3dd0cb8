package pgstore_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// laneKeys lists the lanes of route r, in key order.
func laneKeys(t *testing.T, s *pgstore.Store) []string {
	t.Helper()
	rows, err := s.Pool().Query(context.Background(), `SELECT key FROM lanes WHERE route = 'r' ORDER BY key`)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// jobState is the state of the job of a dedupe key, wherever it is kept.
func jobState(t *testing.T, s *pgstore.Store, dedupe string) string {
	t.Helper()
	var state string
	if err := s.Pool().QueryRow(context.Background(), `SELECT state FROM all_jobs WHERE dedupe_key = $1`, dedupe).Scan(&state); err != nil {
		t.Fatal(err)
	}
	return state
}

// runLanes claims and ends as succeeded every runnable job of queue q,
// until none is left.
func runLanes(t *testing.T, s *pgstore.Store) {
	t.Helper()
	ctx := context.Background()
	for {
		jobs, _, err := s.JobClaim(ctx, pgstore.JobClaimParams{Queue: "q", Limit: 10, Lease: time.Minute, MaxRuntime: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) == 0 {
			return
		}
		for _, j := range jobs {
			if _, err := s.JobComplete(ctx, []pgstore.Outcome{{ID: j.ID, Token: j.Token, State: "succeeded", Lane: j.LaneRef()}}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A lane row of a key is kept only while it holds something: its head or
// waiting jobs, a blocked head, a strict gap, or the last applied version
// of a versioned lane. An idle lane without versions holds nothing, and
// is pruned (a key's lane row would otherwise stay forever: one for every
// order id an ordered route has ever seen). A job of a pruned lane's key
// (a new record, a re-run, a re-drive) creates it again, and runs.
func TestIdleLanesArePrunedAndComeBackWithTheirNextJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	ingestLane(t, s, func(id string) string { return id[:1] }, "a1", "b1", "b2", "d1", "r1")
	// b2 stays queued behind b1, which runs; the others end: d1 dead
	// (on_dead: continue, so its lane moves on), the rest succeeded.
	jobs, _, err := s.JobClaim(ctx, pgstore.JobClaimParams{Queue: "q", Limit: 10, Lease: time.Minute, MaxRuntime: time.Hour})
	if err != nil || len(jobs) != 4 {
		t.Fatalf("claim: %d jobs, %v; want the four heads", len(jobs), err)
	}
	var b1 pgstore.Claimed
	for _, j := range jobs {
		var dedupe string
		if err := s.Pool().QueryRow(ctx, `SELECT dedupe_key FROM jobs WHERE id = $1`, j.ID).Scan(&dedupe); err != nil {
			t.Fatal(err)
		}
		o := pgstore.Outcome{ID: j.ID, Token: j.Token, State: "succeeded", Lane: j.LaneRef()}
		switch dedupe {
		case "b1":
			b1 = *j
			continue
		case "d1":
			o.State, o.Reason, o.Error = "dead", "permanent", "refused"
		}
		if _, err := s.JobComplete(ctx, []pgstore.Outcome{o}); err != nil {
			t.Fatal(err)
		}
	}
	// A versioned lane keeps its last version (retention.versions unset:
	// for good): a stale record must still be skipped after any amount
	// of idleness.
	ingestVersion(t, s, "v1", 7)
	runLanes(t, s)
	if got := laneKeys(t, s); !slices.Equal(got, []string{"a", "b", "d", "r", "v"}) {
		t.Fatalf("lanes before pruning: %v", got)
	}

	n, err := pruneAll(ctx, s, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := laneKeys(t, s); n != 3 || !slices.Equal(got, []string{"b", "v"}) {
		t.Fatalf("pruned %d lanes, left %v; want a, d and r pruned, b (running) and v (versioned) kept", n, got)
	}

	// Each way a job joins a pruned lane brings the lane back, and the
	// job is its head: a new record, a re-run, a re-drive.
	ingestLane(t, s, func(string) string { return "a" }, "a2")
	if n, err := s.JobRerun(ctx, "r", []string{"r1"}); err != nil || n != 1 {
		t.Fatalf("rerun: %d, %v", n, err)
	}
	entries, err := s.DLQList(ctx, pgstore.DLQFilter{Limit: 10})
	if err != nil || len(entries) != 1 {
		t.Fatalf("DLQ: %d entries, %v; want d1's", len(entries), err)
	}
	if _, err := s.DLQRedrive(ctx, entries[0].ID, "test"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a2", "r1", "d1"} {
		if st := jobState(t, s, id); st != "queued" {
			t.Errorf("%s is %s, want queued: its lane's head", id, st)
		}
	}
	if got := laneKeys(t, s); !slices.Equal(got, []string{"a", "b", "d", "r", "v"}) {
		t.Fatalf("lanes after the jobs came back: %v", got)
	}
	// The running lane kept its order: b2 waits for b1.
	if st := jobState(t, s, "b2"); st != "waiting" {
		t.Errorf("b2 is %s, want waiting behind b1", st)
	}
	if _, err := s.JobComplete(ctx, []pgstore.Outcome{{ID: b1.ID, Token: b1.Token, State: "succeeded", Lane: b1.LaneRef()}}); err != nil {
		t.Fatal(err)
	}
	runLanes(t, s)
	for _, id := range []string{"a2", "b2", "d1", "r1"} {
		if st := jobState(t, s, id); st != "succeeded" {
			t.Errorf("%s is %s, want succeeded", id, st)
		}
	}
}

// ingestVersion stores a job of key "v" of route r, whose lane is
// versioned (policy newer), with version v, as record offset v.
func ingestVersion(t *testing.T, s *pgstore.Store, dedupe string, v int64) {
	t.Helper()
	versioned := &pgstore.LanePolicy{Policy: "newer", OnDead: "continue", GapTimeout: time.Minute, GapPolicy: "park"}
	if _, err := s.IngestCommit(context.Background(), pgstore.IngestBatch{Jobs: []pgstore.NewJob{{Route: "r", Kind: "k",
		Queue: "q", Key: "v", DedupeKey: dedupe, Payload: []byte("{}"), MaxAttempts: 3, Topic: "t", Offset: v, Version: &v,
		Lane: versioned}}}); err != nil {
		t.Fatal(err)
	}
}

// retention.versions: an idle versioned lane keeps its last applied
// version for that long after the prune first finds it idle with it, and
// then forgets it (its row is pruned), so that a route keyed by an
// ever-growing id does not keep a row per key for good. A version applied
// meanwhile starts the count again.
func TestIdleVersionedLanesForgetTheirVersionAfterRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	const keep = time.Hour
	ingestVersion(t, s, "v7", 7)
	runLanes(t, s)
	stamp := func() (since *time.Time, version *int64) {
		t.Helper()
		if err := s.Pool().QueryRow(ctx, `SELECT idle_since, idle_version FROM lanes WHERE key = 'v'`).Scan(&since, &version); err != nil {
			t.Fatal(err)
		}
		return since, version
	}
	// age moves the lane's stamp further into the past than keep, as
	// the time a deployment's prunes would let pass.
	age := func() {
		t.Helper()
		if _, err := s.Pool().Exec(ctx, `UPDATE lanes SET idle_since = idle_since - interval '2 hours' WHERE key = 'v'`); err != nil {
			t.Fatal(err)
		}
	}
	prune := func(versions time.Duration) int64 {
		t.Helper()
		n, err := pruneAll(ctx, s, versions)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	if n := prune(0); n != 0 {
		t.Fatalf("pruned %d lanes without retention.versions; want the versioned lane kept", n)
	}
	if since, _ := stamp(); since != nil {
		t.Fatalf("stamped at %v without retention.versions", since)
	}
	if n := prune(keep); n != 0 {
		t.Fatalf("pruned %d lanes at the first sight of the idle lane", n)
	}
	if since, v := stamp(); since == nil || v == nil || *v != 7 {
		t.Fatalf("stamp %v, version %v; want now and 7", since, v)
	}
	// Remembered: a late, older record is skipped.
	ingestVersion(t, s, "v6", 6)
	if st := jobState(t, s, "v6"); st != "skipped" {
		t.Fatalf("v6 is %s, want skipped against version 7", st)
	}
	// A version applied after the stamp: the stamp is of the old one, and
	// the lane is stamped again rather than pruned.
	ingestVersion(t, s, "v8", 8)
	runLanes(t, s)
	age()
	if n := prune(keep); n != 0 {
		t.Fatalf("pruned %d lanes whose version changed since their stamp", n)
	}
	if since, v := stamp(); since == nil || time.Since(*since) > time.Minute || v == nil || *v != 8 {
		t.Fatalf("stamp %v, version %v; want restamped now with 8", since, v)
	}
	// A stamped lane not yet due is left alone, not even locked: a lock
	// writes the row (its xmax), pass after pass.
	xmax := func() (x string) {
		t.Helper()
		if err := s.Pool().QueryRow(ctx, `SELECT xmax::text FROM lanes WHERE key = 'v'`).Scan(&x); err != nil {
			t.Fatal(err)
		}
		return x
	}
	before := xmax()
	if n := prune(keep); n != 0 {
		t.Fatalf("pruned %d lanes stamped less than %s ago", n, keep)
	}
	if after := xmax(); after != before {
		t.Fatalf("the prune locked a lane stamped less than %s ago (xmax %s → %s)", keep, before, after)
	}
	age()
	if n := prune(keep); n != 1 {
		t.Fatalf("pruned %d lanes; want the lane idle with version 8 for longer than %s", n, keep)
	}
	if got := laneKeys(t, s); len(got) != 0 {
		t.Fatalf("lanes left: %v", got)
	}
	// Forgotten: the key's next record runs, however old its version.
	ingestVersion(t, s, "v5", 5)
	runLanes(t, s)
	if st := jobState(t, s, "v5"); st != "succeeded" {
		t.Fatalf("v5 is %s, want succeeded: its lane forgot version 8", st)
	}
}

// pruneAll prunes idle lanes page by page until a pass ends, keeping an
// idle versioned lane's version for versions (0: for good), and returns
// how many it pruned.
func pruneAll(ctx context.Context, s *pgstore.Store, versions time.Duration) (int64, error) {
	var total int64
	var after pgstore.LaneKey
	for {
		next, n, _, err := s.LanePrune(ctx, after, 2, versions) // small pages: the cursor is exercised too
		if err != nil {
			return total, err
		}
		total += n
		if next == nil {
			return total, nil
		}
		after = *next
	}
}
