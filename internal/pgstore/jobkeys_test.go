package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// Every job has exactly one job_keys row with its route, origin, dedupe
// key and key, and no job_keys row outlives its job, whichever path wrote
// or removed it: ingest's fast path, its conflict path (a batch repeating
// stored keys and one key twice), the API's enqueue and its repeat, and
// retention. The admin API's ?key= listing reads keys from there.
func TestJobKeysFollowJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	job := func(dedupe, key string) pgstore.NewJob {
		return pgstore.NewJob{Route: "r", Kind: "k", Queue: "q", DedupeKey: dedupe, Key: key, Payload: []byte("{}"),
			MaxAttempts: 1, Topic: "t"}
	}
	commit := func(want int64, jobs ...pgstore.NewJob) {
		t.Helper()
		res, err := s.IngestCommit(ctx, pgstore.IngestBatch{Jobs: jobs})
		if err != nil || res.Inserted != want {
			t.Fatalf("ingest: inserted %d, %v; want %d", res.Inserted, err, want)
		}
	}
	commit(3, job("a", "cust-1"), job("b", "cust-2"), job("c", ""))                           // fast path
	commit(2, job("a", "cust-1"), job("d", "cust-1"), job("d", "cust-9"), job("e", "cust-3")) // conflicts
	api := pgstore.NewJob{Origin: pgstore.OriginAPI, Route: "r", Kind: "k", Queue: "q", DedupeKey: "a", Key: "cust-1",
		Payload: []byte("{}"), MaxAttempts: 1}
	for range 2 {
		if _, err := s.JobEnqueue(ctx, api, pgstore.Actor{By: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	agree := func(wantJobs int) {
		t.Helper()
		var jobs, mismatched int
		err := s.Pool().QueryRow(ctx, `
			SELECT (SELECT count(*) FROM jobs), count(*) FILTER (WHERE j.id IS NULL OR k.job_id IS NULL
				OR (j.route, j.origin, j.dedupe_key, j.key) IS DISTINCT FROM (k.route, k.origin, k.dedupe_key, k.key))
			FROM jobs j FULL JOIN job_keys k ON k.job_id = j.id`).Scan(&jobs, &mismatched)
		if err != nil || jobs != wantJobs || mismatched != 0 {
			t.Fatalf("jobs %d (want %d), rows without their twin or differing %d, %v", jobs, wantJobs, mismatched, err)
		}
	}
	agree(6)
	// The first row of a key in a batch is the one kept.
	d, err := s.JobFind(ctx, "r", pgstore.OriginKafka, "d")
	if err != nil || d.Key != "cust-1" {
		t.Fatalf("job of d: %+v %v, want the first record's (key cust-1)", d, err)
	}
	var want []int64
	for _, k := range [][2]string{{pgstore.OriginKafka, "a"}, {pgstore.OriginKafka, "d"}, {pgstore.OriginAPI, "a"}} {
		j, err := s.JobFind(ctx, "r", k[0], k[1])
		if err != nil {
			t.Fatalf("job of %s/%s: %v", k[0], k[1], err)
		}
		want = append(want, j.ID)
	}
	listed, err := s.JobList(ctx, pgstore.JobFilter{Key: "cust-1", Limit: 10})
	var got []int64
	for _, j := range listed {
		got = append(got, j.ID)
	}
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("?key=cust-1: jobs %v %v, want %v (kafka a, kafka d, api a)", got, err, want)
	}

	if _, err := s.Pool().Exec(ctx, `UPDATE jobs SET state = 'succeeded', finished_at = now() - interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	if n, err := s.JobPrune(ctx, "succeeded", time.Minute, 100); err != nil || n != 6 {
		t.Fatalf("prune: %d, %v; want 6", n, err)
	}
	agree(0)
	commit(1, job("a", "cust-1")) // its dedupe key went with its job
}
