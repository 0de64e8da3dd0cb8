package pgstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
	"github.com/switchyard-dev/switchyard/jobstate"
)

// laneEnd is one way a lane's head ends: what it does to the head, as the
// real operation does it. ids are the lane heads it changed.
type laneEnd struct {
	name string
	// dead makes the head dead (permanent) before the end; the ends that
	// act on a dead head (re-drive, discard) need it.
	dead bool
	// rescue: the head is claimed under a lease that expires, or (expire)
	// not claimed and past its deadline; JobRescue ends it.
	rescue, expire bool
	run            func(t *testing.T, s *pgstore.Store, head *pgstore.Claimed)
	discards       bool // the end is a discard: lanes_advance's p_discarded
	// outcome and reason, for an attempt's end: its state and DLQ reason. The batched
	// path is the completer's (JobComplete); the row-by-row path is the
	// same statement with the trigger on.
	outcome jobstate.State
	reason  string
}

// complete ends a claimed head through the completer.
func complete(t *testing.T, s *pgstore.Store, head *pgstore.Claimed, state jobstate.State, reason string) {
	t.Helper()
	c, err := s.JobComplete(context.Background(), []pgstore.Outcome{{ID: head.ID, Token: head.Token,
		State: state, Reason: reason, Error: "boom", Lane: head.LaneRef()}})
	if err != nil || !c.Applied[head.Token] {
		t.Fatalf("complete %s: %v %v", state, c.Applied, err)
	}
}

// completeRowByRow is complete's statement without the completer's
// lanes_advance: the trigger advances the lane.
func completeRowByRow(t *testing.T, s *pgstore.Store, head *pgstore.Claimed, state jobstate.State, reason string) {
	t.Helper()
	tag, err := s.Pool().Exec(context.Background(), pgstore.CompleteSQL, []int64{head.ID}, []int64{head.Token},
		[]string{string(state)}, []string{reason}, []string{"boom"}, []int64{0}, [][]byte{nil}, []*string{nil}, []*string{nil}, []int64{})
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("complete %s row by row: %v %v", state, tag, err)
	}
}

var laneEnds = []laneEnd{
	{name: "succeeded", outcome: jobstate.Succeeded},
	{name: "retry", outcome: jobstate.Retrying},
	{name: "dead", outcome: jobstate.Dead, reason: "permanent"},
	{name: "rescued", rescue: true},
	{name: "rescued to dead", rescue: true},
	{name: "expired", expire: true},
	{name: "cancelled", run: func(t *testing.T, s *pgstore.Store, head *pgstore.Claimed) {
		if err := s.JobCancel(context.Background(), head.ID, "test"); err != nil {
			t.Fatal(err)
		}
	}},
	{name: "applied", run: func(t *testing.T, s *pgstore.Store, head *pgstore.Claimed) {
		err := s.JobApply(context.Background(), head.ID, head.Token, head.Version, func(context.Context, pgx.Tx) error { return nil })
		if err != nil && err != pgstore.ErrStale {
			t.Fatal(err)
		}
	}},
	{name: "re-driven", dead: true, run: func(t *testing.T, s *pgstore.Store, head *pgstore.Claimed) {
		if _, err := s.DLQRedrive(context.Background(), dlqEntryOf(t, s, head.ID), "test"); err != nil {
			t.Fatal(err)
		}
	}},
	{name: "discarded", dead: true, discards: true, run: func(t *testing.T, s *pgstore.Store, head *pgstore.Claimed) {
		if err := s.DLQDiscard(context.Background(), dlqEntryOf(t, s, head.ID), "test"); err != nil {
			t.Fatal(err)
		}
	}},
}

// dlqEntryOf is the parked DLQ entry of a job (its re-driven ones are
// history).
func dlqEntryOf(t *testing.T, s *pgstore.Store, jobID int64) int64 {
	t.Helper()
	var id int64
	if err := s.Pool().QueryRow(context.Background(), `SELECT id FROM dlq_entries WHERE job_id = $1 AND redriven_at IS NULL`,
		jobID).Scan(&id); err != nil {
		t.Fatalf("DLQ entry of job %d: %v", jobID, err)
	}
	return id
}

// lanePaths are the two ways a lane change takes effect: row by row (the
// trigger, as every path but the completer) and batched (the trigger
// switched off, lanes_advance called on the ended heads, as the
// completer does).
type lanePath struct {
	store   *pgstore.Store
	batched bool
}

// TestLanePathsAgree: for every way a head ends, under every lane policy
// and on_dead, the row-by-row path and the batched path leave the same
// lanes rows and job states. They are one function (functions.sql's
// lanes_advance); this holds the trigger's switch and its callers to it.
func TestLanePathsAgree(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schemaA, schemaB := testenv.Schema(t), testenv.Schema(t)
	batched, err := pgstore.OpenBatched(ctx, pgstore.Config{URL: testenv.DatabaseURL(t), Schema: schemaB, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(batched.Close)
	paths := []lanePath{{testenv.Store(t, schemaA), false}, {batched, true}}

	type scenario struct {
		route string
		end   laneEnd
	}
	var scenarios []scenario
	for _, policy := range []string{"none", "newer", "strict"} {
		for _, onDead := range []string{"continue", "block"} {
			for _, end := range laneEnds {
				if end.dead && onDead == "continue" {
					continue // a dead head under continue has left its lane already
				}
				scenarios = append(scenarios, scenario{fmt.Sprintf("%s/%s/%s", policy, onDead, end.name), end})
			}
		}
	}
	// The same lanes in both schemas: a head (version 1) and behind it a
	// stale duplicate, the next version, and one after a gap.
	for _, p := range paths {
		var b pgstore.IngestBatch
		for i, sc := range scenarios {
			policy, onDead, _ := strings.Cut(sc.route, "/")
			onDead, _, _ = strings.Cut(onDead, "/")
			lane := &pgstore.LanePolicy{Policy: policy, OnDead: onDead, GapTimeout: time.Hour, GapPolicy: "park"}
			attempts := 3
			if sc.end.name == "rescued to dead" {
				attempts = 1
			}
			var deadline *time.Time
			if sc.end.expire {
				past := time.Now().Add(-time.Hour)
				deadline = &past
			}
			for j, v := range []int64{1, 1, 2, 4} {
				var version *int64
				if policy != "none" {
					version = &v
				}
				b.Jobs = append(b.Jobs, pgstore.NewJob{Route: sc.route, Kind: "k", Queue: fmt.Sprintf("q%d", i), Key: "key",
					Version: version, DedupeKey: fmt.Sprint(j), Payload: []byte("{}"), MaxAttempts: attempts,
					Deadline: deadline, Topic: "t", Offset: int64(i*10 + j), Lane: lane})
			}
		}
		if _, err := p.store.IngestCommit(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	// Each scenario's head, claimed (or not, to expire) in both schemas.
	heads := make([][]*pgstore.Claimed, len(paths))
	for pi, p := range paths {
		for i, sc := range scenarios {
			if sc.end.expire {
				heads[pi] = append(heads[pi], &pgstore.Claimed{ID: headOf(t, p.store, sc.route)})
				continue
			}
			lease := time.Hour
			if sc.end.rescue {
				lease = time.Millisecond
			}
			jobs, _, err := p.store.JobClaim(ctx, pgstore.JobClaimParams{Queue: fmt.Sprintf("q%d", i), Limit: 1,
				Lease: lease, MaxRuntime: time.Hour})
			if err != nil || len(jobs) != 1 {
				t.Fatalf("%s: claim: %d jobs, %v", sc.route, len(jobs), err)
			}
			heads[pi] = append(heads[pi], jobs[0])
			if sc.end.dead {
				complete(t, p.store, jobs[0], jobstate.Dead, "permanent")
			}
		}
	}
	// The ends, in the same order in both schemas.
	for pi, p := range paths {
		var rescued []int64
		for i, sc := range scenarios {
			head := heads[pi][i]
			switch {
			case sc.end.rescue || sc.end.expire:
				rescued = append(rescued, head.ID)
			case sc.end.outcome != "" && p.batched:
				complete(t, p.store, head, sc.end.outcome, sc.end.reason)
			case sc.end.outcome != "":
				completeRowByRow(t, p.store, head, sc.end.outcome, sc.end.reason)
			default:
				sc.end.run(t, p.store, head)
				if p.batched {
					advance(t, p.store, []int64{head.ID}, sc.end.discards)
				}
			}
		}
		leased := 0
		for _, sc := range scenarios {
			if sc.end.rescue {
				leased++
			}
		}
		testenv.Eventually(t, 10*time.Second, "leases to expire", func() bool {
			var n int
			_ = p.store.Pool().QueryRow(ctx, `SELECT count(*) FROM jobs WHERE state = 'running' AND lease_expires_at < now()`).Scan(&n)
			return n == leased
		})
		if _, err := p.store.JobRescue(ctx, 1000, nil); err != nil {
			t.Fatal(err)
		}
		if p.batched {
			advance(t, p.store, rescued, false)
		}
	}
	a, b := laneSnapshot(t, paths[0].store), laneSnapshot(t, paths[1].store)
	if len(a) != len(scenarios) {
		t.Fatalf("%d lanes, want %d", len(a), len(scenarios))
	}
	for route, rowA := range a {
		if rowB := b[route]; rowA != rowB {
			t.Errorf("%s:\n  row by row: %s\n  batched:    %s", route, rowA, rowB)
		}
	}
}

func headOf(t *testing.T, s *pgstore.Store, route string) int64 {
	t.Helper()
	var id int64
	if err := s.Pool().QueryRow(context.Background(), `SELECT head_job_id FROM lanes WHERE route = $1`, route).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// advance calls lanes_advance as the completer does (and discard, with
// the discarded heads).
func advance(t *testing.T, s *pgstore.Store, ids []int64, discarded bool) {
	t.Helper()
	disc := []int64{}
	if discarded {
		disc = ids
	}
	if _, err := s.Pool().Exec(context.Background(), `SELECT lanes_advance($1, p_discarded => $2)`, ids, disc); err != nil {
		t.Fatal(err)
	}
}

// laneSnapshot is, per lane (by route), its row and its jobs' states in
// offset order.
func laneSnapshot(t *testing.T, s *pgstore.Store) map[string]string {
	t.Helper()
	rows, err := s.Pool().Query(context.Background(), `
		SELECT l.route, format('head=%s last=%s passed=%s blocked=%s gap=%s jobs=%s', l.head_job_id, l.last_version,
			l.passed_version, l.blocked,
			l.gap_since IS NOT NULL,
			(SELECT string_agg(j.state || ':' || j.attempts, ',' ORDER BY j.src_offset) FROM all_jobs j WHERE j.route = l.route))
		FROM lanes l`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var route, row string
	if _, err := pgx.ForEachRow(rows, []any{&route, &row}, func() error { out[route] = row; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// Discarding the dead head that blocks a strict lane lets the lane move
// on: its next version runs, rather than waiting out gap_timeout for the
// discarded version and then being parked (or run) by gap_policy. A
// strict lane counts a dead head's version as passed, as it does for one
// that ends under on_dead: continue.
func TestStrictLaneDiscardLetsTheNextVersionRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	ingestStrict(t, s, "block", 1, 2, 3)
	complete(t, s, testenv.ClaimOne(t, s, "q"), jobstate.Succeeded, "")
	v2 := testenv.ClaimOne(t, s, "q")
	complete(t, s, v2, jobstate.Dead, "permanent")
	if err := s.DLQDiscard(ctx, dlqEntryOf(t, s, v2.ID), "test"); err != nil {
		t.Fatal(err)
	}
	var state string
	var gap bool
	if err := s.Pool().QueryRow(ctx, `SELECT j.state, l.gap_since IS NOT NULL FROM jobs j JOIN lanes l USING (route, key)
		WHERE j.version = 3`).Scan(&state, &gap); err != nil {
		t.Fatal(err)
	}
	if state != "queued" || gap {
		t.Errorf("version 3 after its strict lane's dead head (version 2) was discarded: %s, gap held %v; want queued, no gap",
			state, gap)
	}
}

// ingestStrict stores one job of key c42 of route r for each version, as
// the record of its offset, in a strict lane with on_dead onDead.
func ingestStrict(t *testing.T, s *pgstore.Store, onDead string, versions ...int64) {
	t.Helper()
	lane := &pgstore.LanePolicy{Policy: "strict", OnDead: onDead, GapTimeout: time.Hour, GapPolicy: "park"}
	var b pgstore.IngestBatch
	for _, v := range versions {
		b.Jobs = append(b.Jobs, pgstore.NewJob{Route: "r", Kind: "k", Queue: "q", Key: "c42", Version: &v,
			DedupeKey: fmt.Sprint("r/0/", v), Payload: []byte(`{}`), MaxAttempts: 3, Topic: "r", Offset: v, Lane: lane})
	}
	if _, err := s.IngestCommit(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

// A strict lane passes the version of a job it could not apply (dead
// under on_dead: continue, parked for a gap) without applying it: a
// re-drive of that job, or a late record of a version the lane had
// given up waiting for, runs, unless a later version has been applied
// since. The lane counted such a version as applied, so every re-drive of
// a gap entry or of a dead job under continue ended skipped, although it
// had never run and nothing after it had.
func TestStrictLaneRunsAVersionItPassedButNeverApplied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// want holds the job of version to state (and, given, its last error).
	want := func(t *testing.T, s *pgstore.Store, version int64, state, lastErr, why string) {
		t.Helper()
		var got, msg string
		if err := s.Pool().QueryRow(ctx, `SELECT state, coalesce(last_error, '') FROM all_jobs WHERE version = $1`,
			version).Scan(&got, &msg); err != nil {
			t.Fatal(err)
		}
		if got != state || (lastErr != "" && msg != lastErr) {
			t.Fatalf("%s: version %d is %s (%q), want %s %q", why, version, got, msg, state, lastErr)
		}
	}
	redrive := func(t *testing.T, s *pgstore.Store, version int64) {
		t.Helper()
		var id int64
		if err := s.Pool().QueryRow(ctx, `SELECT id FROM jobs WHERE version = $1`, version).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if _, err := s.DLQRedrive(ctx, dlqEntryOf(t, s, id), "test"); err != nil {
			t.Fatal(err)
		}
	}
	// parkV3 runs version 1, then lets version 3 wait out its gap for 2
	// and be parked.
	parkV3 := func(t *testing.T, s *pgstore.Store) {
		t.Helper()
		ingestStrict(t, s, "continue", 1, 3)
		complete(t, s, testenv.ClaimOne(t, s, "q"), jobstate.Succeeded, "")
		if _, err := s.Pool().Exec(ctx, `UPDATE lanes SET gap_since = now() - interval '2 hours'`); err != nil {
			t.Fatal(err)
		}
		if _, err := s.LaneSweepGaps(ctx, 10); err != nil {
			t.Fatal(err)
		}
		want(t, s, 3, "dead", "", "after its gap's timeout (parked)")
	}

	t.Run("dead under continue, re-driven", func(t *testing.T) {
		t.Parallel()
		s := testenv.MigratedStore(t)
		ingestStrict(t, s, "continue", 1, 2)
		complete(t, s, testenv.ClaimOne(t, s, "q"), jobstate.Succeeded, "")
		complete(t, s, testenv.ClaimOne(t, s, "q"), jobstate.Dead, "permanent")
		redrive(t, s, 2)
		want(t, s, 2, "queued", "", "re-driven, never applied, nothing after it")
		complete(t, s, testenv.ClaimOne(t, s, "q"), jobstate.Succeeded, "")
		ingestStrict(t, s, "continue", 3)
		want(t, s, 3, "queued", "", "after the re-driven version 2 succeeded")
	})
	t.Run("parked for a gap, re-driven", func(t *testing.T) {
		t.Parallel()
		s := testenv.MigratedStore(t)
		parkV3(t, s)
		redrive(t, s, 3)
		want(t, s, 3, "queued", "", "re-driven gap entry")
	})
	t.Run("parked for a gap, the missing version late", func(t *testing.T) {
		t.Parallel()
		s := testenv.MigratedStore(t)
		parkV3(t, s)
		ingestStrict(t, s, "continue", 2)
		want(t, s, 2, "queued", "", "arriving after the lane gave up on it")
		complete(t, s, testenv.ClaimOne(t, s, "q"), jobstate.Succeeded, "")
		redrive(t, s, 3)
		want(t, s, 3, "queued", "", "re-driven after version 2 ran")
	})
	t.Run("passed, never applied, kept by the prune", func(t *testing.T) {
		t.Parallel()
		s := testenv.MigratedStore(t)
		ingestStrict(t, s, "continue", 1)
		complete(t, s, testenv.ClaimOne(t, s, "q"), jobstate.Dead, "permanent")
		if _, err := pruneAll(ctx, s, 0); err != nil {
			t.Fatal(err)
		}
		ingestStrict(t, s, "continue", 3)
		var gap bool
		if err := s.Pool().QueryRow(ctx, `SELECT gap_since IS NOT NULL FROM lanes WHERE key = 'c42'`).Scan(&gap); err != nil {
			t.Fatal(err)
		}
		want(t, s, 3, "waiting", "", "after the lane passed version 1 and was pruned")
		if !gap {
			t.Error("the lane holds no gap for version 2 after it passed version 1 and was pruned")
		}
	})
	t.Run("a later version applied since", func(t *testing.T) {
		t.Parallel()
		s := testenv.MigratedStore(t)
		ingestStrict(t, s, "continue", 1, 2)
		complete(t, s, testenv.ClaimOne(t, s, "q"), jobstate.Dead, "permanent")
		complete(t, s, testenv.ClaimOne(t, s, "q"), jobstate.Succeeded, "")
		redrive(t, s, 1)
		want(t, s, 1, "skipped", "version 1 is not newer than the last applied version 2", "re-driven after version 2 succeeded")
	})
}
