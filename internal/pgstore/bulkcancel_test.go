package pgstore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/switchyard-dev/switchyard/internal/bulk"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
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
