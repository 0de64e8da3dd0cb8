package ingest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap/zaptest"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/metrics"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

func route(t *testing.T, topic string, dedupe string) *Route {
	t.Helper()
	r, err := CompileRoute(config.Route{Topic: topic, Kind: "k", Queue: "q", MaxAttempts: 3,
		MaxRecordBytes: 1024, Key: config.FieldRef{Field: "customer"}, Dedupe: config.FieldRef{Field: dedupe}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func startConsumer(t *testing.T, store *pgstore.Store, group string, routes []*Route, crash func() bool) *Consumer {
	t.Helper()
	return startConsumerMetrics(t, store, group, routes, crash, nil)
}

func startConsumerMetrics(t *testing.T, store *pgstore.Store, group string, routes []*Route, crash func() bool, m *metrics.Metrics) *Consumer {
	t.Helper()
	return startWith(t, store, Config{Kafka: testenv.KafkaBlock(testenv.Brokers(t), group, 50), Routes: routes}, crash, m)
}

func startWith(t *testing.T, store *pgstore.Store, cfg Config, crash func() bool, m *metrics.Metrics) *Consumer {
	t.Helper()
	c, err := New(cfg, store, zaptest.NewLogger(t), m)
	if err != nil {
		t.Fatal(err)
	}
	c.crashAfterStore = crash
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

func records(partition int32, from, to int) []*kgo.Record {
	var rs []*kgo.Record
	for i := from; i < to; i++ {
		rs = append(rs, &kgo.Record{Partition: partition,
			Value: fmt.Appendf(nil, `{"customer":"c%d","event":"e%d-%d"}`, i%7, partition, i)})
	}
	return rs
}

// I1 + I2: a consumer that dies after the Postgres commit and before the
// Kafka commit loses nothing and duplicates nothing when a new member
// takes over: the stored offsets, not Kafka's, decide where it resumes.
func TestCrashBetweenPostgresAndKafkaCommit(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	topic := testenv.Topic(t, 2)
	group := testenv.Name("g")
	testenv.Produce(t, topic, records(0, 0, 120)...)
	testenv.Produce(t, topic, records(1, 0, 80)...)

	// Crash right after the first stored batch, before its Kafka commit.
	c1 := startConsumer(t, store, group, []*Route{route(t, topic, "")}, func() bool { return true })
	<-c1.Done()
	if err := c1.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	stored := testenv.Count(t, store, `SELECT count(*) FROM all_jobs`)
	if stored == 0 {
		t.Fatal("first batch was not stored before the crash point")
	}
	adm := testenv.Admin(t)
	committed, err := adm.FetchOffsets(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range committed.Sorted() {
		if o.At > 0 {
			t.Fatalf("Kafka commit happened before the crash point: %+v", o)
		}
	}

	m := metrics.New(prometheus.NewRegistry())
	startConsumerMetrics(t, store, group, []*Route{route(t, topic, "")}, nil, m)
	testenv.Eventually(t, 60*time.Second, "all 200 records stored", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs`) == 200
	})
	// Resuming from Kafka's (absent) commit would re-read the stored
	// batch; resuming from Postgres reads each record once.
	if d := testutil.ToFloat64(m.IngestRecords.WithLabelValues(topic, "duplicate")); d != 0 {
		t.Fatalf("%v records were read again after the crash: resumed from Kafka, not Postgres", d)
	}
	if n := testenv.Count(t, store, `SELECT count(DISTINCT (src_partition, src_offset)) FROM all_jobs`); n != 200 {
		t.Fatalf("distinct sources = %d, want 200", n)
	}
	if n := testenv.Count(t, store, `SELECT sum(next_offset) FROM kafka_offsets WHERE group_id = $1`, group); n != 200 {
		t.Fatalf("stored offsets sum = %d, want 200", n)
	}
}

// I2: the same event produced twice, and a whole topic consumed again by a
// second group, make one job per dedupe key.
func TestDedupeAcrossRedeliveryAndReproduce(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	topic := testenv.Topic(t, 1)
	rs := records(0, 0, 30)
	testenv.Produce(t, topic, rs...)
	testenv.Produce(t, topic, records(0, 0, 30)...) // re-produced: same event ids, new offsets
	startConsumer(t, store, testenv.Name("g"), []*Route{route(t, topic, "event")}, nil)
	testenv.Eventually(t, 60*time.Second, "60 records consumed", func() bool {
		return testenv.Count(t, store, `SELECT coalesce(sum(next_offset), 0) FROM kafka_offsets`) == 60
	})
	// A second group replays everything into the same table.
	startConsumer(t, store, testenv.Name("g"), []*Route{route(t, topic, "event")}, nil)
	testenv.Eventually(t, 60*time.Second, "replay consumed", func() bool {
		return testenv.Count(t, store, `SELECT coalesce(sum(next_offset), 0) FROM kafka_offsets`) == 120
	})
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs`); n != 30 {
		t.Fatalf("jobs = %d, want 30 (one per event id)", n)
	}
}

// I6: poison between good records is parked in the same transaction and
// the partition moves on.
func TestPoisonDoesNotBlock(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	topic := testenv.Topic(t, 1)
	big := make([]byte, 2048)
	for i := range big {
		big[i] = 'x'
	}
	testenv.Produce(t, topic,
		&kgo.Record{Value: []byte(`{"customer":"a","event":"1"}`)},
		&kgo.Record{Value: []byte(`not json`)},
		&kgo.Record{Value: []byte(`{"event":"2"}`)},                     // no key field
		&kgo.Record{Value: []byte(`{"customer":"b"}`)},                  // no dedupe field
		&kgo.Record{Value: big},                                         // too large
		&kgo.Record{Value: []byte(`{"customer":{"id":1},"event":"3"}`)}, // key is an object
		&kgo.Record{Value: []byte(`{"customer":"c","event":"4"}`), Headers: []kgo.RecordHeader{{Key: "h", Value: []byte{0xff}}}},
	)
	startConsumer(t, store, testenv.Name("g"), []*Route{route(t, topic, "event")}, nil)
	testenv.Eventually(t, 60*time.Second, "partition consumed", func() bool {
		return testenv.Count(t, store, `SELECT coalesce(sum(next_offset), 0) FROM kafka_offsets`) == 7
	})
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs`); n != 2 {
		t.Fatalf("jobs = %d, want 2", n)
	}
	want := map[string]int{"decode": 2, "missing_field": 2, "too_large": 1}
	for reason, n := range want {
		if got := testenv.Count(t, store, `SELECT count(*) FROM dlq_entries WHERE reason = $1 AND job_id IS NULL`, reason); got != n {
			t.Errorf("dlq %s = %d, want %d", reason, got, n)
		}
	}
	var payload []byte
	if err := store.Pool().QueryRow(context.Background(),
		`SELECT payload FROM dlq_entries WHERE src_offset = 1`).Scan(&payload); err != nil || string(payload) != "not json" {
		t.Fatalf("poison payload = %q, %v; want the raw bytes", payload, err)
	}
}

// kafka.fetch_max_bytes bounds what a fetch brings, so what the consumer
// holds; a record larger than the bound still arrives (alone), so no
// record can stall its partition behind it. Each record is produced as a
// batch of its own and the bound is below one: every fetch then brings
// one record, and each ingest transaction (its jobs' created_at) stores
// one. Unbounded, the twenty arrive in a fetch or two.
func TestFetchBoundPassesLargerRecords(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	topic := testenv.Topic(t, 1)
	const n = 20
	for i := range n {
		testenv.Produce(t, topic, &kgo.Record{Value: fmt.Appendf(nil,
			`{"customer":"c%d","event":"e%d","pad":"%s"}`, i, i, testenv.Noise(4000))})
	}
	r, err := CompileRoute(config.Route{Topic: topic, Kind: "k", Queue: "q", MaxAttempts: 3,
		MaxRecordBytes: 8192, Key: config.FieldRef{Field: "customer"}, Dedupe: config.FieldRef{Field: "event"}})
	if err != nil {
		t.Fatal(err)
	}
	k := testenv.KafkaBlock(testenv.Brokers(t), testenv.Name("g"), 50)
	k.FetchMaxBytes = config.MinFetchMaxBytes
	startWith(t, store, Config{Kafka: k, Routes: []*Route{r}}, nil, nil)
	testenv.Eventually(t, 60*time.Second, "every record stored", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs`) == n
	})
	if tx := testenv.Count(t, store, `SELECT count(DISTINCT created_at) FROM all_jobs`); tx < n/2 {
		t.Fatalf("%d records stored in %d transactions: fetches were not bounded to %d bytes",
			n, tx, config.MinFetchMaxBytes)
	}
}

// I1 fence: a zombie member whose expected offset is stale cannot commit
// a batch; nothing it would have written lands.
func TestStaleMemberIsFenced(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	ctx := context.Background()
	batch := func(expected, next int64) pgstore.IngestBatch {
		return pgstore.IngestBatch{Group: "g",
			Jobs: []pgstore.NewJob{{Route: "r", Kind: "k", Queue: "q", DedupeKey: fmt.Sprint(next),
				Payload: []byte("{}"), MaxAttempts: 1, Topic: "t", Offset: next - 1}},
			Offsets: []pgstore.OffsetAdvance{{Topic: "t", Partition: 0, Expected: expected, Next: next}}}
	}
	if _, err := store.IngestCommit(ctx, batch(-1, 10)); err != nil {
		t.Fatal(err)
	}
	if _, err := store.IngestCommit(ctx, batch(-1, 11)); err != pgstore.ErrOffsetFenced {
		t.Fatalf("second first-insert: err = %v, want ErrOffsetFenced", err)
	}
	if _, err := store.IngestCommit(ctx, batch(10, 20)); err != nil {
		t.Fatal(err)
	}
	if _, err := store.IngestCommit(ctx, batch(10, 21)); err != pgstore.ErrOffsetFenced {
		t.Fatalf("zombie: err = %v, want ErrOffsetFenced", err)
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs`); n != 2 {
		t.Fatalf("jobs = %d, want 2: a fenced batch wrote rows", n)
	}
}

// A database that lost its offsets while Kafka still has commits makes
// the consumer fail closed instead of silently resuming.
func TestFailsClosedWithoutStoredOffsets(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	topic := testenv.Topic(t, 1)
	group := testenv.Name("g")
	testenv.Produce(t, topic, records(0, 0, 5)...)
	c := startConsumer(t, store, group, []*Route{route(t, topic, "")}, nil)
	testenv.Eventually(t, 60*time.Second, "consumed", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs`) == 5
	})
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	fresh := testenv.MigratedStore(t) // the "replaced" database
	c2 := startConsumer(t, fresh, group, []*Route{route(t, topic, "")}, nil)
	select {
	case <-c2.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("consumer kept running without stored offsets")
	}
	if err := c2.Err(); err == nil {
		t.Fatal("want an error naming the missing stored offsets")
	} else {
		t.Logf("fails closed with: %v", err)
	}
}

// The KIP-848 consumer group protocol (broker-side assignment): two
// members share a topic, every record becomes one job.
func TestServerSideGroupProtocol(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	topic := testenv.Topic(t, 4)
	group := testenv.Name("g")
	for p := range int32(4) {
		testenv.Produce(t, topic, records(p, 0, 50)...)
	}
	cfg := Config{Kafka: testenv.KafkaBlock(testenv.Brokers(t), group, 20), Routes: []*Route{route(t, topic, "")}}
	cfg.Kafka.GroupProtocol = "consumer"
	startWith(t, store, cfg, nil, nil)
	startWith(t, store, cfg, nil, nil)
	testenv.Eventually(t, 60*time.Second, "200 records stored", func() bool {
		return testenv.Count(t, store, `SELECT coalesce(sum(next_offset), 0) FROM kafka_offsets`) == 200
	})
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs`); n != 200 {
		t.Fatalf("jobs = %d, want 200", n)
	}
}

// Lag reports the records between the stored position and the partition's
// end, and how old the last stored record is while the partition is
// behind: it keeps growing while ingest is stuck (here: the partition's
// offset row locked by another transaction, as a slow or hung database
// would hold it), and drops to 0 once ingest catches up.
func TestLagWhileIngestIsStuck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := testenv.MigratedStore(t)
	topic := testenv.Topic(t, 1)
	testenv.Produce(t, topic, records(0, 0, 10)...)
	c := startConsumer(t, store, testenv.Name("g"), []*Route{route(t, topic, "event")}, nil)
	lag := func() PartitionLag {
		t.Helper()
		ls, err := c.Lag(ctx)
		if err != nil || len(ls) != 1 {
			t.Fatalf("lag: %+v, %v; want the one owned partition", ls, err)
		}
		return ls[0]
	}
	testenv.Eventually(t, 60*time.Second, "10 records stored and no lag", func() bool {
		return testenv.Count(t, store, `SELECT coalesce(sum(next_offset), 0) FROM kafka_offsets`) == 10 && lag().Records == 0
	})
	if l := lag(); l.Seconds != 0 {
		t.Fatalf("caught up, lag seconds %v, want 0", l.Seconds)
	}

	tx, err := store.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, `SELECT * FROM kafka_offsets FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	testenv.Produce(t, topic, records(0, 10, 25)...)
	var stuck PartitionLag
	testenv.Eventually(t, 60*time.Second, "15 records of lag", func() bool {
		stuck = lag()
		return stuck.Records == 15
	})
	time.Sleep(1100 * time.Millisecond) // the passage of time under test: lag seconds grow while stuck
	if later := lag(); later.Records != 15 || later.Seconds < stuck.Seconds+1 {
		t.Fatalf("lag while stuck went from %+v to %+v; want 15 records and a second older", stuck, later)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "caught up again", func() bool {
		l := lag()
		return l.Records == 0 && l.Seconds == 0
	})
}

// A stored batch wakes the queues it gave runnable jobs at once, in the
// process (Config.Wake), and a batch of duplicates wakes none.
func TestStoredBatchWakesItsQueues(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	topic := testenv.Topic(t, 1)
	testenv.Produce(t, topic, records(0, 0, 5)...)
	woken := make(chan string, 100)
	r := route(t, topic, "event")
	startWith(t, store, Config{Kafka: testenv.KafkaBlock(testenv.Brokers(t), testenv.Name("g"), 50), Routes: []*Route{r},
		Wake: func(q string) { woken <- q }}, nil, nil)
	select {
	case q := <-woken:
		if q != r.Queue {
			t.Fatalf("woke queue %q, want %q", q, r.Queue)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("no wake-up for a stored batch")
	}
	testenv.Eventually(t, 60*time.Second, "the events consumed", func() bool {
		return testenv.Count(t, store, `SELECT coalesce(sum(next_offset), 0) FROM kafka_offsets`) == 5
	})
	for len(woken) > 0 {
		<-woken // the events' other batches, if they came in several
	}
	testenv.Produce(t, topic, records(0, 0, 5)...) // the same events again: nothing new to run
	testenv.Eventually(t, 60*time.Second, "the duplicates consumed", func() bool {
		return testenv.Count(t, store, `SELECT coalesce(sum(next_offset), 0) FROM kafka_offsets`) == 10
	})
	if len(woken) != 0 {
		t.Fatalf("%d wake-ups for batches of duplicates", len(woken))
	}
}

// A transactional producer ends each transaction with a marker, a control
// record that takes an offset but is never returned as data; an aborted
// transaction leaves records a read-committed consumer never sees. The
// stored position must move past both, or the partition reads one record
// (or the aborted ones) behind for ever, and its lag in seconds grows
// without end on a healthy system: SwitchyardIngestBehind pages.
func TestLagPastTransactionMarkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := testenv.MigratedStore(t)
	topic := testenv.Topic(t, 1)
	m := metrics.New(prometheus.NewRegistry())
	produceTx := func(commit kgo.TransactionEndTry, recs ...*kgo.Record) {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(testenv.Brokers(t)...), kgo.TransactionalID(testenv.Name("tx")),
			kgo.DefaultProduceTopic(topic))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := cl.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	produceTx(kgo.TryCommit, records(0, 0, 5)...) // offsets 0-4, marker at 5
	produceTx(kgo.TryAbort, records(0, 5, 8)...)  // offsets 6-8 aborted, marker at 9
	c := startConsumerMetrics(t, store, testenv.Name("g"), []*Route{route(t, topic, "event")}, nil, m)
	var last []PartitionLag
	testenv.Eventually(t, 60*time.Second, "the committed records stored and no lag", func() bool {
		ls, err := c.Lag(ctx)
		if err != nil {
			t.Fatal(err)
		}
		last = ls
		return len(ls) == 1 && ls[0].Records == 0 &&
			testenv.Count(t, store, `SELECT count(*) FROM all_jobs`) == 5
	})
	if last[0].Seconds != 0 {
		t.Errorf("caught up, lag seconds %v, want 0", last[0].Seconds)
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs`); n != 5 {
		t.Errorf("%d jobs, want the 5 committed records' (markers and aborted records make none)", n)
	}
	if n := testenv.Count(t, store, `SELECT coalesce(sum(next_offset), 0) FROM kafka_offsets`); n != 10 {
		t.Errorf("stored position %d, want 10: past the abort marker", n)
	}
	if got := testutil.ToFloat64(m.IngestRecords.WithLabelValues(topic, "filtered")); got != 0 {
		t.Errorf("%v records counted filtered, want 0: a marker is not a record", got)
	}
}

// A member that has stored nothing of a partition yet — a new topic, or
// one taken over after a restart or a rebalance — still reports the
// partition's lag while ingest is stuck (the offsets table locked, as a
// hung database would hold it): its records from the first unstored one
// (the log's start when none is stored), and its seconds from that
// record's timestamp. It reported no series for a partition with no
// stored row, and 0 seconds for one whose last stored record another
// member or an earlier process stored, so SwitchyardIngestBehind could
// not fire after a restart however long ingest stayed stuck.
func TestLagOfPartitionsThisMemberHasNotStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := testenv.MigratedStore(t)
	fresh, taken := testenv.Topic(t, 1), testenv.Topic(t, 1)
	group := testenv.Name("g")
	testenv.Produce(t, taken, records(0, 0, 10)...)
	c1 := startConsumer(t, store, group, []*Route{route(t, taken, "event")}, nil)
	testenv.Eventually(t, 60*time.Second, "10 records of the taken topic stored", func() bool {
		return testenv.Count(t, store, `SELECT coalesce(sum(next_offset), 0) FROM kafka_offsets`) == 10
	})
	if err := c1.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	tx, err := store.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, `LOCK TABLE kafka_offsets IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Minute)
	stale := func(rs []*kgo.Record) []*kgo.Record {
		for _, r := range rs {
			r.Timestamp = old
		}
		return rs
	}
	testenv.Produce(t, fresh, stale(records(0, 0, 8))...)
	testenv.Produce(t, taken, stale(records(0, 10, 25))...)
	c2 := startConsumer(t, store, group, []*Route{route(t, fresh, "event"), route(t, taken, "event")}, nil)
	var ls []PartitionLag
	// Both partitions are assigned in one join: once one is measured, so
	// is the other.
	testenv.Eventually(t, 60*time.Second, "the partitions owned", func() bool {
		if ls, err = c2.Lag(ctx); err != nil {
			t.Fatal(err)
		}
		return len(ls) > 0
	})
	want := map[string]int64{fresh: 8, taken: 15}
	got := map[string]bool{}
	for _, l := range ls {
		got[l.Topic] = true
		if l.Records != want[l.Topic] || l.Seconds < 60 {
			t.Errorf("stuck, lag of %s/%d: %d records, %.1f s; want %d records and at least 60 s (the first unstored record's age)",
				l.Topic, l.Partition, l.Records, l.Seconds, want[l.Topic])
		}
	}
	if !got[fresh] || !got[taken] {
		t.Errorf("lag measured for %v; want both the new topic %s and the taken one %s", got, fresh, taken)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "caught up", func() bool {
		ls, err := c2.Lag(ctx)
		return err == nil && len(ls) == 2 && ls[0].Records+ls[1].Records == 0 && ls[0].Seconds+ls[1].Seconds == 0
	})
}
