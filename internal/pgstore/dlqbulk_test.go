package pgstore_test

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/internal/bulk"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
	"github.com/switchyard-dev/switchyard/jobstate"
)

// A bulk re-drive's or discard's chunk (one transaction for the entries
// of jobs that head no lane, the others each alone) does to every entry what
// re-driving or discarding each alone does: the same jobs, entries, lane
// heads and audit entries, and the same failure for each entry it
// cannot take, in every state an entry can be in.
func TestDLQChunksAgreeWithEachAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	actions := []struct {
		name string
		many func(*pgstore.Store) func(context.Context, []int64) ([]bulk.Failure, []int64, error)
		one  func(*pgstore.Store) func(context.Context, int64) error
	}{
		{"re-drive",
			func(s *pgstore.Store) func(context.Context, []int64) ([]bulk.Failure, []int64, error) {
				return func(ctx context.Context, ids []int64) ([]bulk.Failure, []int64, error) {
					return s.DLQRedriveMany(ctx, ids, "test")
				}
			},
			func(s *pgstore.Store) func(context.Context, int64) error {
				return func(ctx context.Context, id int64) error { _, err := s.DLQRedrive(ctx, id, "test"); return err }
			}},
		{"discard",
			func(s *pgstore.Store) func(context.Context, []int64) ([]bulk.Failure, []int64, error) {
				return func(ctx context.Context, ids []int64) ([]bulk.Failure, []int64, error) {
					return s.DLQDiscardMany(ctx, ids, "test")
				}
			},
			func(s *pgstore.Store) func(context.Context, int64) error {
				return func(ctx context.Context, id int64) error { return s.DLQDiscard(ctx, id, "test") }
			}},
	}
	type outcome struct {
		Errs, Jobs, Entries, Heads, Audit map[string]string
	}
	for _, a := range actions {
		run := func(chunk bool) outcome {
			s := testenv.MigratedStore(t)
			name, ids := named(dlqFixture(t, s))
			o := outcome{Errs: map[string]string{}}
			act := bulk.Chunked(a.many(s), a.one(s))
			if !chunk {
				act = func(ctx context.Context, ids []int64) (failed []bulk.Failure, _ error) {
					for _, id := range ids {
						if err := a.one(s)(ctx, id); err != nil {
							failed = append(failed, bulk.Failure{ID: id, Error: err.Error()})
						}
					}
					return failed, nil
				}
			}
			failed, err := act(ctx, ids)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range failed {
				o.Errs[name[f.ID]] = f.Error
			}
			o.Jobs = testenv.Pairs(t, s, `SELECT id::text, concat_ws(' ', state, attempts, finished_at IS NULL) FROM jobs`)
			o.Entries = testenv.Pairs(t, s, `SELECT id::text, concat_ws(' ', redriven_by, redrive_job_id) FROM dlq_entries`)
			o.Heads = testenv.Pairs(t, s, `SELECT key, coalesce(head_job_id::text, 'none') FROM lanes`)
			o.Audit = testenv.Pairs(t, s, `SELECT target, concat_ws(' ', actor, action, detail::text) FROM audit_log`)
			return o
		}
		alone, chunked := run(false), run(true)
		if !reflect.DeepEqual(alone, chunked) {
			t.Fatalf("%s: a chunk differs from each entry alone:\n alone  %+v\n chunk  %+v", a.name, alone, chunked)
		}
		// And the fixture holds what the comparison needs: every entry
		// taken but those that cannot be, the lane's moved on.
		want := map[string]bool{"redriven": true, "none": true}
		if a.name == "re-drive" {
			want["record"], want["gone"], want["alive"] = true, true, true
		}
		if len(alone.Errs) != len(want) || len(alone.Audit) != 9-len(want) { // 9 entries, "none" among them
			t.Errorf("%s each alone: failures %v, audit %v", a.name, alone.Errs, alone.Audit)
		}
		for n := range alone.Errs {
			if !want[n] {
				t.Errorf("%s each alone: %s failed: %s", a.name, n, alone.Errs[n])
			}
		}
		// A chunk leaves alone only the lane's blocking head (its action
		// moves the lane) and, to re-drive, the record (decoded again).
		s := testenv.MigratedStore(t)
		name, ids := named(dlqFixture(t, s))
		_, left, err := a.many(s)(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		got := testenv.Names(name, left)
		wantAlone := []string{"lane-blocked"}
		if a.name == "re-drive" {
			wantAlone = []string{"lane-blocked", "record"}
		}
		if !slices.Equal(got, wantAlone) {
			t.Errorf("%s: a chunk left %v alone, want %v", a.name, got, wantAlone)
		}
	}
}

// A bulk re-drive of lanes' dead jobs, in chunks, beside workers that
// hand the same lanes' heads off and an ingest into them: no deadlock or
// other error on either side, and every entry is re-driven once. Each
// lane's dead jobs (on_dead: continue, so none heads its lane) go in
// their chunk's transaction, which then locks their lanes to promote
// them.
func TestDLQRedriveOfLanesBesideLiveWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	batch := liveBatches(1) // lanes' jobs only
	if _, err := s.IngestCommit(ctx, batch(600)); err != nil {
		t.Fatal(err)
	}
	for dead := 0; dead < 500; { // the heads die, and their lanes move on
		jobs, _, err := s.JobClaim(ctx, pgstore.JobClaimParams{Queue: "q", Limit: 50, Lease: time.Minute, MaxRuntime: time.Hour})
		if err != nil || len(jobs) == 0 {
			t.Fatalf("claim: %d jobs, %v", len(jobs), err)
		}
		var outs []pgstore.Outcome
		for _, j := range jobs {
			outs = append(outs, pgstore.Outcome{ID: j.ID, Token: j.Token, State: jobstate.Dead, Reason: "permanent", Error: "boom", Lane: j.LaneRef()})
		}
		if _, err := s.JobComplete(ctx, outs); err != nil {
			t.Fatal(err)
		}
		dead += len(jobs)
	}
	rows, _ := s.Pool().Query(ctx, `SELECT id FROM dlq_entries ORDER BY id`)
	entries, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	stop := liveWorkers(t, s, batch)
	act := bulk.Chunked(func(ctx context.Context, ids []int64) ([]bulk.Failure, []int64, error) {
		return s.DLQRedriveMany(ctx, ids, "test")
	}, func(ctx context.Context, id int64) error { _, err := s.DLQRedrive(ctx, id, "test"); return err })
	var failed []bulk.Failure
	for chunk := range slices.Chunk(entries, bulk.Chunk) {
		f, err := act(ctx, chunk)
		if err != nil {
			t.Errorf("chunk from entry %d: %v", chunk[0], err)
		}
		failed = append(failed, f...)
	}
	stop()
	if len(failed) > 0 {
		t.Errorf("%d entries not re-driven, the first: %+v", len(failed), failed[0])
	}
	if n := testenv.Count(t, s, `SELECT count(*) FROM dlq_entries WHERE redrive_job_id IS NOT NULL`); n != len(entries) {
		t.Errorf("%d of %d entries re-driven", n, len(entries))
	}
	if n := testenv.Count(t, s, `SELECT count(DISTINCT target) FROM audit_log WHERE action = 'redrive'`); n != len(entries) {
		t.Errorf("%d entries audited as re-driven, want %d", n, len(entries))
	}
	t.Logf("re-drove %d dead lane jobs beside the workers", len(entries))
}

// named is a fixture's items by id, and their ids in order.
func named(items map[string]int64) (map[int64]string, []int64) {
	name := map[int64]string{}
	var ids []int64
	for n, id := range items {
		name[id] = n
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return name, ids
}

// dlqFixture parks an entry in every state a bulk action meets, and names
// their ids: two dead jobs of no lane, a poison record, an entry re-driven
// already, a lane's dead head that its lane moved on past (its next job
// the head now), one that blocks its lane (on_dead: block, a job waiting
// behind it), an entry whose job is gone, one whose job is no longer
// dead, and an id no entry has.
func dlqFixture(t *testing.T, s *pgstore.Store) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	entries := map[string]int64{}
	lane := &pgstore.LanePolicy{Policy: "none", OnDead: "continue", GapTimeout: time.Minute, GapPolicy: "park"}
	n := int64(0)
	dead := func(name, queue string, lanePolicy *pgstore.LanePolicy) int64 {
		n++
		j := pgstore.NewJob{Route: "r-" + queue, Kind: "k", Queue: queue, Key: "k1", DedupeKey: name, Payload: []byte(`{}`),
			MaxAttempts: 3, Topic: "t-" + queue, Offset: n, Lane: lanePolicy}
		if _, err := s.IngestCommit(ctx, pgstore.IngestBatch{Jobs: []pgstore.NewJob{j}}); err != nil {
			t.Fatal(err)
		}
		c := testenv.ClaimOne(t, s, queue)
		if _, err := s.JobComplete(ctx, []pgstore.Outcome{{ID: c.ID, Token: c.Token, State: jobstate.Dead, Reason: "permanent",
			Error: "boom", Lane: c.LaneRef()}}); err != nil {
			t.Fatal(err)
		}
		entries[name] = dlqEntryOf(t, s, c.ID)
		return c.ID
	}
	dead("dead1", "q", nil)
	dead("dead2", "q", nil)
	redriven := dead("redriven", "q", nil)
	if _, err := s.DLQRedrive(ctx, entries["redriven"], "fixture"); err != nil {
		t.Fatal(err)
	}
	c := testenv.ClaimOne(t, s, "q") // the re-driven job, so that the claims below take their own
	if c.ID != redriven {
		t.Fatalf("claimed %d, want the re-driven job %d", c.ID, redriven)
	}
	gone := dead("gone", "q", nil)
	alive := dead("alive", "q", nil)
	if _, err := s.Pool().Exec(ctx, `UPDATE jobs SET state = 'queued', scheduled_at = now() + interval '1 hour' WHERE id = $1`, alive); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `DELETE FROM jobs WHERE id = $1`, gone); err != nil {
		t.Fatal(err)
	}
	dead("lane-head", "oq", lane)
	if _, err := s.IngestCommit(ctx, pgstore.IngestBatch{Jobs: []pgstore.NewJob{{Route: "r-oq", Kind: "k", Queue: "oq", Key: "k1",
		DedupeKey: "lane-next", Payload: []byte(`{}`), MaxAttempts: 3, Topic: "t-oq", Offset: 100, Lane: lane}}}); err != nil {
		t.Fatal(err)
	}
	block := *lane
	block.OnDead = "block"
	dead("lane-blocked", "bq", &block)
	if _, err := s.IngestCommit(ctx, pgstore.IngestBatch{Jobs: []pgstore.NewJob{{Route: "r-bq", Kind: "k", Queue: "bq", Key: "k1",
		DedupeKey: "lane-blocked-next", Payload: []byte(`{}`), MaxAttempts: 3, Topic: "t-bq", Offset: 101, Lane: &block}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.IngestCommit(ctx, pgstore.IngestBatch{Poison: []pgstore.Poison{{Reason: "decode", Route: "r-q", Queue: "q",
		Error: "not JSON", Payload: []byte("{"), Topic: "t-q", Offset: 200}}}); err != nil {
		t.Fatal(err)
	}
	var record int64
	if err := s.Pool().QueryRow(ctx, `SELECT id FROM dlq_entries WHERE job_id IS NULL`).Scan(&record); err != nil {
		t.Fatal(err)
	}
	entries["record"] = record
	if _, err := s.Pool().Exec(ctx, `DELETE FROM audit_log`); err != nil {
		t.Fatal(err)
	}
	entries["none"] = 1 << 40
	return entries
}
