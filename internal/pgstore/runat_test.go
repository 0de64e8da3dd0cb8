package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
	"github.com/switchyard-dev/switchyard/jobstate"
)

// A job with a run time ahead is stored with it as scheduled_at and not
// claimed before it, beside a job that runs at once. In an ordered lane a
// head waiting for its time holds the lane, and when the head before it
// ends with a handoff asked for, the job is not handed off early: it is
// queued with its own time.
func TestRunAtHoldsTheJobAndItsLane(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	var dbNow time.Time
	if err := s.Pool().QueryRow(ctx, `SELECT now()`).Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	later := dbNow.Add(time.Hour).Truncate(time.Microsecond)
	soon := dbNow.Add(1500 * time.Millisecond).Truncate(time.Microsecond)
	lane := &pgstore.LanePolicy{Policy: "none", OnDead: "continue", GapTimeout: time.Minute, GapPolicy: "park"}
	job := func(dedupe, key string, offset int64, at *time.Time, l *pgstore.LanePolicy) pgstore.NewJob {
		return pgstore.NewJob{Route: "r", Kind: "k", Queue: "q", Key: key, DedupeKey: dedupe, Payload: []byte("{}"),
			MaxAttempts: 3, Topic: "t", Offset: offset, RunAt: at, Lane: l}
	}
	if _, err := s.IngestCommit(ctx, pgstore.IngestBatch{Jobs: []pgstore.NewJob{
		job("later", "", 0, &later, nil),
		job("now", "", 1, nil, nil),
		job("head", "k", 2, nil, lane),
		job("timed", "k", 3, &soon, lane), // waits behind head, then for its time
		job("after", "k", 4, nil, lane),
	}}); err != nil {
		t.Fatal(err)
	}
	var at time.Time
	if err := s.Pool().QueryRow(ctx, `SELECT j.scheduled_at FROM jobs j JOIN job_keys k ON k.job_id = j.id
		WHERE k.dedupe_key = 'later'`).Scan(&at); err != nil || !at.Equal(later) {
		t.Fatalf("scheduled_at %v (%v), want the run time %v", at, err, later)
	}
	claim := func() []*pgstore.Claimed {
		t.Helper()
		jobs, _, err := s.JobClaim(ctx, pgstore.JobClaimParams{Queue: "q", Limit: 10, Lease: time.Minute, MaxRuntime: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return jobs
	}
	first := claim()
	if len(first) != 2 {
		t.Fatalf("claimed %d jobs, want the one that runs at once and the lane's head", len(first))
	}
	var head *pgstore.Claimed
	for _, j := range first {
		if j.Lane {
			head = j
		}
	}
	done, err := s.JobComplete(ctx, []pgstore.Outcome{{ID: head.ID, Token: head.Token, State: jobstate.Succeeded, Lane: head.LaneRef(),
		Handoff: &pgstore.Handoff{Queue: "q", Lease: time.Minute}}})
	if err != nil || !done.Applied[head.Token] {
		t.Fatalf("complete the head: %+v %v", done, err)
	}
	if next := done.Next[head.ID]; next != nil {
		t.Fatalf("job %d was handed off before its run time", next.ID)
	}
	if jobs := claim(); len(jobs) != 0 {
		t.Fatalf("claimed %d jobs while the lane's head waits for its time", len(jobs))
	}
	time.Sleep(time.Until(soon.Add(100 * time.Millisecond)))
	timed := claim()
	if len(timed) != 1 || !timed[0].Lane {
		t.Fatalf("claimed %d jobs once the head's time came, want the timed head alone (its lane holds the next)", len(timed))
	}
}
