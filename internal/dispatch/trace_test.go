package dispatch

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap/zaptest"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
	"github.com/switchyard-dev/switchyard/internal/tracing"
	"github.com/switchyard-dev/switchyard/workers"
)

// recordTrace is the trace context a test record carries.
const recordTrace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// Each attempt has a span, the child of the record's traceparent, with
// the job's kind, queue, attempt and outcome; a retry's span links to the
// attempt before it; the handler runs inside its attempt's span. A job
// without a traceparent starts a trace of its own.
func TestAttemptSpans(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	var b pgstore.IngestBatch
	b.Group = testenv.Name("g")
	b.Jobs = []pgstore.NewJob{
		{Route: "r", Kind: "k", Queue: "q", Key: "a", DedupeKey: "a", Payload: []byte("{}"), MaxAttempts: 3,
			Topic: "t", Offset: 0, HeaderKeys: []string{"Traceparent"}, HeaderVals: [][]byte{[]byte(recordTrace)}},
		{Route: "r", Kind: "k", Queue: "q", Key: "b", DedupeKey: "b", Payload: []byte("{}"), MaxAttempts: 1,
			Topic: "t", Offset: 1},
	}
	b.Offsets = []pgstore.OffsetAdvance{{Topic: "t", Partition: 0, Expected: -1, Next: 2}}
	if _, err := store.IngestCommit(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	inside := map[int]trace.SpanContext{} // attempt of job a → the span its handler ran in
	var failed atomic.Bool
	h := workers.HandlerFunc(func(ctx context.Context, j *workers.Job) error {
		if j.Key == "b" {
			return errors.New("b always fails")
		}
		mu.Lock()
		inside[j.Attempt] = trace.SpanContextFromContext(ctx)
		mu.Unlock()
		if failed.CompareAndSwap(false, true) {
			return errors.New("first attempt fails")
		}
		return nil
	})
	rec := runTraced(t, store, Config{
		Queues:  []Queue{{Name: "q", Concurrency: 2, Lease: time.Minute, MaxRuntime: time.Minute, PollInterval: 20 * time.Millisecond}},
		Backoff: map[string]Backoff{"r": {Initial: time.Millisecond, Max: 5 * time.Millisecond}},
		Resolve: func(*workers.Job) (workers.Handler, error) { return h, nil },
		Grace:   200 * time.Millisecond,
	})
	testenv.Eventually(t, 15*time.Second, "three attempt spans to end", func() bool { return len(rec.Ended()) >= 3 })
	byAttempt := map[int]sdktrace.ReadOnlySpan{}
	var other sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		a := attrs(s)
		if s.Name() != tracing.SpanJobAttempt || s.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("span %q kind %v; want %q, consumer", s.Name(), s.SpanKind(), tracing.SpanJobAttempt)
		}
		if a[tracing.AttrJobKind].AsString() != "k" || a[tracing.AttrJobQueue].AsString() != "q" || a[tracing.AttrJobID].AsInt64() == 0 {
			t.Errorf("span attributes %v; want kind k, queue q, a job id", a)
		}
		if s.Parent().TraceID().String() == "4bf92f3577b34da6a3ce929d0e0e4736" {
			byAttempt[int(a[tracing.AttrJobAttempt].AsInt64())] = s
		} else {
			other = s
		}
	}
	first, second := byAttempt[1], byAttempt[2]
	if first == nil || second == nil || other == nil {
		t.Fatalf("want attempts 1 and 2 of the traced job and one other span; got %v and %v", byAttempt, other)
	}
	for i, s := range []sdktrace.ReadOnlySpan{first, second} {
		if got := s.Parent().SpanID().String(); got != "00f067aa0ba902b7" || !s.Parent().IsRemote() {
			t.Errorf("attempt %d: parent span %s (remote %v), want the record's 00f067aa0ba902b7", i+1, got, s.Parent().IsRemote())
		}
		if s.SpanContext().TraceID() != s.Parent().TraceID() {
			t.Errorf("attempt %d: trace %s, want the record's", i+1, s.SpanContext().TraceID())
		}
		mu.Lock()
		in := inside[i+1]
		mu.Unlock()
		if in.SpanID() != s.SpanContext().SpanID() {
			t.Errorf("attempt %d: the handler ran in span %s, want its attempt's %s", i+1, in.SpanID(), s.SpanContext().SpanID())
		}
	}
	if got := attrs(first)[tracing.AttrJobOutcome].AsString(); got != "retry" || first.Status().Code != codes.Error {
		t.Errorf("attempt 1: outcome %q status %v; want retry, error", got, first.Status())
	}
	if got := attrs(second)[tracing.AttrJobOutcome].AsString(); got != "succeeded" || second.Status().Code == codes.Error {
		t.Errorf("attempt 2: outcome %q status %v; want succeeded, not an error", got, second.Status())
	}
	if len(first.Links()) != 0 {
		t.Errorf("attempt 1 links %v; want none", first.Links())
	}
	if l := second.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != first.SpanContext().SpanID() {
		t.Errorf("attempt 2 links %v; want one, to attempt 1's span %s", l, first.SpanContext().SpanID())
	}
	if other.Parent().IsValid() || attrs(other)[tracing.AttrJobOutcome].AsString() != "dead" {
		t.Errorf("the job without a traceparent: parent %v outcome %v; want a root span, dead", other.Parent(), attrs(other))
	}
}

// runTraced starts a dispatcher of cfg whose spans the returned recorder
// keeps.
func runTraced(t *testing.T, store *pgstore.Store, cfg Config) *tracetest.SpanRecorder {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	cfg.Tracer = tp.Tracer(tracing.ScopeName)
	d, err := New(cfg, store, zaptest.NewLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	run(t, d)
	return rec
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// An attempt whose process died (its lease expired and was rescued) has
// a span too, made by the rescuing process: from the attempt's start, the
// child of the record's traceparent, outcome lease_lost with the rescue's
// error; the next attempt links to it. The dead process never ended its
// own span, nor recorded its context.
func TestLostAttemptSpan(t *testing.T) {
	t.Parallel()
	store := testenv.MigratedStore(t)
	var b pgstore.IngestBatch
	b.Group = testenv.Name("g")
	// Job a has attempts left when its lease is lost; job b, on its last,
	// is parked by the rescue.
	b.Jobs = []pgstore.NewJob{{Route: "r", Kind: "k", Queue: "q", Key: "a", DedupeKey: "a", Payload: []byte("{}"),
		MaxAttempts: 3, Topic: "t", HeaderKeys: []string{"x-other", "TraceParent"}, HeaderVals: [][]byte{[]byte("1"), []byte(recordTrace)}},
		{Route: "r", Kind: "k", Queue: "q", Key: "b", DedupeKey: "b", Payload: []byte("{}"), MaxAttempts: 1, Topic: "t", Offset: 1}}
	b.Offsets = []pgstore.OffsetAdvance{{Topic: "t", Partition: 0, Expected: -1, Next: 2}}
	if _, err := store.IngestCommit(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	// A process claims them and dies: nothing more is written.
	jobs, _, err := store.JobClaim(context.Background(),
		pgstore.JobClaimParams{Queue: "q", Limit: 2, Lease: 300 * time.Millisecond, MaxRuntime: time.Minute})
	if err != nil || len(jobs) != 2 {
		t.Fatalf("claim: %d jobs, %v", len(jobs), err)
	}
	slices.SortFunc(jobs, func(x, y *pgstore.Claimed) int { return cmp.Compare(x.Key, y.Key) })
	var started time.Time
	if err := store.Pool().QueryRow(context.Background(), `SELECT started_at FROM jobs WHERE id = $1`, jobs[0].ID).
		Scan(&started); err != nil {
		t.Fatal(err)
	}

	rec := runTraced(t, store, Config{
		Queues: []Queue{{Name: "q", Concurrency: 1, Lease: time.Minute, MaxRuntime: time.Minute, PollInterval: 20 * time.Millisecond}},
		Resolve: func(*workers.Job) (workers.Handler, error) {
			return workers.HandlerFunc(func(context.Context, *workers.Job) error { return nil }), nil
		},
		Grace:          200 * time.Millisecond,
		RescueInterval: 50 * time.Millisecond,
	})
	testenv.Eventually(t, 15*time.Second, "three attempt spans to end", func() bool { return len(rec.Ended()) >= 3 })
	type attempt struct{ job, n int64 }
	spans := map[attempt]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		a := attrs(s)
		spans[attempt{a[tracing.AttrJobID].AsInt64(), a[tracing.AttrJobAttempt].AsInt64()}] = s
	}
	lost, next, parked := spans[attempt{jobs[0].ID, 1}], spans[attempt{jobs[0].ID, 2}], spans[attempt{jobs[1].ID, 1}]
	if lost == nil || next == nil || parked == nil || len(rec.Ended()) != 3 {
		t.Fatalf("want spans of job a's attempts 1 and 2 and of job b's attempt 1; got %v", rec.Ended())
	}
	if got := attrs(parked)[tracing.AttrJobOutcome].AsString(); got != "dead" || parked.Status().Description != pgstore.LeaseExpired {
		t.Errorf("job b's lost last attempt: outcome %q, status %v; want dead, %q", got, parked.Status(), pgstore.LeaseExpired)
	}
	a := attrs(lost)
	if lost.Name() != tracing.SpanJobAttempt || a[tracing.AttrJobOutcome].AsString() != "lease_lost" ||
		a[tracing.AttrJobID].AsInt64() != jobs[0].ID || a[tracing.AttrJobKind].AsString() != "k" {
		t.Errorf("the lost attempt's span: %s %v; want job.attempt of job %d, kind k, outcome lease_lost", lost.Name(), a, jobs[0].ID)
	}
	if lost.Status().Code != codes.Error || lost.Status().Description != pgstore.LeaseExpired {
		t.Errorf("the lost attempt's status %v; want an error, %q", lost.Status(), pgstore.LeaseExpired)
	}
	if !lost.StartTime().Equal(started) || lost.EndTime().Before(started.Add(300*time.Millisecond)) {
		t.Errorf("the lost attempt's span runs %v → %v; want from its start %v to past its lease", lost.StartTime(), lost.EndTime(), started)
	}
	if got := lost.Parent().SpanID().String(); got != "00f067aa0ba902b7" || lost.SpanContext().TraceID() != lost.Parent().TraceID() {
		t.Errorf("the lost attempt's parent %s in trace %s; want the record's span", got, lost.SpanContext().TraceID())
	}
	if l := next.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != lost.SpanContext().SpanID() {
		t.Errorf("attempt 2 links %v; want one, to the lost attempt's span %s", l, lost.SpanContext().SpanID())
	}
	if got := attrs(next)[tracing.AttrJobOutcome].AsString(); got != "succeeded" {
		t.Errorf("attempt 2: outcome %q, want succeeded", got)
	}
}
