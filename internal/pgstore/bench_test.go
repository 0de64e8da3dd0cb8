package pgstore_test

// Micro-benchmarks of the hot statements against the real Postgres named
// by SWITCHYARD_DATABASE_URL, each in a fresh schema:
//
//	go test -run '^$' -bench . ./internal/pgstore
//
// `switchyard bench` measures the same statements inside the engine.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

const benchQueue = "q"

// benchJobs makes n job rows numbered from first, like ingest makes
// from 200-byte JSON records.
func benchJobs(first, n int) []pgstore.NewJob {
	jobs := make([]pgstore.NewJob, n)
	for k := range jobs {
		i := first + k
		jobs[k] = pgstore.NewJob{Route: "r", Kind: "k", Queue: benchQueue, Key: fmt.Sprintf("k%d", i%10000),
			DedupeKey: fmt.Sprintf("evt-%010d", i), MaxAttempts: 8, Topic: "t", Partition: int32(i % 4), Offset: int64(i / 4),
			Payload: fmt.Appendf(nil, `{"id":"evt-%010d","customer":"k%d","note":"%0150d"}`, i, i%10000, 0)}
	}
	return jobs
}

// benchEnqueue queues n jobs, 10,000 per transaction; with lanes, as an
// ordered route's with 20 jobs per lane (and at least 100 lanes, one
// claim's worth), like the ordered burn-down of `switchyard bench`.
func benchEnqueue(b *testing.B, s *pgstore.Store, n int, lanes bool) {
	b.Helper()
	for at := 0; at < n; at += 10_000 {
		jobs := benchJobs(at, min(10_000, n-at))
		if lanes {
			for i := range jobs {
				jobs[i].Key = fmt.Sprintf("lane-%d", (at+i)%max(100, n/20))
				jobs[i].Lane = &pgstore.LanePolicy{Policy: "none", OnDead: "continue", GapTimeout: time.Minute, GapPolicy: "park"}
			}
		}
		if _, err := s.IngestCommit(context.Background(), pgstore.IngestBatch{Group: "g", Jobs: jobs}); err != nil {
			b.Fatal(err)
		}
	}
}

// claim claims limit jobs from the pool's position after, as a pool
// working through a backlog does, and returns the next position.
func claim(b *testing.B, s *pgstore.Store, limit int, after pgstore.ClaimPosition) ([]pgstore.Outcome, pgstore.ClaimPosition) {
	b.Helper()
	jobs, last, err := s.JobClaim(context.Background(), pgstore.JobClaimParams{Queue: benchQueue, Limit: limit,
		Lease: time.Minute, MaxRuntime: time.Hour, After: after})
	if err != nil {
		b.Fatal(err)
	}
	if len(jobs) != limit {
		b.Fatalf("claimed %d jobs, want %d", len(jobs), limit)
	}
	outs := make([]pgstore.Outcome, len(jobs))
	for i, j := range jobs {
		outs[i] = pgstore.Outcome{ID: j.ID, Token: j.Token, State: "succeeded", Lane: j.LaneRef()}
	}
	return outs, last
}

// claimComplete is BenchmarkJobClaimComplete and
// BenchmarkJobClaimCompleteLanes: claim 100 jobs in one statement and
// complete them in another, the dispatcher's batching.
func claimComplete(b *testing.B, lanes bool) {
	const batch = 100
	s := testenv.MigratedStore(b)
	benchEnqueue(b, s, b.N*batch, lanes)
	ctx := context.Background()
	var at pgstore.ClaimPosition
	b.ResetTimer()
	for range b.N {
		var outs []pgstore.Outcome
		outs, at = claim(b, s, batch, at)
		done, err := s.JobComplete(ctx, outs)
		if err != nil {
			b.Fatal(err)
		}
		if len(done.Applied) != batch {
			b.Fatalf("%d completions applied, want %d", len(done.Applied), batch)
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkIngestCommit: one poll of 1,000 new records (COPY into the
// stage, dedupe insert, offset fence) per transaction.
func BenchmarkIngestCommit(b *testing.B) {
	const batch = 1000
	s := testenv.MigratedStore(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		jobs := benchJobs(i*batch, batch)
		exp := int64(i * batch / 4)
		if i == 0 {
			exp = -1
		}
		b.StartTimer()
		_, err := s.IngestCommit(ctx, pgstore.IngestBatch{Group: "g", Jobs: jobs,
			Offsets: []pgstore.OffsetAdvance{{Topic: "t", Partition: 0, Expected: exp, Next: int64((i + 1) * batch / 4)}}})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkIngestCommitSmall: one poll of 5 new records per transaction,
// as ingest commits them under a light load (the e2e figure's 1,000
// records/s), by the direct path and by the careful one that a batch
// with a dedupe conflict takes, and the direct path for an ordered
// route's records (their lanes made and promoted in the same round trip).
func BenchmarkIngestCommitSmall(b *testing.B) {
	lane := &pgstore.LanePolicy{Policy: "none", OnDead: "continue", GapTimeout: time.Minute, GapPolicy: "park"}
	for _, c := range []struct {
		name          string
		careful, lane bool
	}{{"direct", false, false}, {"careful", true, false}, {"direct_lanes", false, true}} {
		b.Run(c.name, func(b *testing.B) {
			const batch = 5
			s := testenv.MigratedStore(b)
			ctx := context.Background()
			for i := 0; b.Loop(); i++ {
				exp := int64(i * batch)
				if i == 0 {
					exp = -1
				}
				s.SetIngestCareful(c.careful)
				jobs := benchJobs(i*batch, batch)
				if c.lane {
					for k := range jobs {
						jobs[k].Lane = lane
					}
				}
				_, err := s.IngestCommit(ctx, pgstore.IngestBatch{Group: "g", Jobs: jobs,
					Offsets: []pgstore.OffsetAdvance{{Topic: "t", Expected: exp, Next: int64((i + 1) * batch)}}})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkJobClaimComplete: claim and complete unordered jobs.
func BenchmarkJobClaimComplete(b *testing.B) { claimComplete(b, false) }

// BenchmarkJobClaimCompleteLanes: the same for lane heads of an ordered
// route, whose completion advances their lanes (lanes_advance) and
// promotes the next job of each.
func BenchmarkJobClaimCompleteLanes(b *testing.B) { claimComplete(b, true) }

// BenchmarkJobCompleteLaneHandoff: complete 100 lane jobs in one round
// trip asking for each lane's next job (Outcome.Handoff), then complete
// those: the dispatcher's ordered path, where a claim is only needed for
// a lane's first job (and when a lane runs dry, claimed here too).
func BenchmarkJobCompleteLaneHandoff(b *testing.B) {
	const batch = 100
	s := testenv.MigratedStore(b)
	// Twice the jobs run: lanes run dry unevenly, and a claim must always
	// find fresh ones.
	benchEnqueue(b, s, 2*b.N*batch, true)
	ctx := context.Background()
	handoff := &pgstore.Handoff{Queue: benchQueue, Lease: time.Minute}
	var outs []pgstore.Outcome
	var at pgstore.ClaimPosition
	b.ResetTimer()
	for range b.N {
		if len(outs) < batch {
			var more []pgstore.Outcome
			more, at = claim(b, s, batch-len(outs), at)
			outs = append(outs, more...)
		}
		for i := range outs {
			outs[i].Handoff = handoff
		}
		done, err := s.JobComplete(ctx, outs)
		if err != nil {
			b.Fatal(err)
		}
		if len(done.Applied) != batch {
			b.Fatalf("%d completions applied, want %d", len(done.Applied), batch)
		}
		outs = outs[:0]
		for _, j := range done.Next {
			outs = append(outs, pgstore.Outcome{ID: j.ID, Token: j.Token, State: "succeeded", Lane: j.LaneRef()})
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkJobHeartbeat: extend 100 leases in one statement, a pool's
// heartbeat.
func BenchmarkJobHeartbeat(b *testing.B) {
	const leases = 100
	s := testenv.MigratedStore(b)
	benchEnqueue(b, s, leases, false)
	outs, _ := claim(b, s, leases, pgstore.ClaimPosition{})
	held := make([]pgstore.Lease, len(outs))
	for i, o := range outs {
		held[i] = pgstore.Lease{ID: o.ID, Token: o.Token}
	}
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		kept, err := s.JobHeartbeat(ctx, held, time.Minute, time.Hour, "")
		if err != nil {
			b.Fatal(err)
		}
		if len(kept) != leases {
			b.Fatalf("%d leases kept, want %d", len(kept), leases)
		}
	}
	b.ReportMetric(float64(b.N*leases)/b.Elapsed().Seconds(), "leases/s")
}

// BenchmarkQueueStats: the metrics sampler's and GET /v1/queues' query
// over 50,000 runnable jobs and 500,000 finished ones, which it must not
// read.
func BenchmarkQueueStats(b *testing.B) {
	s := testenv.MigratedStore(b)
	benchEnqueue(b, s, 50_000, false)
	ctx := context.Background()
	if _, err := s.Pool().Exec(ctx, `
		INSERT INTO jobs (route, kind, queue, state, key, dedupe_key, payload, max_attempts, finished_at)
		SELECT 'r', 'k', $1, 'succeeded', 'k' || (g % 10000), 'history-' || g, '{}', 8, now()
		FROM generate_series(1, 500000) g`, benchQueue); err != nil {
		b.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `VACUUM ANALYZE jobs`); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		stats, err := s.QueueStats(ctx, pgstore.Groups{})
		if err != nil {
			b.Fatal(err)
		}
		if q := stats[benchQueue]; q == nil || q.Jobs["queued"] != 50_000 {
			b.Fatalf("stats %+v, want 50000 queued", q)
		}
	}
}

// BenchmarkGroupedClaimBesideEndedAttempts: a grouped route of 4,000
// groups (max_running 1) holds one running job in each, and the claiming
// process has ended 3,600 of those attempts, their outcomes not yet
// written (JobClaimParams.Ended: a pool of thousands of workers). Each
// claim takes 100 of the ended groups' next jobs, under the route's lock;
// they are given back between claims, untimed.
func BenchmarkGroupedClaimBesideEndedAttempts(b *testing.B) {
	const groups, ended, batch = 4000, 3600, 100
	s := testenv.MigratedStore(b)
	ctx := context.Background()
	names := make([]string, groups)
	for g := range names {
		names[g] = fmt.Sprintf("g%04d", g)
	}
	groupedJobs(ctx, b, s, 2, names...)
	// LimitedOnly: the queue holds only the route's jobs, and its pool
	// claims no others (dispatch's Queue.AllLimited).
	p := pgstore.JobClaimParams{Queue: "q", Limit: groups, Lease: time.Minute, MaxRuntime: time.Hour,
		Limits: map[string]pgstore.FlowLimit{"r": {GroupMaxRunning: 1}}, LimitedOnly: true}
	running, _, err := s.JobClaim(ctx, p)
	if err != nil || len(running) != groups {
		b.Fatalf("claimed %d jobs (%v), want one of each of %d groups", len(running), err, groups)
	}
	for _, j := range running[:ended] {
		p.Ended = append(p.Ended, j.Token)
	}
	p.Limit = batch
	b.ResetTimer()
	for range b.N {
		jobs, _, err := s.JobClaim(ctx, p)
		if err != nil || len(jobs) != batch {
			b.Fatalf("claimed %d jobs (%v), want %d of the ended groups", len(jobs), err, batch)
		}
		b.StopTimer()
		leases := make([]pgstore.Lease, len(jobs))
		for i, j := range jobs {
			leases[i] = pgstore.Lease{ID: j.ID, Token: j.Token}
		}
		if _, err := s.JobRelease(ctx, leases); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
