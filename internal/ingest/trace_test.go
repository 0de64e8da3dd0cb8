package ingest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
	"github.com/switchyard-dev/switchyard/internal/tracing"
)

// traceparentOf is record i's trace context: trace id i, span id i.
func traceparentOf(i int) string {
	return fmt.Sprintf("00-%032x-%016x-01", i+1, i+1)
}

func batchAttrs(s sdktrace.ReadOnlySpan) map[attribute.Key]int64 {
	m := map[attribute.Key]int64{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value.AsInt64()
	}
	return m
}

// A batch's span is a new trace linked to each record's trace, at most
// tracing.MaxLinks of them, the rest counted; records without a valid
// traceparent add no link.
func TestBatchSpanLinksCapped(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	var recs []*kgo.Record
	const traced = tracing.MaxLinks + 22
	for i := range traced {
		recs = append(recs, &kgo.Record{Headers: []kgo.RecordHeader{{Key: "TraceParent", Value: []byte(traceparentOf(i))}}})
	}
	recs = append(recs, &kgo.Record{}, &kgo.Record{Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("garbage")}}})
	fetches := kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: "t", Partitions: []kgo.FetchPartition{{Partition: 0, Records: recs}}}}}}
	batch := pgstore.IngestBatch{Offsets: []pgstore.OffsetAdvance{{Topic: "t"}}}
	_, span := startBatch(context.Background(), tp.Tracer("t"), fetches, batch, map[string]*Decoded{"t": {Jobs: 5}})
	span.End()
	s := rec.Ended()[0]
	a := batchAttrs(s)
	if s.Name() != tracing.SpanIngestBatch || s.SpanKind() != trace.SpanKindConsumer || s.Parent().IsValid() {
		t.Errorf("span %q kind %v parent %v; want %q, consumer, a root", s.Name(), s.SpanKind(), s.Parent(), tracing.SpanIngestBatch)
	}
	if len(s.Links()) != tracing.MaxLinks || a[tracing.AttrIngestLinksDropped] != traced-tracing.MaxLinks {
		t.Errorf("%d links, %d dropped; want %d and %d", len(s.Links()), a[tracing.AttrIngestLinksDropped], tracing.MaxLinks, traced-tracing.MaxLinks)
	}
	for i, l := range s.Links() {
		if got := tracing.Format(l.SpanContext); got != traceparentOf(i) {
			t.Fatalf("link %d: %s, want record %d's %s", i, got, i, traceparentOf(i))
		}
	}
	if a[tracing.AttrMessagingBatchCount] != traced+2 || a[tracing.AttrIngestJobs] != 5 || a[tracing.AttrIngestPartitions] != 1 {
		t.Errorf("attributes %v; want %d records, 5 jobs, 1 partition", a, traced+2)
	}
}

// Through the consumer: every stored batch has its span, and together
// they link every record's trace.
func TestConsumerTracesBatches(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	topic, group := "orders", testenv.Name("g")
	broker := fakeBroker(t, topic, 0)
	recs := records(0, 0, 30)
	for i, r := range recs {
		r.Headers = []kgo.RecordHeader{{Key: "traceparent", Value: []byte(traceparentOf(i))}}
	}
	fakeProduce(t, broker, topic, recs...)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	c, err := New(Config{Kafka: testenv.KafkaBlock(broker.ListenAddrs(), group, 100), Routes: []*Route{route(t, topic, "event")},
		Tracer: tp.Tracer(tracing.ScopeName)}, store, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	testenv.Eventually(t, 30*time.Second, "30 records stored", func() bool {
		return testenv.Count(t, store, `SELECT coalesce(sum(next_offset), 0) FROM kafka_offsets`) == 30
	})
	linked := map[string]bool{}
	jobs := int64(0)
	testenv.Eventually(t, 10*time.Second, "the batches' spans to end", func() bool {
		linked, jobs = map[string]bool{}, 0
		for _, s := range rec.Ended() {
			jobs += batchAttrs(s)[tracing.AttrIngestJobs]
			for _, l := range s.Links() {
				linked[tracing.Format(l.SpanContext)] = true
			}
		}
		return jobs == 30
	})
	for i := range recs {
		if !linked[traceparentOf(i)] {
			t.Errorf("record %d's trace is linked from no batch span", i)
		}
	}
}
