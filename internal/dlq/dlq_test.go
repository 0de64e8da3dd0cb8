package dlq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/dlq"
	"github.com/switchyard-dev/switchyard/internal/ingest"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func compile(t *testing.T, r config.Route) *ingest.Route {
	t.Helper()
	r.Kind, r.Queue, r.MaxAttempts = "k", "q", 3
	r.OnDead, r.GapPolicy, r.GapTimeout = "continue", "park", config.Duration(time.Minute)
	cr, err := ingest.CompileRoute(r)
	if err != nil {
		t.Fatal(err)
	}
	return cr
}

// A too_large record's entry keeps only part of it; re-driving it after
// the route was fixed (max_record_bytes raised) reads the whole record
// from Kafka again, key and headers included. Once retention has
// removed the record, the re-drive says so and changes nothing.
func TestRedriveTruncatedRecordRereadsKafka(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := testenv.MigratedStore(t)
	topic := testenv.Topic(t, 1)
	big := strings.Repeat("v", 5000)
	testenv.Produce(t, topic,
		&kgo.Record{Key: []byte("cust-1"), Value: []byte(big), Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("1")}}},
		&kgo.Record{Key: []byte("cust-2"), Value: []byte(big)})
	small := compile(t, config.Route{Topic: topic, Ordered: true, MaxRecordBytes: 1000, DLQMaxBytes: new(100)})
	c, err := ingest.New(ingest.Config{Kafka: testenv.KafkaBlock(testenv.Brokers(t), testenv.Name("g"), 0), Routes: []*ingest.Route{small}},
		store, zaptest.NewLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Stop(ctx) }()
	var entries []pgstore.DLQEntry
	testenv.Eventually(t, 60*time.Second, "both records parked", func() bool {
		entries, err = store.DLQList(ctx, pgstore.DLQFilter{Limit: 10})
		return err == nil && len(entries) == 2
	})
	for _, e := range entries {
		if !e.Truncated || e.RecordBytes == nil || *e.RecordBytes < 5000 {
			t.Fatalf("entry %+v: want truncated with the record's size", e)
		}
		full, err := store.DLQGet(ctx, e.ID)
		if err != nil || len(full.Payload)+len(full.RecordKey) > 100 {
			t.Fatalf("entry %d keeps %d bytes of value (%v), want at most 100 in all", e.ID, len(full.Payload), err)
		}
	}

	fixed := compile(t, config.Route{Topic: topic, Ordered: true, MaxRecordBytes: 1 << 20, DLQMaxBytes: new(100)})
	kopts, err := ingest.ClientOpts(config.Kafka{Brokers: testenv.Brokers(t)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc := dlq.New(store, []*ingest.Route{fixed}, ingest.NewRereader(kopts))
	jobID, err := svc.Redrive(ctx, entries[0].ID, "test")
	if err != nil {
		t.Fatalf("re-drive: %v", err)
	}
	var payload []byte
	var key string
	var hk []string
	if err := store.Pool().QueryRow(ctx, `SELECT payload, key, header_keys FROM all_jobs WHERE id = $1`, jobID).
		Scan(&payload, &key, &hk); err != nil {
		t.Fatal(err)
	}
	if string(payload) != big || key != "cust-1" || len(hk) != 1 || hk[0] != "h" {
		t.Fatalf("re-driven job: %d-byte payload, key %q, headers %v; want the whole record", len(payload), key, hk)
	}

	// Retention removes the second record: deleting up to the end moves
	// the log start past it, as retention would.
	adm := testenv.Admin(t)
	var to kadm.Offsets
	to.Add(kadm.Offset{Topic: topic, Partition: 0, At: 2})
	if resp, err := adm.DeleteRecords(ctx, to); err != nil || resp.Error() != nil {
		t.Fatalf("delete records: %v %v", err, resp.Error())
	}
	_, err = svc.Redrive(ctx, entries[1].ID, "test")
	if !errors.Is(err, dlq.ErrCannotRedrive) || !strings.Contains(err.Error(), "retention") {
		t.Fatalf("re-drive of a record no longer in Kafka: %v, want ErrCannotRedrive saying why", err)
	}
	if _, err := store.DLQGet(ctx, entries[1].ID); err != nil {
		t.Fatalf("the entry is gone after a failed re-drive: %v", err)
	}

	// Without a Kafka reader a truncated entry cannot be re-driven either.
	if _, err := dlq.New(store, []*ingest.Route{fixed}, nil).Redrive(ctx, entries[1].ID, "test"); !errors.Is(err, dlq.ErrCannotRedrive) {
		t.Fatalf("without a reader: %v", err)
	}
}

// A parked record keeps its Kafka key, so that a route keyed by the
// record key decodes it again as it was read: before, a re-driven record
// of an ordered route came back "without a key".
func TestRedriveRecordKeepsItsKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := testenv.MigratedStore(t)
	route := compile(t, config.Route{Topic: "t", Ordered: true, MaxRecordBytes: 10, DLQMaxBytes: new(100)})
	_, poison := route.Decode(&kgo.Record{Topic: "t", Offset: 4, Key: []byte("cust-9"), Value: []byte("0123456789abc")}, time.Now())
	if poison == nil || poison.Truncated {
		t.Fatalf("poison %+v: want a too_large entry kept whole", poison)
	}
	if _, err := store.IngestCommit(ctx, pgstore.IngestBatch{Poison: []pgstore.Poison{*poison}}); err != nil {
		t.Fatal(err)
	}
	fixed := compile(t, config.Route{Topic: "t", Ordered: true, MaxRecordBytes: 100, DLQMaxBytes: new(100)})
	jobID, err := dlq.New(store, []*ingest.Route{fixed}, nil).Redrive(ctx, 1, "test")
	if err != nil {
		t.Fatalf("re-drive: %v", err)
	}
	job, err := store.JobGet(ctx, jobID)
	if err != nil || job.Key != "cust-9" || job.State != "queued" {
		t.Fatalf("job %+v %v; want key cust-9, the head of its lane", job, err)
	}
}
