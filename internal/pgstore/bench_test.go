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

// benchEnqueue queues n jobs, 10,000 per transaction.
func benchEnqueue(b *testing.B, s *pgstore.Store, n int) {
	b.Helper()
	for at := 0; at < n; at += 10_000 {
		if _, err := s.IngestCommit(context.Background(), pgstore.IngestBatch{Group: "g",
			Jobs: benchJobs(at, min(10_000, n-at))}); err != nil {
			b.Fatal(err)
		}
	}
}

func claim(b *testing.B, s *pgstore.Store, limit int) []pgstore.Lease {
	b.Helper()
	jobs, _, err := s.JobClaim(context.Background(), pgstore.JobClaimParams{Queue: benchQueue, Limit: limit,
		Lease: time.Minute, MaxRuntime: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	if len(jobs) != limit {
		b.Fatalf("claimed %d jobs, want %d", len(jobs), limit)
	}
	leases := make([]pgstore.Lease, len(jobs))
	for i, j := range jobs {
		leases[i] = pgstore.Lease{ID: j.ID, Token: j.Token}
	}
	return leases
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

// BenchmarkJobClaimComplete: claim 100 jobs in one statement and complete
// them in another, the dispatcher's batching.
func BenchmarkJobClaimComplete(b *testing.B) {
	const batch = 100
	s := testenv.MigratedStore(b)
	benchEnqueue(b, s, b.N*batch)
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		leases := claim(b, s, batch)
		outs := make([]pgstore.Outcome, len(leases))
		for i, l := range leases {
			outs[i] = pgstore.Outcome{ID: l.ID, Token: l.Token, State: "succeeded"}
		}
		applied, err := s.JobComplete(ctx, outs)
		if err != nil {
			b.Fatal(err)
		}
		if len(applied) != batch {
			b.Fatalf("%d completions applied, want %d", len(applied), batch)
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkJobHeartbeat: extend 100 leases in one statement, a pool's
// heartbeat.
func BenchmarkJobHeartbeat(b *testing.B) {
	const leases = 100
	s := testenv.MigratedStore(b)
	benchEnqueue(b, s, leases)
	held := claim(b, s, leases)
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		kept, err := s.JobHeartbeat(ctx, held, time.Minute, time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		if len(kept) != leases {
			b.Fatalf("%d leases kept, want %d", len(kept), leases)
		}
	}
	b.ReportMetric(float64(b.N*leases)/b.Elapsed().Seconds(), "leases/s")
}
