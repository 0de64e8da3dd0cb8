package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
	"github.com/switchyard-dev/switchyard/jobstate"
)

// A lane job's success through the completer leaves jobs for a batch row
// too, and its lane advances from the version the outcome carries: under
// policy newer, the next head is handed off, a version that arrived late
// (behind a newer running head) is skipped against the applied one, and a stale outcome of the kept
// head changes nothing.
func TestLaneSuccessesAreKeptAndAdvanceTheirLanes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	lane := &pgstore.LanePolicy{Policy: "newer", OnDead: "continue", GapTimeout: time.Minute, GapPolicy: "park"}
	ingest := func(offset int64, versions ...int64) {
		t.Helper()
		var b pgstore.IngestBatch
		for i, v := range versions {
			b.Jobs = append(b.Jobs, pgstore.NewJob{Route: "r", Kind: "k", Queue: "q", Key: "k", Version: &v,
				DedupeKey: fmt.Sprintf("v%d", v), Payload: []byte("{}"), MaxAttempts: 3, Topic: "t", Offset: offset + int64(i), Lane: lane})
		}
		if _, err := s.IngestCommit(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	ingest(0, 1, 3)
	heads, _, err := s.JobClaim(ctx, pgstore.JobClaimParams{Queue: "q", Limit: 3, Lease: time.Minute, MaxRuntime: time.Hour})
	if err != nil || len(heads) != 1 || *heads[0].Version != 1 {
		t.Fatalf("claim: %d jobs (%v); want the lane's head, version 1", len(heads), err)
	}
	v1 := heads[0]
	done, err := s.JobComplete(ctx, []pgstore.Outcome{{ID: v1.ID, Token: v1.Token, State: jobstate.Succeeded,
		Lane: v1.LaneRef(), Handoff: &pgstore.Handoff{Queue: "q", Lease: time.Minute}}})
	v3 := done.Next[v1.ID]
	if err != nil || !done.Applied[v1.Token] || v3 == nil || *v3.Version != 3 {
		t.Fatalf("complete version 1: %+v %v; want version 3 handed off", done, err)
	}
	ingest(2, 2) // late: behind the running version 3
	done, err = s.JobComplete(ctx, []pgstore.Outcome{{ID: v3.ID, Token: v3.Token, State: jobstate.Succeeded, Lane: v3.LaneRef()}})
	if err != nil || !done.Applied[v3.Token] {
		t.Fatalf("complete version 3: %+v %v", done, err)
	}
	// The stale outcome: version 1's attempt again, its job kept.
	if done, err := s.JobComplete(ctx, []pgstore.Outcome{{ID: v1.ID, Token: v1.Token, State: jobstate.Succeeded,
		Lane: v1.LaneRef()}}); err != nil || len(done.Applied) != 0 {
		t.Fatalf("stale outcome: %+v %v; want nothing applied", done, err)
	}
	var inJobs, kept []string
	var head *int64
	var last int64
	if err := s.Pool().QueryRow(ctx, `SELECT
		(SELECT array_agg(dedupe_key || ':' || state ORDER BY id) FROM jobs),
		(SELECT array_agg(dedupe_key || ':' || state ORDER BY id) FROM job_history h, unnest(h.jobs) j),
		(SELECT head_job_id FROM lanes WHERE route = 'r' AND key = 'k'),
		(SELECT last_version FROM lanes WHERE route = 'r' AND key = 'k')`).Scan(&inJobs, &kept, &head, &last); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(inJobs, []string{"v2:skipped"}) || !slices.Equal(kept, []string{"v1:succeeded", "v3:succeeded"}) ||
		head != nil || last != 3 {
		t.Fatalf("jobs %v, kept %v, lane head %v, last version %d; want [v2:skipped], [v1:succeeded v3:succeeded], free, 3",
			inJobs, kept, head, last)
	}
}

// A job that succeeds leaves jobs for a batch row of
// job_history (migration 0029), and every reader still finds it there:
// the status API with its result and payload, the listings (merged with
// jobs in id order, a page at a time, by key), the dedupe lookup and the
// dedupe itself, cancel (a conflict, not a miss), replay --rerun (which
// brings it back) and retention (which drops the batch and its keys).
// Retried and dead jobs stay in jobs.
func TestSucceededJobsAreKeptInBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	var recs []pgstore.NewJob
	for i := range 6 {
		recs = append(recs, pgstore.NewJob{Route: "r", Kind: "k", Queue: "q", DedupeKey: fmt.Sprintf("d%d", i),
			Key: fmt.Sprintf("cust-%d", i%2), Payload: fmt.Appendf(nil, `{"n":%d}`, i), MaxAttempts: 1,
			Topic: "t", Offset: int64(i)})
	}
	if res, err := s.IngestCommit(ctx, pgstore.IngestBatch{Jobs: recs}); err != nil || res.Inserted != 6 {
		t.Fatalf("ingest: %+v %v", res, err)
	}
	claimed, _, err := s.JobClaim(ctx, pgstore.JobClaimParams{Queue: "q", Limit: 6, Lease: time.Minute, MaxRuntime: time.Hour})
	if err != nil || len(claimed) != 6 {
		t.Fatalf("claim: %d %v", len(claimed), err)
	}
	slices.SortFunc(claimed, func(a, b *pgstore.Claimed) int { return int(a.ID - b.ID) })
	ids := make([]int64, 6)
	outs := make([]pgstore.Outcome, 6)
	for i, j := range claimed {
		ids[i] = j.ID
		outs[i] = pgstore.Outcome{ID: j.ID, Token: j.Token, State: jobstate.Succeeded}
	}
	outs[0].Result, outs[0].ResultType = []byte("done"), "text/plain"
	outs[1].State, outs[1].Error, outs[1].Delay = jobstate.Retrying, "503", time.Hour
	outs[2].State, outs[2].Error, outs[2].Reason = jobstate.Dead, "400", "permanent"
	stale := outs[5]
	stale.Token++
	if c, err := s.JobComplete(ctx, append(outs[:5:5], stale)); err != nil || len(c.Applied) != 5 || c.Applied[stale.Token] {
		t.Fatalf("complete: %v %v; want the five outcomes that hold their lease", c.Applied, err)
	}
	if c, err := s.JobComplete(ctx, outs[5:]); err != nil || len(c.Applied) != 1 {
		t.Fatalf("complete the last: %v %v", c.Applied, err)
	}
	var inJobs []int64
	var batches, kept int
	if err := s.Pool().QueryRow(ctx, `SELECT array_agg(id ORDER BY id) FROM jobs`).Scan(&inJobs); err != nil {
		t.Fatal(err)
	}
	if err := s.Pool().QueryRow(ctx, `SELECT count(*), sum(n) FROM job_history`).Scan(&batches, &kept); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(inJobs, ids[1:3]) || batches != 2 || kept != 4 {
		t.Fatalf("jobs holds %v (want the retried and the dead %v); job_history %d batches of %d jobs (want 2 of 4)",
			inJobs, ids[1:3], batches, kept)
	}

	// The status API.
	got, err := s.JobGetDetail(ctx, ids[0], pgstore.Groups{})
	if err != nil || got.State != jobstate.Succeeded || got.FinishedAt == nil || got.StartedAt == nil ||
		got.Attempts != 1 || string(got.Payload) != `{"n":0}` || got.Result == nil || string(got.Result.Base64) != "done" ||
		got.Source == nil || got.Source.Offset != 0 {
		t.Fatalf("detail of a kept job: %+v %v", got, err)
	}
	if ct, data, err := s.JobResult(ctx, ids[0]); err != nil || ct != "text/plain" || string(data) != "done" {
		t.Fatalf("result: %q %q %v", ct, data, err)
	}
	if _, err := s.JobGet(ctx, ids[5]+1000); !errors.Is(err, pgstore.ErrNotFound) {
		t.Fatalf("a job that never was: %v, want ErrNotFound", err)
	}

	// The listings, in id order across both tables, a page at a time.
	var listed []int64
	for after := int64(0); ; {
		page, err := s.JobList(ctx, pgstore.JobFilter{After: after, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, j := range page {
			listed = append(listed, j.ID)
		}
		after = page[len(page)-1].ID
	}
	if !slices.Equal(listed, ids) {
		t.Fatalf("pages of 2: %v, want %v", listed, ids)
	}
	list := func(f pgstore.JobFilter) []int64 {
		t.Helper()
		f.Limit = 10
		page, err := s.JobList(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, j := range page {
			got = append(got, j.ID)
		}
		return got
	}
	if got, want := list(pgstore.JobFilter{State: jobstate.Succeeded}), []int64{ids[0], ids[3], ids[4], ids[5]}; !slices.Equal(got, want) {
		t.Fatalf("succeeded: %v, want %v", got, want)
	}
	if got, want := list(pgstore.JobFilter{Key: "cust-0"}), []int64{ids[0], ids[2], ids[4]}; !slices.Equal(got, want) {
		t.Fatalf("key cust-0: %v, want %v", got, want)
	}
	if got := list(pgstore.JobFilter{Queue: "other"}); len(got) != 0 {
		t.Fatalf("queue other: %v, want none", got)
	}

	// Dedupe: the key still holds, and finds the kept job.
	if res, err := s.IngestCommit(ctx, pgstore.IngestBatch{Jobs: recs[3:4]}); err != nil || res.Inserted != 0 || res.Duplicates != 1 {
		t.Fatalf("a replayed record of a kept job: %+v %v; want a duplicate", res, err)
	}
	if j, err := s.JobFind(ctx, "r", pgstore.OriginKafka, "d3"); err != nil || j.ID != ids[3] || j.State != jobstate.Succeeded {
		t.Fatalf("find d3: %+v %v", j, err)
	}
	if err := s.JobCancel(ctx, ids[3], "test"); !errors.Is(err, pgstore.ErrConflict) {
		t.Fatalf("cancel a kept job: %v, want ErrConflict", err)
	}

	// replay --rerun brings a kept job back to run, and out of its batch.
	if n, err := s.JobRerun(ctx, "r", []string{"d3"}); err != nil || n != 1 {
		t.Fatalf("rerun: %d %v", n, err)
	}
	if j, err := s.JobGet(ctx, ids[3]); err != nil || j.State != jobstate.Queued || j.Attempts != 0 {
		t.Fatalf("rerun job: %+v %v", j, err)
	}
	if err := s.Pool().QueryRow(ctx, `SELECT count(*), sum(n) FROM job_history`).Scan(&batches, &kept); err != nil {
		t.Fatal(err)
	}
	if n := len(list(pgstore.JobFilter{})); n != 6 || kept != 3 {
		t.Fatalf("after the rerun: %d jobs listed, %d kept; want 6 and 3", n, kept)
	}

	// Retention drops whole batches and their keys.
	if _, err := s.Pool().Exec(ctx, `UPDATE job_history SET finished_at = now() - interval '30 days'`); err != nil {
		t.Fatal(err)
	}
	if n, err := s.JobPrune(ctx, string(jobstate.Succeeded), 24*time.Hour, 100); err != nil || n != 3 {
		t.Fatalf("prune: %d %v; want the 3 kept jobs", n, err)
	}
	var keys int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM job_keys`).Scan(&keys); err != nil || keys != 3 {
		t.Fatalf("job_keys: %d %v; want the 3 jobs left in jobs", keys, err)
	}
	if _, err := s.JobGet(ctx, ids[0]); !errors.Is(err, pgstore.ErrNotFound) {
		t.Fatalf("a pruned job: %v, want ErrNotFound", err)
	}
}

// JobList pages through jobs and job_history as one id-ordered list,
// whatever the batches' spans: completions of random subsets make
// batches whose id spans overlap each other and the jobs left in jobs.
// Every page size and filter must list exactly what all_jobs holds.
func TestJobListMergesOverlappingBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	rng := rand.New(rand.NewPCG(12, 5))
	var recs []pgstore.NewJob
	for i := range 300 {
		route := fmt.Sprintf("r%d", i%3)
		if i%50 == 0 {
			route = "rare" // sparse: its pages need a window wider than the first
		}
		recs = append(recs, pgstore.NewJob{Route: route, Kind: "k", Queue: fmt.Sprintf("q%d", i%2),
			DedupeKey: fmt.Sprint(i), Key: fmt.Sprintf("cust-%d", i%7), Payload: []byte("{}"), MaxAttempts: 1,
			Topic: "t", Offset: int64(i)})
	}
	if _, err := s.IngestCommit(ctx, pgstore.IngestBatch{Jobs: recs}); err != nil {
		t.Fatal(err)
	}
	var claimed []*pgstore.Claimed
	for _, q := range []string{"q0", "q1"} {
		jobs, _, err := s.JobClaim(ctx, pgstore.JobClaimParams{Queue: q, Limit: 300, Lease: time.Minute, MaxRuntime: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		claimed = append(claimed, jobs...)
	}
	rng.Shuffle(len(claimed), func(i, j int) { claimed[i], claimed[j] = claimed[j], claimed[i] })
	// A tenth stay running; the rest end in batches of 1 to 40 random
	// jobs, mostly succeeding.
	for rest := claimed[len(claimed)/10:]; len(rest) > 0; {
		n := min(len(rest), 1+rng.IntN(40))
		var outs []pgstore.Outcome
		for _, j := range rest[:n] {
			o := pgstore.Outcome{ID: j.ID, Token: j.Token, State: jobstate.Succeeded}
			if rng.IntN(8) == 0 {
				o.State, o.Error, o.Reason = jobstate.Dead, "x", "permanent"
			}
			outs = append(outs, o)
		}
		if _, err := s.JobComplete(ctx, outs); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	for _, f := range []struct {
		filter pgstore.JobFilter
		where  string
	}{
		{pgstore.JobFilter{}, `true`},
		{pgstore.JobFilter{State: jobstate.Succeeded}, `state = 'succeeded'`},
		{pgstore.JobFilter{State: jobstate.Running}, `state = 'running'`},
		{pgstore.JobFilter{Queue: "q1"}, `queue = 'q1'`},
		{pgstore.JobFilter{Route: "r2", State: jobstate.Succeeded}, `route = 'r2' AND state = 'succeeded'`},
		{pgstore.JobFilter{Key: "cust-3"}, `key = 'cust-3'`},
		{pgstore.JobFilter{Route: "rare"}, `route = 'rare'`},
	} {
		var want []int64
		if err := s.Pool().QueryRow(ctx, `SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM all_jobs WHERE `+f.where).Scan(&want); err != nil {
			t.Fatal(err)
		}
		for _, limit := range []int{1, 3, 7, 50, 1000} {
			var got []int64
			page := f.filter
			page.Limit = limit
			for {
				rows, err := s.JobList(ctx, page)
				if err != nil {
					t.Fatal(err)
				}
				for _, j := range rows {
					got = append(got, j.ID)
				}
				if len(rows) < limit {
					break
				}
				page.After = rows[len(rows)-1].ID
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%s, pages of %d: %d jobs listed, want %d (%v vs %v)", f.where, limit, len(got), len(want), got, want)
			}
		}
	}
}

// A cancel that waits on a job's row while a completion moves the job
// to job_history answers as the job ended: a conflict. It must not read
// the job as it was before the completion (running) and report a cancel
// that did not happen.
func TestCancelRacingAKeptCompletionIsAConflict(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	if _, err := s.IngestCommit(ctx, pgstore.IngestBatch{Jobs: []pgstore.NewJob{{Route: "r", Kind: "k", Queue: "q",
		DedupeKey: "d", Payload: []byte("{}"), MaxAttempts: 1, Topic: "t"}}}); err != nil {
		t.Fatal(err)
	}
	j := testenv.ClaimOne(t, s, "q")
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, pgstore.CompleteSQL, []int64{j.ID}, []int64{j.Token}, []string{"succeeded"}, []string{""},
		[]*string{nil}, []int64{0}, [][]byte{nil}, []*string{nil}, []*string{nil}, []int64{}); err != nil {
		t.Fatal(err)
	}
	cancelled := make(chan error, 1)
	go func() { cancelled <- s.JobCancel(ctx, j.ID, "test") }()
	// The cancel reaches the row's lock and waits for the completion.
	testenv.WaitBlockedBy(t, s, tx, "the cancel to wait on the row")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-cancelled; !errors.Is(err, pgstore.ErrConflict) {
		t.Fatalf("cancel after the job succeeded: %v, want ErrConflict", err)
	}
	if got, err := s.JobGet(ctx, j.ID); err != nil || got.State != jobstate.Succeeded {
		t.Fatalf("job: %+v %v, want succeeded", got, err)
	}
	if n := testenv.Count(t, s, `SELECT count(*) FROM outcome_tally`); n != 0 {
		t.Fatalf("%d tallied ends; a cancel that came too late counts no attempt", n)
	}
}

// A cancel counts the attempt it ends (outcome_tally's cancelled, in its
// own transaction): a running job's, and not a queued job's, which ran
// no attempt.
func TestCancelTalliesTheAttemptItEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	var b pgstore.IngestBatch
	for _, d := range []string{"a", "b"} {
		b.Jobs = append(b.Jobs, pgstore.NewJob{Route: "r", Kind: "k", Queue: "q", DedupeKey: d, Payload: []byte("{}"),
			MaxAttempts: 3, Topic: "t"})
	}
	if _, err := s.IngestCommit(ctx, b); err != nil {
		t.Fatal(err)
	}
	running := testenv.ClaimOne(t, s, "q")
	var queued int64
	if err := s.Pool().QueryRow(ctx, `SELECT id FROM jobs WHERE state = 'queued'`).Scan(&queued); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{running.ID, queued} {
		if err := s.JobCancel(ctx, id, "test"); err != nil {
			t.Fatal(err)
		}
	}
	ends, err := s.OutcomeTallyTake(ctx)
	if err != nil || len(ends) != 1 || ends[[2]string{"k", "cancelled"}] != 1 {
		t.Fatalf("tallied ends %v (%v), want the running job's attempt cancelled alone", ends, err)
	}
}

// ANALYZE of job_history leaves its jobs column out (migration 0030):
// its element statistics took seconds of a core for a sample of the
// table's rows, and no statement plans by them. The columns readers
// filter by keep theirs.
func TestHistoryAnalyzeSkipsItsJobsArray(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	if _, err := s.IngestCommit(ctx, pgstore.IngestBatch{Jobs: []pgstore.NewJob{
		{Route: "r", Kind: "k", Queue: "q", DedupeKey: "d1", Payload: []byte(`{}`), MaxAttempts: 1},
		{Route: "r", Kind: "k", Queue: "q", DedupeKey: "d2", Payload: []byte(`{}`), MaxAttempts: 1}}}); err != nil {
		t.Fatal(err)
	}
	claimed, _, err := s.JobClaim(ctx, pgstore.JobClaimParams{Queue: "q", Limit: 2, Lease: time.Minute, MaxRuntime: time.Hour})
	if err != nil || len(claimed) != 2 {
		t.Fatalf("claim: %d %v", len(claimed), err)
	}
	var outs []pgstore.Outcome
	for _, j := range claimed {
		outs = append(outs, pgstore.Outcome{ID: j.ID, Token: j.Token, State: jobstate.Succeeded})
	}
	if _, err := s.JobComplete(ctx, outs); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `ANALYZE job_history`); err != nil {
		t.Fatal(err)
	}
	var analyzed []string
	if err := s.Pool().QueryRow(ctx, `SELECT array_agg(attname::text ORDER BY attname) FROM pg_stats
		WHERE schemaname = current_schema() AND tablename = 'job_history'`).Scan(&analyzed); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(analyzed, "jobs") || !slices.Contains(analyzed, "finished_at") || !slices.Contains(analyzed, "queues") {
		t.Fatalf("job_history's columns with statistics: %v; want finished_at and queues, not jobs", analyzed)
	}
}

// An operator's query names the schema rather than setting search_path:
// all_jobs, and jobs_by_id, answer it, with a job still in jobs and one
// kept in job_history. They failed ("function job_as_view(...) does not
// exist"): job_as_view's body was looked up by name when the query ran.
func TestAllJobsAnswersASchemaQualifiedQuery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testenv.Schema(t)
	s := testenv.Store(t, schema)
	var recs []pgstore.NewJob
	for i := range 2 {
		recs = append(recs, pgstore.NewJob{Route: "r", Kind: "k", Queue: "q", DedupeKey: fmt.Sprintf("d%d", i),
			Payload: []byte(`{}`), MaxAttempts: 1, Topic: "t", Offset: int64(i)})
	}
	if _, err := s.IngestCommit(ctx, pgstore.IngestBatch{Jobs: recs}); err != nil {
		t.Fatal(err)
	}
	kept := testenv.ClaimOne(t, s, "q")
	if c, err := s.JobComplete(ctx, []pgstore.Outcome{{ID: kept.ID, Token: kept.Token, State: jobstate.Succeeded}}); err != nil ||
		!c.Applied[kept.Token] {
		t.Fatalf("complete: %v %v", c.Applied, err)
	}
	conn, err := pgx.Connect(ctx, testenv.DatabaseURL(t)) // the server's search_path, not the schema
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	ident := pgx.Identifier{schema}.Sanitize()
	var all, byID int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+ident+`.all_jobs`).Scan(&all); err != nil || all != 2 {
		t.Errorf("SELECT count(*) FROM %s.all_jobs: %d, %v; want 2", schema, all, err)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+ident+`.jobs_by_id($1)`, []int64{kept.ID, kept.ID + 1}).Scan(&byID); err != nil ||
		byID != 2 {
		t.Errorf("SELECT count(*) FROM %s.jobs_by_id(…): %d, %v; want 2", schema, byID, err)
	}
}
