package ingest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/switchyard-dev/switchyard/internal/metrics"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// A consumer that cannot store its batch says so: Ready fails once the
// batch has waited longer than StuckAfter (so /readyz turns not ready),
// every failed attempt counts in switchyard_ingest_errors_total, and the
// attempts, and their log lines, come at a backed-off rate. When the
// database takes the batch again, all of it is stored and Ready passes.
func TestStuckIngestIsVisible(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	topic := testenv.Topic(t, 1)
	ctx := context.Background()
	// Storing fails as long as the jobs table is not where it belongs.
	if _, err := store.Pool().Exec(ctx, `ALTER TABLE jobs RENAME TO jobs_away`); err != nil {
		t.Fatal(err)
	}
	testenv.Produce(t, topic, records(0, 0, 20)...)
	core, logs := observer.New(zap.WarnLevel)
	m := metrics.New(prometheus.NewRegistry())
	c, err := New(Config{Kafka: testenv.KafkaBlock(testenv.Brokers(t), testenv.Name("g"), 0), Routes: []*Route{route(t, topic, "event")},
		StuckAfter: time.Second}, store, zap.New(core), m)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	testenv.Eventually(t, 30*time.Second, "ingest reported stuck", func() bool { return c.Ready() != nil })
	stuckAt := time.Now()
	if msg := c.Ready().Error(); !strings.Contains(msg, "has not stored a polled batch") {
		t.Errorf("Ready: %q", msg)
	}
	if n := testutil.ToFloat64(m.IngestErrors.WithLabelValues(topic)); n < 1 {
		t.Errorf("switchyard_ingest_errors_total{topic} = %v, want at least 1", n)
	}
	// Over the first second and more, a retry at full speed would have
	// made hundreds of attempts; the backoff makes a handful.
	attempts := logs.FilterMessage("storing batch failed; retrying").Len()
	if attempts > 12 {
		t.Errorf("%d attempts logged within %s of being stuck: not backed off", attempts, time.Since(stuckAt)+time.Second)
	}
	if _, err := store.Pool().Exec(ctx, `ALTER TABLE jobs_away RENAME TO jobs`); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the batch stored", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs`) == 20
	})
	testenv.Eventually(t, 10*time.Second, "ingest ready again", func() bool { return c.Ready() == nil })
}

// Stop closes the client even when its context ends before the batch in
// hand is stored, and says what it left unfinished; a second Stop says
// the same and does nothing more.
func TestStopClosesTheClientWhenItTimesOut(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	topic := testenv.Topic(t, 1)
	ctx := context.Background()
	// The batch's transaction waits on this lock until the test lets go
	// (SHARE: the stored offsets can still be read on assignment).
	lock, err := store.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lock.Rollback(context.Background()) })
	if _, err := lock.Exec(ctx, `LOCK TABLE kafka_offsets IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	testenv.Produce(t, topic, records(0, 0, 5)...)
	c, err := New(Config{Kafka: testenv.KafkaBlock(testenv.Brokers(t), testenv.Name("g"), 0), Routes: []*Route{route(t, topic, "event")},
		StuckAfter: 10 * time.Millisecond}, store, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lock.Rollback(context.Background()); _ = c.Stop(context.Background()) })
	testenv.Eventually(t, 30*time.Second, "a batch in hand", func() bool { return c.Ready() != nil })
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err = c.Stop(short)
	if err == nil || !strings.Contains(err.Error(), "before the batch in hand was stored") {
		t.Fatalf("Stop: %v, want it to say what it left unfinished", err)
	}
	if err := c.cl.Ping(ctx); err == nil {
		t.Fatal("the client still answers after Stop")
	}
	if err2 := c.Stop(ctx); err2 == nil || err2.Error() != err.Error() {
		t.Fatalf("second Stop: %v", err2)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	<-c.Done() // the batch's transaction ends on its own
}
