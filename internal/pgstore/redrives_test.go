package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// A job's re-drives are those that ran it again or made it. A parked
// record whose re-drive found its job already there (its dedupe key
// taken) links the entry to that job, but the job did not run again: its
// page shows no re-drive. One whose re-drive made the job shows it, before
// the job's first attempt.
func TestJobRedrivesAreThoseThatRanIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	job := func(key string, offset int64) pgstore.NewJob {
		return pgstore.NewJob{Route: "r", Kind: "k", Queue: "q", DedupeKey: key, Payload: []byte("{}"), MaxAttempts: 1,
			Topic: "t", Offset: offset}
	}
	poison := func(offset int64) pgstore.Poison {
		return pgstore.Poison{Reason: "decode", Route: "r", Queue: "q", Error: "bad", Payload: []byte("x"), Topic: "t", Offset: offset}
	}
	if _, err := s.IngestCommit(ctx, pgstore.IngestBatch{Jobs: []pgstore.NewJob{job("taken", 0)}, Poison: []pgstore.Poison{poison(1), poison(2)}}); err != nil {
		t.Fatal(err)
	}
	entries, err := s.DLQList(ctx, pgstore.DLQFilter{Limit: 10})
	if err != nil || len(entries) != 2 {
		t.Fatalf("parked: %v %v", entries, err)
	}
	jobs, failed, err := s.DLQRedriveRecords(ctx, []pgstore.RecordRedrive{{Entry: entries[0].ID, Job: job("taken", 1)},
		{Entry: entries[1].ID, Job: job("new", 2)}}, "oncall")
	existing, made := jobs[entries[0].ID], jobs[entries[1].ID]
	if err != nil || len(failed) != 0 || made == existing {
		t.Fatalf("re-drive into a new job: %d (%v %v), the existing one %d", made, err, failed, existing)
	}
	if d, err := s.JobGetDetail(ctx, existing, pgstore.Groups{}); err != nil || len(d.Redrives) != 0 {
		t.Errorf("the job a re-drive found already there: re-drives %+v (%v), want none", d.Redrives, err)
	}
	if d, err := s.JobGetDetail(ctx, made, pgstore.Groups{}); err != nil || len(d.Redrives) != 1 || d.Redrives[0].ErrorsBefore != 0 || d.Redrives[0].EntryID != entries[1].ID {
		t.Errorf("the job a re-drive made: re-drives %+v (%v), want entry %d before any error", d.Redrives, err, entries[1].ID)
	}
}

// A job that Postgres refuses for its data fails a re-drive of several
// records as a whole, leaving every entry parked and no job made, so that
// each can be taken again alone; alone, the refusal is its entry's own
// failure.
func TestRecordRedrivesThatPostgresRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	var poison []pgstore.Poison
	for off := range int64(3) {
		poison = append(poison, pgstore.Poison{Reason: "decode", Route: "r", Queue: "q", Error: "bad", Payload: []byte("x"), Topic: "t", Offset: off})
	}
	if _, err := s.IngestCommit(ctx, pgstore.IngestBatch{Poison: poison}); err != nil {
		t.Fatal(err)
	}
	job := func(entry int64, key string) pgstore.RecordRedrive {
		return pgstore.RecordRedrive{Entry: entry, Job: pgstore.NewJob{Route: "r", Kind: "k", Queue: "q", DedupeKey: key,
			Payload: []byte("{}"), MaxAttempts: 1, Topic: "t", Offset: entry - 1}}
	}
	refused := job(2, testenv.Noise(9000)) // over a btree entry's limit
	jobs, failed, err := s.DLQRedriveRecords(ctx, []pgstore.RecordRedrive{job(1, "a"), refused, job(3, "c")}, "oncall")
	if !errors.Is(err, pgstore.ErrRefused) || jobs != nil || failed != nil {
		t.Fatalf("several with one refused: %v %v %v, want an error wrapping ErrRefused", jobs, failed, err)
	}
	var made, parked int
	if err := s.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM dlq_entries WHERE redriven_at IS NULL)`).
		Scan(&made, &parked); err != nil || made != 0 || parked != 3 {
		t.Fatalf("after it: %d jobs, %d entries parked (%v); want none made, all parked", made, parked, err)
	}
	_, failed, err = s.DLQRedriveRecords(ctx, []pgstore.RecordRedrive{refused}, "oncall")
	if err != nil || !errors.Is(failed[2], pgstore.ErrRefused) || !strings.Contains(failed[2].Error(), "SQLSTATE") {
		t.Fatalf("alone: %v %v, want the entry's failure with Postgres's reason", failed, err)
	}
	if jobs, failed, err := s.DLQRedriveRecords(ctx, []pgstore.RecordRedrive{job(1, "a"), job(3, "c")}, "oncall"); err != nil || len(failed) != 0 || len(jobs) != 2 {
		t.Fatalf("the others: %v %v %v", jobs, failed, err)
	}
}
