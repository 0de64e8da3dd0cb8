package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// ingestLane ingests jobs of route r (queue q, lanes without versions)
// with the given dedupe keys in offset order, each in the lane key(id).
func ingestLane(t *testing.T, s *pgstore.Store, key func(id string) string, ids ...string) {
	t.Helper()
	lane := &pgstore.LanePolicy{Policy: "none", OnDead: "continue", GapTimeout: time.Minute, GapPolicy: "park"}
	var batch pgstore.IngestBatch
	for i, id := range ids {
		batch.Jobs = append(batch.Jobs, pgstore.NewJob{Route: "r", Kind: "k", Queue: "q", Key: key(id), DedupeKey: id,
			Payload: []byte("{}"), MaxAttempts: 3, Topic: "t", Offset: int64(i), Lane: lane})
	}
	if _, err := s.IngestCommit(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
}

// The completer sends lanes_advance every lane job of a batch in the same
// round trip as the outcomes, before it knows which applied. A stale
// outcome of a lane head (its lease expired and the job was claimed
// again) must change neither the job nor the lane; the live attempt's
// outcome, even in the same batch, advances the lane exactly once.
func TestStaleLaneHeadOutcomeChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	ingestLane(t, s, func(string) string { return "cust-1" }, "a", "b")
	claimOne := func() (id, token int64) {
		t.Helper()
		jobs, _, err := s.JobClaim(ctx, pgstore.JobClaimParams{Queue: "q", Limit: 10, Lease: time.Minute, MaxRuntime: time.Hour})
		if err != nil || len(jobs) != 1 {
			t.Fatalf("claim: %d jobs, %v; want exactly the lane's head", len(jobs), err)
		}
		return jobs[0].ID, jobs[0].Token
	}
	head, stale := claimOne()
	// The first attempt's lease expires; the rescuer hands the job out again.
	if _, err := s.Pool().Exec(ctx, `UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, head); err != nil {
		t.Fatal(err)
	}
	if r, err := s.JobRescue(ctx, 10, nil); err != nil || r.Retried["k"] != 1 {
		t.Fatalf("rescue: %v, %v", r.Retried, err)
	}
	again, live := claimOne()
	if again != head || live == stale {
		t.Fatalf("re-claimed job %d token %d, want job %d under a new token", again, live, head)
	}
	state := func() (string, string, int64) {
		t.Helper()
		var a, b string
		var h int64
		err := s.Pool().QueryRow(ctx, `SELECT
			(SELECT state FROM all_jobs WHERE dedupe_key = 'a'), (SELECT state FROM all_jobs WHERE dedupe_key = 'b'),
			(SELECT coalesce(head_job_id, 0) FROM lanes WHERE route = 'r' AND key = 'cust-1')`).Scan(&a, &b, &h)
		if err != nil {
			t.Fatal(err)
		}
		return a, b, h
	}

	lane := &pgstore.LaneRef{Route: "r", Key: "cust-1"}
	done, err := s.JobComplete(ctx, []pgstore.Outcome{{ID: head, Token: stale, State: "succeeded", Lane: lane}})
	if err != nil || len(done.Applied) != 0 {
		t.Fatalf("stale outcome: applied %v, %v", done.Applied, err)
	}
	if a, b, h := state(); a != "running" || b != "waiting" || h != head {
		t.Fatalf("after the stale outcome: a %s, b %s, head %d; want running, waiting, %d", a, b, h, head)
	}

	done, err = s.JobComplete(ctx, []pgstore.Outcome{
		{ID: head, Token: stale, State: "dead", Reason: "permanent", Error: "stale", Lane: lane},
		{ID: head, Token: live, State: "succeeded", Lane: lane},
	})
	if err != nil || len(done.Applied) != 1 || !done.Applied[live] {
		t.Fatalf("batch of a stale and a live outcome: applied %v, %v; want only token %d", done.Applied, err, live)
	}
	next, _ := claimOne()
	if a, b, h := state(); a != "succeeded" || b != "running" || h != next {
		t.Fatalf("after the live outcome: a %s, b %s, head %d; want succeeded, running, %d", a, b, h, next)
	}
}

// I3 through replay --rerun: a finished job of a lane that has moved on
// rejoins the lane's order as waiting; it never runs beside the lane's
// current head, and runs once the head is done.
func TestRerunOfALaneJobWaitsForItsTurn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	ingestLane(t, s, func(string) string { return "cust-1" }, "a", "b")
	claim := func() []string {
		t.Helper()
		jobs, _, err := s.JobClaim(ctx, pgstore.JobClaimParams{Queue: "q", Limit: 10, Lease: time.Minute, MaxRuntime: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, j := range jobs {
			if _, err := s.JobComplete(ctx, []pgstore.Outcome{{ID: j.ID, Token: j.Token, State: "succeeded", Lane: j.LaneRef()}}); err != nil {
				t.Fatal(err)
			}
			var k string
			if err := s.Pool().QueryRow(ctx, `SELECT dedupe_key FROM all_jobs WHERE id = $1`, j.ID).Scan(&k); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, k)
		}
		return keys
	}
	if got := claim(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("first claim ran %v, want [a]", got)
	}
	// b is the head now (queued); a finished. Re-run a.
	if n, err := s.JobRerun(ctx, "r", []string{"a"}); err != nil || n != 1 {
		t.Fatalf("rerun: %d, %v", n, err)
	}
	var state string
	if err := s.Pool().QueryRow(ctx, `SELECT state FROM jobs WHERE dedupe_key = 'a'`).Scan(&state); err != nil || state != "waiting" {
		t.Fatalf("re-run job is %s (%v), want waiting behind the head", state, err)
	}
	if got := claim(); len(got) != 1 || got[0] != "b" {
		t.Fatalf("second claim ran %v, want only the head [b]", got)
	}
	if got := claim(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("third claim ran %v, want the re-run [a]", got)
	}
}

// A pool may ask for a lane's next job to be handed to it with its head's
// outcome (Outcome.Handoff): the job comes back claimed (running, attempt
// counted, a fresh token, leased) as the lane's new head. A job of
// another queue, or a lane whose pool did not ask, is queued as before.
func TestLaneHandoff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	ingestLane(t, s, func(id string) string { return id[:1] }, "a1", "a2", "a3", "b1", "b2")
	heads, _, err := s.JobClaim(ctx, pgstore.JobClaimParams{Queue: "q", Limit: 10, Lease: time.Minute, MaxRuntime: time.Hour})
	if err != nil || len(heads) != 2 {
		t.Fatalf("claim: %d jobs, %v; want the two heads", len(heads), err)
	}
	a1, b1 := heads[0], heads[1]
	type row struct {
		state       string
		attempts    int
		token       int64
		leaseSecond float64
		head        bool
	}
	get := func(dedupe string) row {
		t.Helper()
		var r row
		err := s.Pool().QueryRow(ctx, `SELECT j.state, j.attempts, coalesce(j.token, 0),
				coalesce(extract(epoch FROM j.lease_expires_at - now()), 0)::float8, l.head_job_id = j.id
			FROM jobs j JOIN lanes l ON l.route = j.route AND l.key = j.key WHERE j.dedupe_key = $1`, dedupe).
			Scan(&r.state, &r.attempts, &r.token, &r.leaseSecond, &r.head)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	done, err := s.JobComplete(ctx, []pgstore.Outcome{
		{ID: a1.ID, Token: a1.Token, State: "succeeded", Lane: a1.LaneRef(), Handoff: &pgstore.Handoff{Queue: "q", Lease: time.Minute}},
		{ID: b1.ID, Token: b1.Token, State: "succeeded", Lane: b1.LaneRef()},
	})
	if err != nil || len(done.Applied) != 2 {
		t.Fatalf("complete: applied %v, %v", done.Applied, err)
	}
	a2 := done.Next[a1.ID]
	if len(done.Next) != 1 || a2 == nil {
		t.Fatalf("handed off %v; want a's next job only", done.Next)
	}
	r := get("a2")
	if a2.Attempt != 1 || a2.Token == a1.Token || a2.Token != r.token || !a2.Lane || string(a2.Payload) != "{}" {
		t.Fatalf("handed-off job %+v; want attempt 1 under a fresh token (row: %+v)", a2, r)
	}
	if r.state != "running" || r.attempts != 1 || !r.head || r.leaseSecond < 50 || r.leaseSecond > 61 {
		t.Fatalf("a2 row %+v; want running, attempt 1, the lane's head, leased for a minute", r)
	}
	if r := get("b2"); r.state != "queued" || !r.head {
		t.Fatalf("b2 row %+v; want queued as b's head (its pool did not ask)", r)
	}

	// A pool of another queue gets nothing: the job is queued for its own.
	done, err = s.JobComplete(ctx, []pgstore.Outcome{
		{ID: a2.ID, Token: a2.Token, State: "succeeded", Lane: a2.LaneRef(), Handoff: &pgstore.Handoff{Queue: "other", Lease: time.Minute}},
	})
	if err != nil || !done.Applied[a2.Token] || len(done.Next) != 0 {
		t.Fatalf("complete a2: applied %v, next %v, %v; want applied, nothing handed off", done.Applied, done.Next, err)
	}
	if r := get("a3"); r.state != "queued" || r.attempts != 0 || !r.head {
		t.Fatalf("a3 row %+v; want queued, no attempt, the lane's head", r)
	}
}

// A lane's next job cancelled while the lane advances onto it: the
// promotion finds it waiting in its snapshot, waits for the cancel's row
// lock, re-checks the state and leaves it alone. The lane must then have
// no head at all, not the cancelled job: a cancelled head would hold the
// lane for ever. (lanes_advance writes a freed lane once, with whichever
// job it actually promoted.) The jobs still waiting behind it are
// promoted by the lanes' prune (LanePrune): the next ingest into the lane
// would promote past it too, but a key may never get another record.
func TestLaneSkipsANextJobCancelledAsItAdvances(t *testing.T) {
	t.Parallel()
	s, next, head, state := advanceBehind(t, `UPDATE jobs SET state = 'cancelled', finished_at = now() WHERE id = $1`)
	if head != 0 || state != "cancelled" {
		t.Fatalf("lane head %d, next job %d %s; want no head and the job cancelled", head, next, state)
	}
	if st := jobState(t, s, "c"); st != "waiting" {
		t.Fatalf("the job behind the cancelled one is %s, want waiting", st)
	}
	if _, err := pruneAll(context.Background(), s, 0); err != nil {
		t.Fatal(err)
	}
	if st := jobState(t, s, "c"); st != "queued" {
		t.Fatalf("after the lanes' prune the job behind the cancelled one is %s, want queued: its lane's head", st)
	}
}

// A lane whose row another transaction updates (its settings changed by
// an ingest of a reconfigured route) while lanes_advance waits for its
// lock still advances: the row is followed to its latest version, and
// lanes_advance reaches it after by that version's position.
func TestLaneRowUpdatedWhileItAdvancesStillAdvances(t *testing.T) {
	t.Parallel()
	// advanceBehind passes the next job's id; this statement names the lane
	// itself, and only mentions $1 so that the argument is used.
	_, next, head, state := advanceBehind(t, `UPDATE lanes SET gap_timeout = gap_timeout + interval '1 minute'
		WHERE route = 'r' AND key = 'cust-1' AND $1::bigint IS NOT NULL`)
	if head != next || state != "queued" {
		t.Fatalf("lane head %d, next job %d %s; want the next job queued as the head", head, next, state)
	}
}

// advanceBehind ingests a lane of three jobs, claims its head and
// completes it while another transaction, which ran block (given the next
// job's id, returning its backend's pid), holds a row the completion
// needs: once the completion waits for it, that transaction commits, and
// the completion must then succeed. It returns the store, the next job's
// id, the lane's head after (0: none) and the next job's state.
func advanceBehind(t *testing.T, block string) (s *pgstore.Store, next, head int64, state string) {
	t.Helper()
	ctx := context.Background()
	s = testenv.MigratedStore(t)
	ingestLane(t, s, func(string) string { return "cust-1" }, "a", "b", "c")
	ended := testenv.ClaimOne(t, s, "q")
	if err := s.Pool().QueryRow(ctx, `SELECT id FROM jobs WHERE dedupe_key = 'b'`).Scan(&next); err != nil {
		t.Fatal(err)
	}
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, block, next); err != nil {
		t.Fatal(err)
	}
	completed := make(chan error, 1)
	go func() {
		_, err := s.JobComplete(ctx, []pgstore.Outcome{{ID: ended.ID, Token: ended.Token, State: "succeeded", Lane: ended.LaneRef()}})
		completed <- err
	}()
	testenv.WaitBlockedBy(t, s, tx, "the completion to wait for the other transaction's row lock")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-completed; err != nil {
		t.Fatal(err)
	}
	if err := s.Pool().QueryRow(ctx, `SELECT coalesce((SELECT head_job_id FROM lanes WHERE route = 'r' AND key = 'cust-1'), 0),
		(SELECT state FROM all_jobs WHERE id = $1)`, next).Scan(&head, &state); err != nil {
		t.Fatal(err)
	}
	return s, next, head, state
}
