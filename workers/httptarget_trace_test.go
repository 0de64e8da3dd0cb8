package workers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard-dev/switchyard/internal/tracing"
)

const recordTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// With a tracer, a call is a client span, the child of the attempt's span
// in its context, and the target receives the traceparent of THAT span
// (not the record's), so that its own span is the call's child; the
// status is an attribute and a failure an error status. The URL in the
// span is the redacted one.
func TestHTTPTargetClientSpan(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tracer := tp.Tracer(tracing.ScopeName)

	got := make(chan string, 2)
	status := http.StatusNoContent
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Traceparent")
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	target := newTestTarget(t, HTTPTargetConfig{URL: srv.URL + "/hook?token=secret", Tracer: tracer})

	parentCtx := trace.ContextWithRemoteSpanContext(context.Background(), tracing.Parse(recordTraceparent))
	ctx, attempt := tracer.Start(parentCtx, tracing.SpanJobAttempt)
	job := &Job{ID: 7, Kind: "k", Queue: "q", Attempt: 1,
		Headers: []Header{{Key: "traceparent", Value: []byte(recordTraceparent)}}}
	if err := target.Handle(ctx, job); err != nil {
		t.Fatal(err)
	}
	status = http.StatusServiceUnavailable
	if err := target.Handle(ctx, job); err == nil {
		t.Fatal("503: no error")
	}
	attempt.End()

	spans := rec.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans ended, want 2 calls and the attempt", len(spans))
	}
	for i, call := range spans[:2] {
		sent := <-got
		if call.Name() != tracing.SpanTargetCall || call.SpanKind() != trace.SpanKindClient {
			t.Errorf("call %d: span %q kind %v, want POST, client", i, call.Name(), call.SpanKind())
		}
		if call.Parent().SpanID() != attempt.SpanContext().SpanID() || call.SpanContext().TraceID() != attempt.SpanContext().TraceID() {
			t.Errorf("call %d: parent %s, want the attempt's span %s", i, call.Parent().SpanID(), attempt.SpanContext().SpanID())
		}
		if want := tracing.Format(call.SpanContext()); sent != want {
			t.Errorf("call %d: target got traceparent %q, want the call's span %q", i, sent, want)
		}
		a := map[string]string{}
		for _, kv := range call.Attributes() {
			a[string(kv.Key)] = kv.Value.String()
		}
		if a["url.full"] != srv.URL+"/hook?token=xxxxx" || a["http.request.method"] != "POST" {
			t.Errorf("call %d: attributes %v; want the redacted URL and POST", i, a)
		}
		wantStatus, wantCode := "204", codes.Unset
		if i == 1 {
			wantStatus, wantCode = "503", codes.Error
		}
		if a["http.response.status_code"] != wantStatus || call.Status().Code != wantCode {
			t.Errorf("call %d: status %s / %v, want %s / %v", i, a["http.response.status_code"], call.Status().Code, wantStatus, wantCode)
		}
	}
}

// Without a tracer the record's traceparent goes through as it is, even
// when the context holds a span: off is today's behaviour exactly.
func TestHTTPTargetWithoutTracerPassesTheRecordsTraceparent(t *testing.T) {
	t.Parallel()
	srv, got := recordingServer(t)
	target := newTestTarget(t, HTTPTargetConfig{URL: srv.URL})
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("t").Start(context.Background(), "other")
	defer span.End()
	job := &Job{ID: 7, Kind: "k", Queue: "q", Attempt: 1,
		Headers: []Header{{Key: "traceparent", Value: []byte(recordTraceparent)}}}
	if err := target.Handle(ctx, job); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r.header.Get("Traceparent") != recordTraceparent {
		t.Errorf("traceparent %q, want the record's %q", r.header.Get("Traceparent"), recordTraceparent)
	}
}

// Only a valid W3C traceparent of the record's goes to the target: one
// that is not (a producer's typo, another format) would start the
// target's trace from garbage, so it is dropped, and the first valid one,
// if any, goes instead.
func TestHTTPTargetDropsAnInvalidTraceparent(t *testing.T) {
	t.Parallel()
	srv, got := recordingServer(t)
	target := newTestTarget(t, HTTPTargetConfig{URL: srv.URL})
	for _, c := range []struct {
		name          string
		headers, want []string
	}{
		{"not a traceparent", []string{"hello"}, nil},
		{"all-zero trace id", []string{"00-00000000000000000000000000000000-00f067aa0ba902b7-01"}, nil},
		{"upper-case hex", []string{strings.ToUpper(recordTraceparent)}, nil},
		{"an invalid one, then a valid one", []string{"00-xyz", recordTraceparent}, []string{recordTraceparent}},
	} {
		job := &Job{ID: 7, Kind: "k", Queue: "q", Attempt: 1}
		for _, v := range c.headers {
			job.Headers = append(job.Headers, Header{Key: "traceparent", Value: []byte(v)})
		}
		if err := target.Handle(context.Background(), job); err != nil {
			t.Fatal(err)
		}
		if sent := (<-got).header.Values("Traceparent"); !slices.Equal(sent, c.want) {
			t.Errorf("%s: the target got traceparent %q, want %q", c.name, sent, c.want)
		}
	}
}
