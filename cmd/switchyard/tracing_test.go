package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// receiver is an OTLP/gRPC trace receiver (the OTel protocol's own
// service definition) that keeps every span it is sent.
type receiver struct {
	coltracepb.UnimplementedTraceServiceServer
	addr string

	mu    sync.Mutex
	spans []*tracepb.Span
}

func (r *receiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (r *receiver) received() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...)
}

// newReceiver serves a receiver on a free loopback port until the test ends.
func newReceiver(t *testing.T) *receiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{addr: ln.Addr().String()}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, r)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return r
}

func spanAttr(s *tracepb.Span, key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			if v, ok := kv.GetValue().GetValue().(*commonpb.AnyValue_IntValue); ok {
				return fmt.Sprint(v.IntValue)
			}
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

func hexID(b []byte) string { return hex.EncodeToString(b) }

// TestTracingThroughOTLP: a real process exporting to a real OTLP/gRPC
// receiver. A record with a traceparent is ingested (the batch's span
// links to it), its job fails once at the target and then succeeds: both
// attempt spans are children of the record's span in its trace, the
// second links to the first, each target call is a client span child of
// its attempt, and the traceparent the target received names that client
// span. An operator action is a span with the token's name as actor and
// never the token. The batch delay is ten minutes, so every span arrives
// through the flush at shutdown, within the grace.
func TestTracingThroughOTLP(t *testing.T) {
	t.Parallel()
	schema := testenv.Schema(t)
	store := testenv.Store(t, schema)
	topic := testenv.Topic(t, 1)
	rcv := newReceiver(t)
	tg := newTarget(t)
	var mu sync.Mutex
	sent := map[int]string{} // attempt → the traceparent the target got
	tg.setBehaviour(func(r *http.Request, c call) int {
		mu.Lock()
		defer mu.Unlock()
		sent[c.Attempt] = r.Header.Get("Traceparent")
		if c.Attempt == 1 {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	const token = "oncall-s3cret-token"
	cfg := writeConfig(t, testConfig{Group: testenv.Name("g"), Schema: schema, Listen: "127.0.0.1:0", Body: fmt.Sprintf(`admin:
  tokens:
    - {name: oncall, token_env: TEST_TRACE_TOKEN, role: operate}
tracing: {otlp_endpoint: %q, sample_ratio: 1.0}
queues:
  q: {concurrency: 2, lease: 10s, poll_interval: 100ms}
routes:
  - {topic: %q, kind: k, queue: q, max_attempts: 3, backoff: {initial: 50ms, max: 100ms}, target: {http: {url: %q, timeout: 5s}}}
`, rcv.addr, topic, tg.URL())})
	p := start(t, "run", []string{"TEST_TRACE_TOKEN=" + token, "OTEL_BSP_SCHEDULE_DELAY=600000"}, "run", "--config", cfg)
	addr := adminAddr(t, p)
	p.waitLog(10*time.Second, "tracing on")

	const traceID, recordSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	testenv.Produce(t, topic, &kgo.Record{Value: []byte(`{"id":"r1"}`),
		Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-" + traceID + "-" + recordSpan + "-01")}}})
	testenv.Eventually(t, 60*time.Second, "the job to succeed on its second attempt", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'succeeded' AND attempts = 2`) == 1
	})
	if code, body := apiAs(t, addr, "POST", "/v1/queues/q/pause", "Bearer "+token); code != http.StatusOK {
		t.Fatalf("pause: %d %s", code, body)
	}
	// OTEL_BSP_SCHEDULE_DELAY is honoured: nothing is sent before the
	// shutdown's flush.
	if n := len(rcv.received()); n != 0 {
		t.Errorf("%d spans arrived before shutdown; the batch delay is ten minutes", n)
	}
	term(t, p, 30*time.Second)

	spans := rcv.received()
	byName := map[string][]*tracepb.Span{}
	for _, s := range spans {
		byName[s.GetName()] = append(byName[s.GetName()], s)
		for _, kv := range s.GetAttributes() {
			if strings.Contains(kv.GetValue().String(), "s3cret") {
				t.Errorf("span %s: attribute %s holds the token", s.GetName(), kv.GetKey())
			}
		}
	}
	dump := func() string {
		var b strings.Builder
		for _, s := range spans {
			fmt.Fprintf(&b, "\n  %s trace %s span %s parent %s kind %v links %d", s.GetName(), hexID(s.GetTraceId()),
				hexID(s.GetSpanId()), hexID(s.GetParentSpanId()), s.GetKind(), len(s.GetLinks()))
		}
		return b.String()
	}
	attempts := map[string]*tracepb.Span{}
	for _, s := range byName["job.attempt"] {
		attempts[spanAttr(s, "switchyard.job.attempt")] = s
	}
	first, second := attempts["1"], attempts["2"]
	if first == nil || second == nil {
		t.Fatalf("want job.attempt spans of attempts 1 and 2; got:%s", dump())
	}
	for _, a := range []*tracepb.Span{first, second} {
		if hexID(a.GetTraceId()) != traceID || hexID(a.GetParentSpanId()) != recordSpan {
			t.Errorf("attempt %s: trace %s parent %s; want the record's trace %s and span %s", spanAttr(a, "switchyard.job.attempt"),
				hexID(a.GetTraceId()), hexID(a.GetParentSpanId()), traceID, recordSpan)
		}
		if spanAttr(a, "switchyard.job.kind") != "k" || spanAttr(a, "switchyard.job.queue") != "q" {
			t.Errorf("attempt span attributes: %v", a.GetAttributes())
		}
	}
	if o1, o2 := spanAttr(first, "switchyard.job.outcome"), spanAttr(second, "switchyard.job.outcome"); o1 != "retry" || o2 != "succeeded" {
		t.Errorf("outcomes %q, %q; want retry, succeeded", o1, o2)
	}
	if l := second.GetLinks(); len(l) != 1 || hexID(l[0].GetSpanId()) != hexID(first.GetSpanId()) {
		t.Errorf("attempt 2's links %v; want one, to attempt 1's span %s", l, hexID(first.GetSpanId()))
	}
	calls := byName["POST"]
	if len(calls) != 2 {
		t.Fatalf("%d client spans, want 2:%s", len(calls), dump())
	}
	mu.Lock()
	defer mu.Unlock()
	for _, c := range calls {
		var parent *tracepb.Span
		for _, a := range []*tracepb.Span{first, second} {
			if hexID(c.GetParentSpanId()) == hexID(a.GetSpanId()) {
				parent = a
			}
		}
		if parent == nil || c.GetKind() != tracepb.Span_SPAN_KIND_CLIENT {
			t.Errorf("client span %s (kind %v): parent %s is no attempt's span", hexID(c.GetSpanId()), c.GetKind(), hexID(c.GetParentSpanId()))
			continue
		}
		attempt := spanAttr(parent, "switchyard.job.attempt")
		want := fmt.Sprintf("00-%s-%s-01", traceID, hexID(c.GetSpanId()))
		var n int
		fmt.Sscan(attempt, &n)
		if sent[n] != want {
			t.Errorf("attempt %s: the target got traceparent %q, want its client span's %q", attempt, sent[n], want)
		}
	}
	batches := byName["ingest.batch"]
	linked := false
	for _, b := range batches {
		for _, l := range b.GetLinks() {
			linked = linked || hexID(l.GetTraceId()) == traceID && hexID(l.GetSpanId()) == recordSpan
		}
	}
	if !linked {
		t.Errorf("no ingest.batch span links to the record's span:%s", dump())
	}
	pauses := byName["admin.pause"]
	if len(pauses) != 1 || spanAttr(pauses[0], "switchyard.actor") != "oncall" ||
		spanAttr(pauses[0], "switchyard.action.target") != "queues/q" {
		t.Errorf("admin.pause spans %v; want one, by oncall, on queues/q", pauses)
	}
}

// TestTracingAPIEnqueueFromEnv: the endpoint from OTEL_EXPORTER_OTLP_ENDPOINT
// alone (an http:// URL: plain gRPC), and a job asked for over the API: its
// attempt is the child of the enqueue's span, itself the child of the
// request's traceparent, and the target's call the attempt's child.
func TestTracingAPIEnqueueFromEnv(t *testing.T) {
	t.Parallel()
	schema, topic := testenv.Schema(t), testenv.Topic(t, 1)
	store := testenv.Store(t, schema)
	rcv := newReceiver(t)
	tg := newTarget(t)
	cfg := writeConfig(t, testConfig{Group: testenv.Name("g"), Schema: schema, Listen: "127.0.0.1:0", Body: fmt.Sprintf(`queues:
  q: {concurrency: 2, poll_interval: 100ms}
routes:
  - {topic: %q, kind: k, queue: q, target: {http: {url: %q, timeout: 5s}}}
`, topic, tg.URL())})
	p := start(t, "run", []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + rcv.addr, "OTEL_BSP_SCHEDULE_DELAY=100"},
		"run", "--config", cfg)
	addr := adminAddr(t, p)
	const traceID, clientSpan = "5bf92f3577b34da6a3ce929d0e0e4736", "10f067aa0ba902b7"
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/queues/q/jobs?kind=k", strings.NewReader(`{}`))
	req.Header.Set("Idempotency-Key", "traced-1")
	req.Header.Set("traceparent", "00-"+traceID+"-"+clientSpan+"-01")
	res, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("enqueue: %d", res.StatusCode)
	}
	testenv.Eventually(t, 30*time.Second, "the job to succeed", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'succeeded'`) == 1
	})
	find := func(name string) *tracepb.Span {
		for _, s := range rcv.received() {
			if s.GetName() == name {
				return s
			}
		}
		return nil
	}
	// Sent by the batch processor every 100 ms, before any shutdown.
	testenv.Eventually(t, 30*time.Second, "the spans to arrive", func() bool {
		return find("admin.enqueue") != nil && find("job.attempt") != nil && find("POST") != nil
	})
	enq, attempt, call := find("admin.enqueue"), find("job.attempt"), find("POST")
	if hexID(enq.GetTraceId()) != traceID || hexID(enq.GetParentSpanId()) != clientSpan || spanAttr(enq, "switchyard.actor") != "anonymous" {
		t.Errorf("admin.enqueue: trace %s parent %s actor %q; want the request's trace and span, anonymous",
			hexID(enq.GetTraceId()), hexID(enq.GetParentSpanId()), spanAttr(enq, "switchyard.actor"))
	}
	if hexID(attempt.GetTraceId()) != traceID || hexID(attempt.GetParentSpanId()) != hexID(enq.GetSpanId()) {
		t.Errorf("job.attempt: trace %s parent %s; want the enqueue's span %s", hexID(attempt.GetTraceId()),
			hexID(attempt.GetParentSpanId()), hexID(enq.GetSpanId()))
	}
	if hexID(call.GetParentSpanId()) != hexID(attempt.GetSpanId()) {
		t.Errorf("POST: parent %s, want the attempt's span %s", hexID(call.GetParentSpanId()), hexID(attempt.GetSpanId()))
	}
	term(t, p, 30*time.Second)
}

// TestTracingLostAttemptAfterKill9: a process dies (kill -9) while its
// attempt is at the target, before it exported anything. The process
// that rescues the expired lease exports a span for that attempt (the
// child of the record's span, outcome lease_lost, from the attempt's
// start), and the next attempt's span links to it.
func TestTracingLostAttemptAfterKill9(t *testing.T) {
	t.Parallel()
	schema, topic := testenv.Schema(t), testenv.Topic(t, 1)
	store := testenv.Store(t, schema)
	rcv := newReceiver(t)
	tg := newTarget(t)
	var called atomic.Int64 // when attempt 1 reached the target (Unix ns)
	tg.setBehaviour(func(r *http.Request, c call) int {
		if c.Attempt == 1 {
			called.Store(time.Now().UnixNano())
			<-r.Context().Done() // held until its process dies
		}
		return 0
	})
	cfg := writeConfig(t, testConfig{Group: testenv.Name("g"), Schema: schema, Body: fmt.Sprintf(`tracing: {otlp_endpoint: %q, sample_ratio: 1.0}
queues:
  q: {concurrency: 1, lease: 2s, poll_interval: 100ms}
routes:
  - {topic: %q, kind: k, queue: q, max_attempts: 3, target: {http: {url: %q, timeout: 1m}}}
`, rcv.addr, topic, tg.URL())})
	// Spans are sent only at shutdown: the killed process sends none.
	env := []string{"OTEL_BSP_SCHEDULE_DELAY=600000"}
	a := start(t, "a", env, "run", "--config", cfg)
	a.waitLog(10*time.Second, "tracing on")
	const traceID, recordSpan = "6bf92f3577b34da6a3ce929d0e0e4736", "20f067aa0ba902b7"
	testenv.Produce(t, topic, &kgo.Record{Value: []byte(`{"id":"r1"}`),
		Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-" + traceID + "-" + recordSpan + "-01")}}})
	testenv.Eventually(t, 30*time.Second, "attempt 1 to reach the target", func() bool { return len(tg.received()) == 1 })
	a.kill()

	b := start(t, "b", env, "run", "--config", cfg)
	testenv.Eventually(t, 60*time.Second, "the job to succeed on its second attempt", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'succeeded' AND attempts = 2`) == 1
	})
	term(t, b, 30*time.Second)

	attempts := map[string][]*tracepb.Span{}
	for _, s := range rcv.received() {
		if s.GetName() == "job.attempt" {
			attempts[spanAttr(s, "switchyard.job.attempt")] = append(attempts[spanAttr(s, "switchyard.job.attempt")], s)
		}
	}
	if len(attempts["1"]) != 1 || len(attempts["2"]) != 1 {
		t.Fatalf("want one job.attempt span of attempt 1 and one of attempt 2; got %v", attempts)
	}
	lost, next := attempts["1"][0], attempts["2"][0]
	if hexID(lost.GetTraceId()) != traceID || hexID(lost.GetParentSpanId()) != recordSpan {
		t.Errorf("the lost attempt: trace %s parent %s; want the record's trace %s and span %s",
			hexID(lost.GetTraceId()), hexID(lost.GetParentSpanId()), traceID, recordSpan)
	}
	if o := spanAttr(lost, "switchyard.job.outcome"); o != "lease_lost" || lost.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("the lost attempt: outcome %q status %v; want lease_lost, an error", o, lost.GetStatus())
	}
	started, call := time.Unix(0, int64(lost.GetStartTimeUnixNano())), time.Unix(0, called.Load())
	if took := time.Duration(lost.GetEndTimeUnixNano() - lost.GetStartTimeUnixNano()); took < 2*time.Second || started.After(call) {
		t.Errorf("the lost attempt's span starts %v and lasts %v; want from before its call (%v), at least its lease",
			started, took, call)
	}
	if l := next.GetLinks(); len(l) != 1 || hexID(l[0].GetSpanId()) != hexID(lost.GetSpanId()) {
		t.Errorf("attempt 2's links %v; want one, to the lost attempt's span %s", l, hexID(lost.GetSpanId()))
	}
}
