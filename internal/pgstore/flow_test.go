package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// groupedJobs ingests n queued jobs of route r for each group value.
func groupedJobs(ctx context.Context, t *testing.T, s *pgstore.Store, n int, groups ...string) {
	t.Helper()
	var batch pgstore.IngestBatch
	for _, g := range groups {
		for i := range n {
			batch.Jobs = append(batch.Jobs, pgstore.NewJob{Route: "r", Kind: "k", Queue: "q",
				DedupeKey: fmt.Sprintf("%s/%d", g, i), Payload: []byte("{}"), MaxAttempts: 3, Topic: "t",
				Offset: int64(len(batch.Jobs)), Group: g})
		}
	}
	if _, err := s.IngestCommit(ctx, batch); err != nil {
		t.Fatal(err)
	}
}

// A grouped claim takes at most a group's max_running from each group,
// whatever the order of the jobs: a group that floods the route costs
// the others nothing, and a group's room comes back when its jobs end.
func TestGroupedClaimTakesEachGroupsRoom(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	groupedJobs(ctx, t, s, 1000, "a")
	groupedJobs(ctx, t, s, 3, "b", "c")
	var throttled []string
	p := pgstore.JobClaimParams{Queue: "q", Limit: 50, Lease: time.Minute, MaxRuntime: time.Hour,
		Limits:    map[string]pgstore.FlowLimit{"r": {GroupMaxRunning: 2}},
		Throttled: func(route, limit string) { throttled = append(throttled, route+"/"+limit) }}
	jobs, _, err := s.JobClaim(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 6 {
		t.Fatalf("claimed %d jobs, want 2 of each of the 3 groups", len(jobs))
	}
	if fmt.Sprint(throttled) != "[r/group]" {
		t.Fatalf("throttles %v, want one of r by its groups", throttled)
	}
	byGroup := map[string]int{}
	var rows []int64
	for _, j := range jobs {
		var g string
		if err := s.Pool().QueryRow(ctx, `SELECT grp FROM jobs WHERE id = $1`, j.ID).Scan(&g); err != nil {
			t.Fatal(err)
		}
		byGroup[g]++
		rows = append(rows, j.ID)
	}
	if byGroup["a"] != 2 || byGroup["b"] != 2 || byGroup["c"] != 2 {
		t.Fatalf("claimed by group %v, want 2 each", byGroup)
	}
	if jobs, _, err := s.JobClaim(ctx, p); err != nil || len(jobs) != 0 {
		t.Fatalf("a claim with every group full took %d jobs (%v)", len(jobs), err)
	}
	// Two of group a end: two more of a may run, and nothing else.
	if _, err := s.Pool().Exec(ctx, `UPDATE jobs SET state = 'succeeded', finished_at = now()
		WHERE id = ANY($1) AND grp = 'a'`, rows); err != nil {
		t.Fatal(err)
	}
	jobs, _, err = s.JobClaim(ctx, p)
	if err != nil || len(jobs) != 2 {
		t.Fatalf("claimed %d jobs after two of group a ended (%v), want 2", len(jobs), err)
	}
}

// A route's max_running holds over its groups together.
func TestLimitedClaimHoldsTheRoutesMaxRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	groupedJobs(ctx, t, s, 10, "a", "b", "c")
	p := pgstore.JobClaimParams{Queue: "q", Limit: 50, Lease: time.Minute, MaxRuntime: time.Hour,
		Limits: map[string]pgstore.FlowLimit{"r": {MaxRunning: 5, GroupMaxRunning: 4}}}
	total := 0
	for range 3 {
		jobs, _, err := s.JobClaim(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		total += len(jobs)
	}
	if total != 5 {
		t.Fatalf("three claims took %d jobs, want the route's max_running 5", total)
	}
}

// A rate limit allows burst + 1 starts at once from idle, then one per
// interval: claims made every millisecond for 300 ms at an interval of
// 20 ms start 5 + 15 jobs (give or take the edge), and no claim in
// between takes more than its due.
func TestLimitedClaimSpacesStartsAtTheRate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	groupedJobs(ctx, t, s, 200, pgstore.GroupAll)
	var rate int
	p := pgstore.JobClaimParams{Queue: "q", Limit: 50, Lease: time.Minute, MaxRuntime: time.Hour,
		Limits:    map[string]pgstore.FlowLimit{"r": {RateInterval: 20 * time.Millisecond, RateBurst: 4}},
		Throttled: func(_, limit string) { rate++ }}
	first, _, err := s.JobClaim(ctx, p)
	if err != nil || len(first) != 5 {
		t.Fatalf("the first claim took %d jobs (%v), want burst + 1 = 5", len(first), err)
	}
	start := time.Now()
	total := len(first)
	for time.Since(start) < 300*time.Millisecond {
		jobs, _, err := s.JobClaim(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		total += len(jobs)
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	due := 5 + int(elapsed/(20*time.Millisecond))
	t.Logf("%d starts in %s after the burst; due %d", total, elapsed.Round(time.Millisecond), due)
	if total > due+1 || total < due-2 {
		t.Fatalf("%d starts in %s at one per 20 ms after a burst of 5, want %d (+1 at the edge)", total, elapsed, due)
	}
	if rate == 0 {
		t.Fatal("no claim was reported throttled by the rate")
	}
}
