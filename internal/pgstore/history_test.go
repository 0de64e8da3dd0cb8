package pgstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
	"github.com/switchyard-dev/switchyard/jobstate"
)

// killJob claims the queue's one runnable job and ends it dead
// (permanent), which parks it in the DLQ; it returns the entry's id.
func killJob(t *testing.T, s *pgstore.Store) (jobID, entryID int64) {
	t.Helper()
	ctx := context.Background()
	j := testenv.ClaimOne(t, s, "q")
	c, err := s.JobComplete(ctx, []pgstore.Outcome{{ID: j.ID, Token: j.Token, State: jobstate.Dead,
		Reason: "permanent", Error: "HTTP 422"}})
	if err != nil || !c.Applied[j.Token] {
		t.Fatalf("complete dead: %v %v", c.Applied, err)
	}
	return j.ID, dlqEntryOf(t, s, j.ID)
}

// A re-driven DLQ entry stays, with the job it revived and that job's
// state, so its id keeps answering; a job that dies again gets an entry
// of its own beside it; lists show parked entries unless asked; the
// history goes when the job is pruned. Every action is in the audit log,
// under the actor that took it.
func TestDLQHistorySurvivesRedrive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	if _, err := s.JobEnqueue(ctx, pgstore.NewJob{Origin: pgstore.OriginAPI, Route: "r", Kind: "k", Queue: "q",
		DedupeKey: "d1", Payload: []byte(`{}`), MaxAttempts: 3}, pgstore.Actor{By: "oncall"}); err != nil {
		t.Fatal(err)
	}
	jobID, first := killJob(t, s)
	if got, err := s.DLQRedrive(ctx, first, "oncall"); err != nil || got != jobID {
		t.Fatalf("redrive: job %d, %v; want %d", got, err, jobID)
	}
	e, err := s.DLQGet(ctx, first)
	if err != nil || e.Redriven == nil || e.Redriven.JobID != jobID || e.Redriven.By != "oncall" ||
		e.Redriven.JobState == nil || *e.Redriven.JobState != jobstate.Queued {
		t.Fatalf("the re-driven entry: %+v %v; want it kept, pointing at queued job %d", e.Redriven, err, jobID)
	}
	if _, err := s.DLQRedrive(ctx, first, "oncall"); !errors.Is(err, pgstore.ErrRedriven) || !errors.Is(err, pgstore.ErrConflict) {
		t.Fatalf("a second re-drive of the entry: %v, want ErrRedriven", err)
	}

	// It fails again: a new entry, and the old one says how it ended.
	if again, second := killJob(t, s); again != jobID || second == first {
		t.Fatalf("the job died again as %d with entry %d; want job %d with a new entry", again, second, jobID)
	}
	e, _ = s.DLQGet(ctx, first)
	if *e.Redriven.JobState != jobstate.Dead {
		t.Fatalf("the old entry shows the job %s, want dead", *e.Redriven.JobState)
	}
	// The old entry is not discarded either: its job's new entry is
	// the one to act on, and the old id keeps answering.
	err = s.DLQDiscard(ctx, first, "oncall")
	if !errors.Is(err, pgstore.ErrRedriven) || !strings.Contains(err.Error(), fmt.Sprintf("to job %d", jobID)) {
		t.Fatalf("a discard of the re-driven entry: %v, want ErrRedriven naming job %d", err, jobID)
	}
	if _, err := s.DLQGet(ctx, first); err != nil {
		t.Fatalf("the re-driven entry after a refused discard: %v", err)
	}
	list := func(state string) []int64 {
		es, err := s.DLQList(ctx, pgstore.DLQFilter{State: state, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, e := range es {
			ids = append(ids, e.ID)
		}
		return ids
	}
	if p, r, a := list(""), list(pgstore.DLQRedriven), list(pgstore.DLQAll); len(p) != 1 || p[0] == first ||
		len(r) != 1 || r[0] != first || len(a) != 2 {
		t.Fatalf("parked %v, redriven %v, all %v", p, r, a)
	}
	stats, err := s.QueueStats(ctx, pgstore.Groups{})
	if err != nil || stats["q"].DLQ["permanent"] != 1 {
		t.Fatalf("the DLQ gauge counts %v, want the one parked entry", stats["q"].DLQ)
	}

	// Discarded, the job can be pruned, and its history goes with it.
	second := list("")[0]
	if err := s.DLQDiscard(ctx, second, "cli:ops"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE jobs SET finished_at = now() - interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	if n, err := s.JobPrune(ctx, string(jobstate.Dead), time.Minute, 10); err != nil || n != 1 {
		t.Fatalf("prune: %d %v", n, err)
	}
	if _, err := s.DLQGet(ctx, first); !errors.Is(err, pgstore.ErrNotFound) {
		t.Fatalf("the pruned job's history: %v, want gone", err)
	}

	audit, err := s.AuditList(ctx, pgstore.AuditFilter{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range audit {
		got = append(got, fmt.Sprintf("%s %s %s %s", a.Actor, a.Action, a.Target, a.Detail))
	}
	want := []string{
		fmt.Sprintf(`cli:ops discard dlq/%d {"queue": "q", "route": "r", "job_id": %d, "reason": "permanent"}`, second, jobID),
		fmt.Sprintf(`oncall redrive dlq/%d {"job_id": %d}`, first, jobID),
		fmt.Sprintf(`oncall enqueue job/%d {"kind": "k", "queue": "q"}`, jobID),
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("audit log, newest first:\n%q\nwant\n%q", got, want)
	}
}

// Every action is audited in its own transaction, with what it did; a
// failed action leaves no entry; the list pages newest first; entries
// past their retention are pruned.
func TestAuditLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	for _, by := range []string{"oncall", "oncall", "grafana"} {
		if _, err := s.Pause(ctx, pgstore.PauseQueue, "q", by); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Resume(ctx, pgstore.PauseRoute, "orders", "oncall"); err != nil {
		t.Fatal(err)
	}
	if err := s.JobCancel(ctx, 999_999, "oncall"); !errors.Is(err, pgstore.ErrNotFound) {
		t.Fatalf("cancel of no job: %v", err)
	}
	if _, err := s.Pause(ctx, pgstore.PauseQueue, "q", ""); err == nil {
		t.Fatal("an action without an actor was taken")
	}
	page, err := s.AuditList(ctx, pgstore.AuditFilter{Actor: "oncall", Limit: 2})
	if err != nil || len(page) != 2 || page[0].Action != pgstore.AuditResume || page[0].Target != "route/orders" ||
		page[1].Action != pgstore.AuditPause || page[1].Target != "queue/q" {
		t.Fatalf("oncall's newest two: %+v %v", page, err)
	}
	var detail map[string]bool
	if err := json.Unmarshal(page[1].Detail, &detail); err != nil || detail["changed"] {
		t.Fatalf("the second pause of a paused queue: %s; want changed false", page[1].Detail)
	}
	older, err := s.AuditList(ctx, pgstore.AuditFilter{Actor: "oncall", Before: page[1].ID, Limit: 10})
	if err != nil || len(older) != 1 || older[0].Action != pgstore.AuditPause {
		t.Fatalf("the page after: %+v %v", older, err)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE audit_log SET at = now() - interval '2 days' WHERE actor = 'grafana'`); err != nil {
		t.Fatal(err)
	}
	if n, err := s.AuditPrune(ctx, 24*time.Hour, 10); err != nil || n != 1 {
		t.Fatalf("prune: %d %v; want grafana's one entry", n, err)
	}
}

// Pruning a job clears the DLQ's references to it: it must find the
// job's entries through an index, not by reading the DLQ, which parked
// records grow without bound (a seq scan per deleted job made pruning
// 1,000 jobs beside 200,000 entries take 29 s, when a foreign key's ON
// DELETE SET NULL did it).
func TestPruningReadsTheDLQByIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	if _, err := s.Pool().Exec(ctx, `
		INSERT INTO dlq_entries (reason, route, queue, payload, src_topic, src_partition, src_offset, job_id, redriven_at)
		SELECT 'poison', 'r', 'q', '\x00', 't', 0, i, CASE WHEN i <= 10 THEN i END, CASE WHEN i <= 10 THEN now() END
		FROM generate_series(1, 5000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `
		INSERT INTO jobs (id, route, kind, queue, state, dedupe_key, payload, max_attempts,
			src_topic, src_partition, src_offset, finished_at)
		SELECT i, 'r', 'k', 'q', 'succeeded', i::text, '\x00', 3, 't', 1, i, now() - interval '30 days'
		FROM generate_series(1, 200) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `ANALYZE dlq_entries`); err != nil {
		t.Fatal(err)
	}
	// Counted in the transaction that deletes, where the counters are
	// exact (pg_stat_user_tables lags by up to a flush interval).
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var n int64
	if err := tx.QueryRow(ctx, pgstore.PruneJobsSQL, "succeeded", int64(time.Hour/time.Millisecond), 1000).Scan(&n); err != nil || n != 200 {
		t.Fatalf("prune: %d %v; want 200", n, err)
	}
	var seq, refs int64
	if err := tx.QueryRow(ctx, `SELECT seq_scan FROM pg_stat_xact_user_tables
		WHERE relid = 'dlq_entries'::regclass`).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	if seq != 0 {
		t.Fatalf("pruning 200 jobs read dlq_entries by %d sequential scans; want its index", seq)
	}
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM dlq_entries WHERE job_id IS NOT NULL`).Scan(&refs); err != nil || refs != 0 {
		t.Fatalf("%d entries still name a pruned job (%v)", refs, err)
	}
	// And no foreign key does it behind the prune's back: it would also
	// clear the reference of an entry whose job moved to job_history.
	var fks int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_constraint
		WHERE conrelid = 'dlq_entries'::regclass AND contype = 'f'`).Scan(&fks); err != nil || fks != 0 {
		t.Fatalf("dlq_entries has %d foreign keys (%v), want none", fks, err)
	}
}
