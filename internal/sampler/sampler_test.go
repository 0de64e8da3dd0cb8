package sampler

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/switchyard-dev/switchyard/internal/ingest"
	"github.com/switchyard-dev/switchyard/internal/metrics"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The gauges read from the database and from Kafka: depth by state, the
// oldest runnable age, DLQ entries, blocked lanes, and lag, each queue and
// ordered route reported even at zero.
func TestSamplerRefreshesTheGauges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	lane := &pgstore.LanePolicy{Policy: "none", OnDead: "block", GapTimeout: time.Minute, GapPolicy: "park"}
	b := pgstore.IngestBatch{Jobs: []pgstore.NewJob{
		{Route: "plain", Kind: "k", Queue: "q", DedupeKey: "1", Payload: []byte("{}"), MaxAttempts: 1, Topic: "t"},
		{Route: "plain", Kind: "k", Queue: "q", DedupeKey: "2", Payload: []byte("{}"), MaxAttempts: 1, Topic: "t", Offset: 1},
		{Route: "lanes", Kind: "k", Queue: "lq", Key: "a", DedupeKey: "3", Payload: []byte("{}"), MaxAttempts: 1, Topic: "u", Lane: lane},
		// Tenant T of a route capped at one per group: one runs, one is held.
		{Route: "grouped", Kind: "k", Queue: "gq", Group: "T", DedupeKey: "4", Payload: []byte("{}"), MaxAttempts: 1, Topic: "v"},
		{Route: "grouped", Kind: "k", Queue: "gq", Group: "T", DedupeKey: "5", Payload: []byte("{}"), MaxAttempts: 1, Topic: "v", Offset: 1},
	}}
	if _, err := s.IngestCommit(ctx, b); err != nil {
		t.Fatal(err)
	}
	jobs, _, err := s.JobClaim(ctx, pgstore.JobClaimParams{Queue: "lq", Limit: 1, Lease: time.Minute, MaxRuntime: time.Hour})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %v %v", jobs, err)
	}
	if _, err := s.JobComplete(ctx, []pgstore.Outcome{{ID: jobs[0].ID, Token: jobs[0].Token, State: "dead",
		Reason: "permanent", Error: "no", Lane: jobs[0].LaneRef()}}); err != nil {
		t.Fatal(err)
	}
	if held, _, err := s.JobClaim(ctx, pgstore.JobClaimParams{Queue: "gq", Limit: 1, Lease: time.Minute, MaxRuntime: time.Hour}); err != nil || len(held) != 1 {
		t.Fatalf("claim of tenant T's first job: %v %v", held, err)
	}
	if _, err := s.Pause(ctx, pgstore.PauseQueue, "idle", "test"); err != nil {
		t.Fatal(err)
	}
	m := metrics.New(prometheus.NewRegistry())
	smp := New(Config{Queues: []string{"q", "lq", "idle", "gq"}, OrderedRoutes: []string{"lanes", "other"}, Groups: pgstore.Groups{Routes: map[string]pgstore.GroupRoute{"grouped": {Queue: "gq", Cap: 1}}},
		Interval: 50 * time.Millisecond,
		Lag: func(context.Context) ([]ingest.PartitionLag, error) {
			return []ingest.PartitionLag{{Topic: "t", Partition: 3, Records: 7, Seconds: 2.5}}, nil
		}}, s, m, zaptest.NewLogger(t))
	if err := smp.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = smp.Stop(ctx) }()
	// The gauges of one refresh are set one after another, so the test
	// waits for all of them, not for the first (which was flaky: the lane
	// and lag gauges could still be unset when the queue's was read).
	mismatches := func() []string {
		var out []string
		for name, c := range map[string]struct{ got, want float64 }{
			"queued":        {testutil.ToFloat64(m.QueueJobs.WithLabelValues("q", "queued")), 2},
			"dead":          {testutil.ToFloat64(m.QueueJobs.WithLabelValues("lq", "dead")), 1},
			"dlq":           {testutil.ToFloat64(m.DLQEntries.WithLabelValues("lq", "permanent")), 1},
			"blocked":       {testutil.ToFloat64(m.LanesBlocked.WithLabelValues("lanes")), 1},
			"blocked other": {testutil.ToFloat64(m.LanesBlocked.WithLabelValues("other")), 0},
			"idle age":      {testutil.ToFloat64(m.QueueOldestAge.WithLabelValues("idle")), 0},
			"held runnable": {testutil.ToFloat64(m.QueueOldestAge.WithLabelValues("gq")), 0},
			"held waiting":  {min(1, math.Ceil(testutil.ToFloat64(m.QueueWaitingAge.WithLabelValues("gq")))), 1},
			"idle paused":   {testutil.ToFloat64(m.QueuePaused.WithLabelValues("idle")), 1},
			"q paused":      {testutil.ToFloat64(m.QueuePaused.WithLabelValues("q")), 0},
			"lag records":   {testutil.ToFloat64(m.KafkaLagRecords.WithLabelValues("t", "3")), 7},
			"lag seconds":   {testutil.ToFloat64(m.KafkaLagSeconds.WithLabelValues("t")), 2.5},
		} {
			if c.got != c.want {
				out = append(out, fmt.Sprintf("%s = %v, want %v", name, c.got, c.want))
			}
		}
		return out
	}
	testenv.Until(10*time.Second, func() bool { return len(mismatches()) == 0 })
	for _, msg := range mismatches() {
		t.Error(msg)
	}
	if age := testutil.ToFloat64(m.QueueOldestAge.WithLabelValues("q")); age < 0 {
		t.Errorf("oldest runnable age %v", age)
	}
	if err := smp.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := smp.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}
