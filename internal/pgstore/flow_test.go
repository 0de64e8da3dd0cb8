package pgstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// groupedJobs ingests n queued jobs of route r for each group value.
func groupedJobs(ctx context.Context, t testing.TB, s *pgstore.Store, n int, groups ...string) {
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

// A running job whose attempt ended in the claiming process (its outcome
// on the way to the completer: JobClaimParams.Ended) leaves its group's
// room to the next job, in the window's claim and in the walk of the
// groups alike; any other running job holds it.
func TestGroupedClaimDoesNotCountEndedAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	groupedJobs(ctx, t, s, 5, "a", "b")
	p := pgstore.JobClaimParams{Queue: "q", Limit: 50, Lease: time.Minute, MaxRuntime: time.Hour,
		Limits: map[string]pgstore.FlowLimit{"r": {GroupMaxRunning: 1}}}
	first, _, err := s.JobClaim(ctx, p)
	if err != nil || len(first) != 2 {
		t.Fatalf("claimed %d jobs (%v), want the first of each group", len(first), err)
	}
	groupOf := func(id int64) string {
		var g string
		if err := s.Pool().QueryRow(ctx, `SELECT grp FROM jobs WHERE id = $1`, id).Scan(&g); err != nil {
			t.Fatal(err)
		}
		return g
	}
	ended := []int64{first[0].Token}
	endedGroup := groupOf(first[0].ID)
	for _, pass := range []struct {
		name  string
		after pgstore.ClaimPosition // past every job: the window finds none and the walk claims
	}{{"window", pgstore.ClaimPosition{}}, {"walk", pgstore.ClaimPosition{ScheduledAt: time.Now().Add(time.Hour)}}} {
		q := p
		q.After = pass.after
		if jobs, _, err := s.JobClaim(ctx, q); err != nil || len(jobs) != 0 {
			t.Fatalf("%s: with no attempt ended, a claim took %d jobs (%v), want none", pass.name, len(jobs), err)
		}
		q.Ended = ended
		jobs, _, err := s.JobClaim(ctx, q)
		if err != nil || len(jobs) != 1 || groupOf(jobs[0].ID) != endedGroup {
			t.Fatalf("%s: with group %s's attempt ended, a claim took %d jobs (%v), want one of that group",
				pass.name, endedGroup, len(jobs), err)
		}
		// Its attempt ends too, for the next pass.
		ended = append(ended, jobs[0].Token)
	}
}

// Grouped claims from two stores (two processes' pools), eight claimers
// at once from all over the claim order, never hold more of a group than
// its max_running: each claim counts under the route's lock, so no two
// count the same state. Without the lock a group held up to 16 jobs. The
// test counts a job from its claim until its completion is sent, which
// is when a handler would have returned.
func TestConcurrentGroupedClaimsKeepEachGroupsCap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testenv.Schema(t)
	stores := []*pgstore.Store{testenv.Store(t, schema), testenv.Store(t, schema)}
	const groups, perGroup, maxRunning = 4, 100, 2
	var names []string
	for g := range groups {
		names = append(names, fmt.Sprintf("g%02d", g))
	}
	groupedJobs(ctx, t, stores[0], perGroup, names...)
	groupOf := map[int64]string{}
	var ids []int64
	var at time.Time
	rows, err := stores[0].Pool().Query(ctx, `SELECT id, grp, scheduled_at FROM jobs ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		var g string
		if err := rows.Scan(&id, &g, &at); err != nil {
			t.Fatal(err)
		}
		groupOf[id] = g
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	held := map[string]int{}
	most, done, claims := 0, 0, 0
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		s := stores[i%2]
		wg.Go(func() {
			for {
				mu.Lock()
				finished := done == groups*perGroup
				mu.Unlock()
				if finished {
					return
				}
				// From all over the claim order, as pools' positions are:
				// claims that start apart choose different jobs of a group.
				after := pgstore.ClaimPosition{ScheduledAt: at, ID: ids[rand.IntN(len(ids))]}
				if rand.IntN(4) == 0 {
					after = pgstore.ClaimPosition{}
				}
				jobs, _, err := s.JobClaim(ctx, pgstore.JobClaimParams{Queue: "q", Limit: 8, Lease: time.Minute,
					MaxRuntime: time.Hour, After: after,
					Limits: map[string]pgstore.FlowLimit{"r": {GroupMaxRunning: maxRunning}}})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				claims++
				for _, j := range jobs {
					held[groupOf[j.ID]]++
					most = max(most, held[groupOf[j.ID]])
				}
				mu.Unlock()
				time.Sleep(time.Millisecond) // the handlers run
				outs := make([]pgstore.Outcome, len(jobs))
				mu.Lock()
				for k, j := range jobs {
					held[groupOf[j.ID]]--
					outs[k] = pgstore.Outcome{ID: j.ID, Token: j.Token, State: "succeeded"}
				}
				done += len(jobs)
				mu.Unlock()
				if len(outs) > 0 {
					if _, err := s.JobComplete(ctx, outs); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if most > maxRunning {
		t.Fatalf("a group held %d jobs at once, over its max_running %d", most, maxRunning)
	}
	if most < maxRunning {
		t.Fatalf("no group ever held its max_running %d (at most %d): the claims never contended", maxRunning, most)
	}
	t.Logf("%d jobs in %d claims, at most %d of a group at once", done, claims, most)
}

// A route's max_running bounds its claim by the slots the claimer
// names (JobClaimParams.Slots), over its groups together, and a route it
// does not name is not claimed.
func TestLimitedClaimTakesNoMoreThanItsSlots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	groupedJobs(ctx, t, s, 10, "a", "b", "c")
	p := pgstore.JobClaimParams{Queue: "q", Limit: 50, Lease: time.Minute, MaxRuntime: time.Hour,
		Limits: map[string]pgstore.FlowLimit{"r": {MaxRunning: 5, GroupMaxRunning: 4}}}
	if jobs, _, err := s.JobClaim(ctx, p); err != nil || len(jobs) != 0 {
		t.Fatalf("a claim without slots took %d jobs (%v), want none", len(jobs), err)
	}
	p.Slots = map[string]int{"r": 5}
	jobs, _, err := s.JobClaim(ctx, p)
	if err != nil || len(jobs) != 5 {
		t.Fatalf("a claim with 5 slots took %d jobs (%v), want 5", len(jobs), err)
	}
}

// Slot shares never add up past max_running, whoever asks; a second
// holder that asks gets what the first leaves, and an even split once
// the first's handlers end; the share of a holder that stopped renewing
// comes back when it expires; a share never drops under what is in use.
func TestFlowSlotsLeaseSplitsMaxRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	lease := func(holder string, want, inUse int, ttl time.Duration) int {
		t.Helper()
		got, err := s.FlowSlotsLease(ctx, holder, []pgstore.SlotAsk{{Route: "r", Cap: 4, Want: want, InUse: inUse}}, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return got["r"]
	}
	total := func() int {
		t.Helper()
		var n int
		if err := s.Pool().QueryRow(ctx, `SELECT coalesce(sum(slots), 0) FROM flow_slots
			WHERE route = 'r' AND expires_at > now()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if got := lease("a", 4, 0, time.Minute); got != 4 {
		t.Fatalf("the only holder got %d slots of 4", got)
	}
	if got := lease("b", 4, 0, time.Minute); got != 0 {
		t.Fatalf("a second holder got %d slots while the first held all 4", got)
	}
	// a runs 4 and wants all: it keeps them, in use, but its share is cut
	// to half, so it starts no more until two have ended.
	if got := lease("a", 4, 4, time.Minute); got != 2 || total() != 4 {
		t.Fatalf("the first holder's share is %d (rows %d) with another asking, want 2 (4, in use)", got, total())
	}
	if got := lease("a", 4, 2, time.Minute); got != 2 {
		t.Fatalf("the first holder's share is %d once two of its slots ended, want 2", got)
	}
	if got := lease("b", 4, 0, time.Minute); got != 2 || total() != 4 {
		t.Fatalf("the second holder got %d slots (rows %d), want the 2 left", got, total())
	}
	// a wants none any more: b may have them all.
	lease("a", 0, 0, time.Minute)
	if got := lease("b", 4, 2, time.Minute); got != 4 || total() != 4 {
		t.Fatalf("the second holder got %d slots (rows %d) once the first wanted none, want 4", got, total())
	}
	// b dies: its share stays counted until it expires, never longer.
	lease("b", 4, 4, 200*time.Millisecond)
	if got := lease("c", 4, 0, time.Minute); got != 0 {
		t.Fatalf("a third holder got %d slots while the second's lease held", got)
	}
	testenv.Eventually(t, 10*time.Second, "the second holder's share to expire", func() bool {
		return lease("c", 4, 0, time.Minute) == 4
	})
	if err := s.FlowSlotsRelease(ctx, "c"); err != nil || total() != 0 {
		t.Fatalf("after release %d slots are held (%v)", total(), err)
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
	// The window is read on the database's clock, where the rate is kept:
	// from the burst's start to the last start. Measured by this process
	// from after the first claim came back, it missed that claim's return,
	// which under load (make test) took long enough to count a start more.
	var elapsed time.Duration
	if err := s.Pool().QueryRow(ctx, `SELECT (extract(epoch FROM max(started_at) - min(started_at)) * 1e6)::bigint * 1000
		FROM jobs WHERE started_at IS NOT NULL`).Scan(&elapsed); err != nil {
		t.Fatal(err)
	}
	due := 5 + int(elapsed/(20*time.Millisecond))
	t.Logf("%d starts in %s after the burst (%s here); due %d", total, elapsed.Round(time.Millisecond),
		time.Since(start).Round(time.Millisecond), due)
	if total > due+1 || total < due-2 {
		t.Fatalf("%d starts in %s at one per 20 ms after a burst of 5, want %d (+1 at the edge)", total, elapsed, due)
	}
	if rate == 0 {
		t.Fatal("no claim was reported throttled by the rate")
	}
}

// A heartbeat or a restart never sets a job lease past the holder's
// share of its route's max_running, however long the lease asked for.
func TestJobLeasesNeverOutlastTheShare(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	groupedJobs(ctx, t, s, 2, pgstore.GroupAll)
	p := pgstore.JobClaimParams{Queue: "q", Limit: 2, Lease: time.Minute, MaxRuntime: time.Hour,
		Limits: map[string]pgstore.FlowLimit{"r": {MaxRunning: 2}}, Slots: map[string]int{"r": 2}}
	jobs, _, err := s.JobClaim(ctx, p)
	if err != nil || len(jobs) != 2 {
		t.Fatalf("claimed %d jobs (%v), want 2", len(jobs), err)
	}
	if _, err := s.FlowSlotsLease(ctx, "h", []pgstore.SlotAsk{{Route: "r", Cap: 2, Want: 2, InUse: 2}}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := s.JobHeartbeat(ctx, []pgstore.Lease{{ID: jobs[0].ID, Token: jobs[0].Token}}, time.Hour, 2*time.Hour, "h"); err != nil {
		t.Fatal(err)
	}
	if kept, err := s.JobRestart(ctx, []pgstore.Lease{{ID: jobs[1].ID, Token: jobs[1].Token}}, time.Hour, 2*time.Hour, "h"); err != nil || !kept[jobs[1].Token] {
		t.Fatalf("restart kept %v (%v), want the held attempt", kept, err)
	}
	var over int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM jobs j JOIN flow_slots f ON f.route = j.route AND f.holder = 'h'
		WHERE j.id = ANY($1) AND j.lease_expires_at > f.expires_at`, []int64{jobs[0].ID, jobs[1].ID}).Scan(&over); err != nil || over != 0 {
		t.Fatalf("%d leases outlast the share (%v)", over, err)
	}
	// Another holder's share caps nothing of h's, nor does its absence.
	if _, err := s.JobHeartbeat(ctx, []pgstore.Lease{{ID: jobs[0].ID, Token: jobs[0].Token}}, time.Hour, 2*time.Hour, "other"); err != nil {
		t.Fatal(err)
	}
	var left time.Duration
	if err := s.Pool().QueryRow(ctx, `SELECT extract(epoch FROM lease_expires_at - now())::bigint * 1000000000 FROM jobs WHERE id = $1`,
		jobs[0].ID).Scan(&left); err != nil || left < 50*time.Minute {
		t.Fatalf("an uncapped heartbeat left %s of a lease of an hour (%v)", left, err)
	}
}
