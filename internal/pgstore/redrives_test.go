package pgstore_test

import (
	"context"
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
	existing, err := s.DLQRedriveRecord(ctx, entries[0].ID, job("taken", 1), "oncall")
	if err != nil {
		t.Fatal(err)
	}
	made, err := s.DLQRedriveRecord(ctx, entries[1].ID, job("new", 2), "oncall")
	if err != nil || made == existing {
		t.Fatalf("re-drive into a new job: %d (%v), the existing one %d", made, err, existing)
	}
	if d, err := s.JobGetDetail(ctx, existing, pgstore.Groups{}); err != nil || len(d.Redrives) != 0 {
		t.Errorf("the job a re-drive found already there: re-drives %+v (%v), want none", d.Redrives, err)
	}
	if d, err := s.JobGetDetail(ctx, made, pgstore.Groups{}); err != nil || len(d.Redrives) != 1 || d.Redrives[0].ErrorsBefore != 0 || d.Redrives[0].EntryID != entries[1].ID {
		t.Errorf("the job a re-drive made: re-drives %+v (%v), want entry %d before any error", d.Redrives, err, entries[1].ID)
	}
}
