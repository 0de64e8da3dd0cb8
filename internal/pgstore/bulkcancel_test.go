package pgstore_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/internal/bulk"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
	"github.com/switchyard-dev/switchyard/jobstate"
)

// A bulk cancel takes the jobs that existed when it started: one that a
// producer makes while it runs, past its first page, is left queued, and
// the cancel ends. It used to be able to read on to jobs made since.
func TestJobCancelMatchingTakesTheJobsOfItsStart(t *testing.T) {
	t.Parallel()
	s := testenv.MigratedStore(t)
	ctx := context.Background()
	job := func(i int) pgstore.NewJob {
		return pgstore.NewJob{Route: "r", Kind: "k", Queue: "q", DedupeKey: fmt.Sprint(i), Payload: []byte(`{}`),
			MaxAttempts: 3, Topic: "t", Offset: int64(i)}
	}
	const n = 600 // past a page (500): the second page is read after the new job
	var b pgstore.IngestBatch
	for i := range n {
		b.Jobs = append(b.Jobs, job(i))
	}
	if _, err := s.IngestCommit(ctx, b); err != nil {
		t.Fatal(err)
	}
	made := false
	res, err := s.JobCancelMatching(ctx, pgstore.JobFilter{Queue: "q"}, "test", bulk.Options{Expect: n, Progress: func(bulk.Result) {
		if !made {
			made = true
			if _, err := s.IngestCommit(ctx, pgstore.IngestBatch{Jobs: []pgstore.NewJob{job(n)}}); err != nil {
				t.Error(err)
			}
		}
	}})
	if err != nil || res.Done != n || len(res.Failed) != 0 {
		t.Fatalf("JobCancelMatching: %+v, %v; want %d done", res, err, n)
	}
	if got := testenv.Count(t, s, `SELECT count(*) FROM jobs WHERE state = 'queued'`); got != 1 {
		t.Errorf("%d jobs queued after the cancel, want the one made while it ran", got)
	}
}

// A bulk cancel of lanes' backlogs cancels their waiting jobs before
// their heads, so that no head's cancel hands its lane's next job on
// (promoted, a worker could start it) before the cancel reaches it: every
// waiting job is cancelled as waiting, in a chunk, and only the heads
// alone. In id order, each head's cancel promoted its next job, which the
// cancel then met as a head, and so on down every lane: an ordered
// backlog was cancelled one job at a time.
func TestJobCancelMatchingCancelsLanesWaitingJobsBeforeTheirHeads(t *testing.T) {
	t.Parallel()
	s := testenv.MigratedStore(t)
	ctx := context.Background()
	lane := &pgstore.LanePolicy{Policy: "none", OnDead: "continue", GapTimeout: time.Minute, GapPolicy: "park"}
	const lanes, each = 40, 6 // ids interleave the lanes: the heads first, then each lane's next
	var b pgstore.IngestBatch
	for i := range lanes * each {
		b.Jobs = append(b.Jobs, pgstore.NewJob{Route: "o", Kind: "k", Queue: "q", Key: fmt.Sprint("k", i%lanes),
			DedupeKey: fmt.Sprint(i), Payload: []byte(`{}`), MaxAttempts: 3, Topic: "t", Offset: int64(i), Lane: lane})
	}
	if _, err := s.IngestCommit(ctx, b); err != nil {
		t.Fatal(err)
	}
	res, err := s.JobCancelMatching(ctx, pgstore.JobFilter{Route: "o"}, "test", bulk.Options{Expect: lanes * each})
	if err != nil || res.Done != lanes*each || len(res.Failed) != 0 {
		t.Fatalf("JobCancelMatching: %+v, %v; want %d done", res, err, lanes*each)
	}
	was := map[string]int{}
	rows, _ := s.Pool().Query(ctx, `SELECT detail->>'was' FROM audit_log WHERE action = 'cancel'`)
	var w string
	if _, err := pgx.ForEachRow(rows, []any{&w}, func() error { was[w]++; return nil }); err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"queued": lanes, "waiting": lanes * (each - 1)}; !reflect.DeepEqual(was, want) {
		t.Errorf("cancelled jobs were %v, want %v: the heads queued, every other job still waiting", was, want)
	}
	if n := testenv.Count(t, s, `SELECT count(*) FROM lanes WHERE head_job_id IS NOT NULL`); n != 0 {
		t.Errorf("%d lanes keep a head", n)
	}
}

// A bulk cancel's chunk (one transaction for the jobs of no lane and the
// lanes' waiting jobs, each lane's head alone after them) ends every job
// as cancelling each alone in that order does: the
// same states, lane heads, audit entries, tallied attempts and
// notices to the processes running them, and the same failure for each
// job it cannot cancel, in every state a job can be in.
func TestJobsCancelInAChunkAgreesWithEachAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type outcome struct {
		errs, states, heads, audit map[string]string
		tally                      map[[2]string]int64
		notified                   []string
	}
	run := func(chunk bool) outcome {
		s := testenv.MigratedStore(t)
		name, all := named(cancelFixture(t, s))
		conn, err := s.Pool().Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.CancelChannel()}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		o := outcome{errs: map[string]string{}, states: map[string]string{}, heads: map[string]string{}, audit: map[string]string{}}
		if chunk {
			failed, err := s.JobsCancel(ctx, all, "test")
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range failed {
				o.errs[name[f.ID]] = f.Error
			}
		} else {
			// In the chunk's order: the lanes' heads last, after their
			// waiting jobs, so that no head's cancel promotes one first.
			var rest, heads []int64
			for _, id := range all {
				if strings.HasSuffix(name[id], "-head") {
					heads = append(heads, id)
				} else {
					rest = append(rest, id)
				}
			}
			for _, id := range append(rest, heads...) {
				if err := s.JobCancel(ctx, id, "test"); err != nil {
					o.errs[name[id]] = err.Error()
				}
			}
		}
		rows, _ := s.Pool().Query(ctx, `SELECT id, state FROM jobs_by_id($1)`, all)
		var id int64
		var state string
		if _, err := pgx.ForEachRow(rows, []any{&id, &state}, func() error { o.states[name[id]] = state; return nil }); err != nil {
			t.Fatal(err)
		}
		var key string
		var head *int64
		rows, _ = s.Pool().Query(ctx, `SELECT key, head_job_id FROM lanes`)
		if _, err := pgx.ForEachRow(rows, []any{&key, &head}, func() error {
			o.heads[key] = "none"
			if head != nil {
				o.heads[key] = name[*head]
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		var actor, action, detail string
		rows, _ = s.Pool().Query(ctx, `SELECT actor, action, substr(target, 5)::bigint, detail::text FROM audit_log`)
		if _, err := pgx.ForEachRow(rows, []any{&actor, &action, &id, &detail}, func() error {
			o.audit[name[id]] = actor + " " + action + " " + detail
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if o.tally, err = s.OutcomeTallyTake(ctx); err != nil {
			t.Fatal(err)
		}
		for {
			wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			n, err := conn.Conn().WaitForNotification(wctx)
			cancel()
			if err != nil {
				break
			}
			id, _ := strconv.ParseInt(n.Payload, 10, 64)
			o.notified = append(o.notified, name[id])
		}
		slices.Sort(o.notified)
		return o
	}
	alone, chunked := run(false), run(true)
	if !reflect.DeepEqual(alone, chunked) {
		t.Fatalf("a chunk's cancel differs from each job's alone:\n alone  %+v\n chunk  %+v", alone, chunked)
	}
	// And the fixture holds what the comparison needs.
	if len(alone.errs) != 4 || alone.states["queued"] != "cancelled" || alone.states["k1-waiting"] != "cancelled" ||
		alone.heads["k2"] != "none" || len(alone.notified) != 2 || alone.tally[[2]string{"k", "cancelled"}] != 2 {
		t.Fatalf("cancelling each alone: %+v", alone)
	}
}

// A chunk cancels the lanes' waiting jobs in its own transaction, and
// leaves JobCancel only the heads, and a waiting job that another
// transaction holds: it passes over that one rather than wait for it
// while holding the others (lanesWaitingCancelSQL).
func TestJobsCancelTakesLanesWaitingJobsInItsChunk(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	id := cancelFixture(t, s)
	name, all := named(id)
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE`, id["k1-waiting2"]); err != nil {
		t.Fatal(err)
	}
	// Waiting for the held row would outlast this.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, alone, err := s.JobsCancelChunk(wctx, all, "test")
	if err != nil {
		t.Fatalf("the chunk with a waiting job held elsewhere: %v", err)
	}
	var left []string
	for _, i := range alone {
		left = append(left, name[i])
	}
	slices.Sort(left)
	if want := []string{"k1-head", "k1-waiting2", "k2-head"}; !slices.Equal(left, want) {
		t.Errorf("the chunk left %v for each alone, want %v", left, want)
	}
	for _, n := range []string{"k1-waiting", "k2-waiting"} {
		if st := testenv.Count(t, s, `SELECT count(*) FROM jobs WHERE id = $1 AND state = 'cancelled'`, id[n]); st != 1 {
			t.Errorf("%s is not cancelled by the chunk", n)
		}
		if a := testenv.Count(t, s, `SELECT count(*) FROM audit_log WHERE target = 'job/' || $1::bigint AND detail->>'was' = 'waiting'`, id[n]); a != 1 {
			t.Errorf("%s's cancel audited %d times, want once", n, a)
		}
	}
}

// cancelFixture makes a job in every state a cancel meets, and lanes, and
// names their ids: unordered jobs queued, running, retrying, dead,
// succeeded (gone to job_history) and cancelled; a lane whose head is
// queued with two waiting behind it (k1), and one whose head runs with
// one waiting (k2); and an id no job has.
func cancelFixture(t *testing.T, s *pgstore.Store) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	ids := map[string]int64{}
	lane := &pgstore.LanePolicy{Policy: "none", OnDead: "continue", GapTimeout: time.Minute, GapPolicy: "park"}
	ingest := func(name, queue string, lanePolicy *pgstore.LanePolicy, key string, offset int64) {
		j := pgstore.NewJob{Route: "r-" + queue, Kind: "k", Queue: queue, Key: key, DedupeKey: name, Payload: []byte(`{}`),
			MaxAttempts: 3, Topic: "t-" + queue, Offset: offset, Lane: lanePolicy}
		if _, err := s.IngestCommit(ctx, pgstore.IngestBatch{Jobs: []pgstore.NewJob{j}}); err != nil {
			t.Fatal(err)
		}
		var id int64
		if err := s.Pool().QueryRow(ctx, `SELECT max(id) FROM jobs`).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[name] = id
	}
	claimAndEnd := func(name string, state jobstate.State) {
		ingest(name, "q", nil, "", int64(len(ids)))
		j := testenv.ClaimOne(t, s, "q")
		if state == "" {
			return
		}
		if _, err := s.JobComplete(ctx, []pgstore.Outcome{{ID: j.ID, Token: j.Token, State: state, Reason: "permanent",
			Error: "boom", Delay: time.Hour}}); err != nil {
			t.Fatal(err)
		}
	}
	claimAndEnd("running", "")
	claimAndEnd("retrying", jobstate.Retrying)
	claimAndEnd("dead", jobstate.Dead)
	claimAndEnd("succeeded", jobstate.Succeeded)
	ingest("cancelled", "q", nil, "", 10)
	if err := s.JobCancel(ctx, ids["cancelled"], "fixture"); err != nil {
		t.Fatal(err)
	}
	ingest("queued", "q", nil, "", 11)
	ingest("k2-head", "oq", lane, "k2", 0)
	testenv.ClaimOne(t, s, "oq")
	ingest("k2-waiting", "oq", lane, "k2", 1)
	for i, n := range []string{"k1-head", "k1-waiting", "k1-waiting2"} {
		ingest(n, "oq", lane, "k1", int64(2+i))
	}
	if _, err := s.Pool().Exec(ctx, `DELETE FROM audit_log`); err != nil {
		t.Fatal(err)
	}
	ids["none"] = 1 << 40
	return ids
}

// A bulk cancel beside live workers and ingest: workers claim and finish
// the queue's jobs (lane heads handing off to their lanes' next jobs)
// while ingest adds jobs to the same lanes. The cancel meets no error,
// deadlock included, and its count is exact: every job it counts done is
// cancelled and audited once, every failure is a job that ended on its
// own first (one that ended before its page was read is not listed at
// all).
func TestJobCancelMatchingBesideLiveWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	batch := liveBatches(3)
	if _, err := s.IngestCommit(ctx, batch(3000)); err != nil {
		t.Fatal(err)
	}
	stop := liveWorkers(t, s, batch)
	res, err := s.JobCancelMatching(ctx, pgstore.JobFilter{Queue: "q"}, "test", bulk.Options{Expect: -1})
	stop()
	if err != nil {
		t.Fatalf("JobCancelMatching beside live workers: %v", err)
	}
	for _, f := range res.Failed {
		if !strings.Contains(f.Error, "has finished already (succeeded)") {
			t.Errorf("job %d: %s, want only jobs that succeeded first", f.ID, f.Error)
		}
	}
	cancelled := testenv.Count(t, s, `SELECT count(*) FROM jobs WHERE state = 'cancelled'`)
	audited := testenv.Count(t, s, `SELECT count(*) FROM audit_log WHERE action = 'cancel'`)
	distinct := testenv.Count(t, s, `SELECT count(DISTINCT target) FROM audit_log WHERE action = 'cancel'`)
	if res.Done != cancelled || audited != cancelled || distinct != cancelled || int64(res.Done+len(res.Failed)) > res.Matching {
		t.Fatalf("done %d and %d failed of %d matching; %d jobs cancelled, %d audited (%d distinct)",
			res.Done, len(res.Failed), res.Matching, cancelled, audited, distinct)
	}
	if res.Done < 100 || len(res.Failed) == 0 {
		t.Errorf("done %d, failed %d: the cancel did not race the workers", res.Done, len(res.Failed))
	}
	t.Logf("cancelled %d, %d had succeeded first", res.Done, len(res.Failed))
}

// liveBatches makes batches of n jobs of queue q, numbered on from 1:
// every laneEvery-th of them (each, at 1) a job of one of 50 lanes of
// route o, the others of route r.
func liveBatches(laneEvery int64) func(n int) pgstore.IngestBatch {
	lane := &pgstore.LanePolicy{Policy: "none", OnDead: "continue", GapTimeout: time.Minute, GapPolicy: "park"}
	offset := int64(0)
	return func(n int) pgstore.IngestBatch {
		var b pgstore.IngestBatch
		for range n {
			offset++
			j := pgstore.NewJob{Route: "r", Kind: "k", Queue: "q", DedupeKey: fmt.Sprint(offset), Payload: []byte(`{}`),
				MaxAttempts: 3, Topic: "t", Offset: offset}
			if offset%laneEvery == 0 {
				j.Route, j.Key, j.Lane, j.Topic = "o", fmt.Sprint("k", offset%50), lane, "to"
			}
			b.Jobs = append(b.Jobs, j)
		}
		return b
	}
}

// liveWorkers starts two workers that claim queue q's jobs and finish them
// (lane heads handing off to their lanes' next jobs), and an ingest that
// stores batch(30) every 5 ms, until the stop it returns, which waits for
// them. A worker's or the ingest's error fails the test.
func liveWorkers(t *testing.T, s *pgstore.Store, batch func(n int) pgstore.IngestBatch) (stop func()) {
	ctx := context.Background()
	done := make(chan struct{})
	var running sync.WaitGroup
	// every runs step after each wait until stop, or until step fails.
	every := func(wait time.Duration, step func() error) {
		running.Go(func() {
			for {
				select {
				case <-done:
					return
				case <-time.After(wait):
				}
				if err := step(); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	work := func() error {
		jobs, _, err := s.JobClaim(ctx, pgstore.JobClaimParams{Queue: "q", Limit: 20, Lease: time.Minute, MaxRuntime: time.Hour})
		for err == nil && len(jobs) > 0 {
			var outs []pgstore.Outcome
			for _, j := range jobs {
				o := pgstore.Outcome{ID: j.ID, Token: j.Token, State: jobstate.Succeeded, Lane: j.LaneRef()}
				if j.Lane {
					o.Handoff = &pgstore.Handoff{Queue: "q", Lease: time.Minute}
				}
				outs = append(outs, o)
			}
			var c pgstore.Completed
			c, err = s.JobComplete(ctx, outs)
			jobs = jobs[:0]
			for _, next := range c.Next {
				jobs = append(jobs, next)
			}
		}
		return err
	}
	every(0, work)
	every(0, work)
	every(5*time.Millisecond, func() error { _, err := s.IngestCommit(ctx, batch(30)); return err })
	return func() {
		close(done)
		running.Wait()
	}
}
