package admin

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard-dev/switchyard/internal/tracing"
)

func recorder(t *testing.T) (*tracetest.SpanRecorder, trace.Tracer) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return rec, tp.Tracer(tracing.ScopeName)
}

func spanAttrs(s sdktrace.ReadOnlySpan) map[attribute.Key]string {
	m := map[attribute.Key]string{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value.String()
	}
	return m
}

const operatorTrace = "00-5bf92f3577b34da6a3ce929d0e0e4736-10f067aa0ba902b7-01"

// An operator action is a span named for it, the child of the request's
// traceparent, carrying the actor (the token's name, never the token),
// what it acted on and the answer's status; a refused action is an error
// span; reads have none.
func TestActionSpans(t *testing.T) {
	t.Parallel()
	rec, tracer := recorder(t)
	e := newEnv(t, Config{Token: "op-s3cret", Queues: []string{"bulk"}, Tracer: tracer,
		Tokens: []Token{{Name: "oncall", Secret: "oncall-s3cret", Operate: true}}})
	req := func(method, path, auth string, status int) {
		t.Helper()
		r, err := http.NewRequest(method, e.url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Authorization", auth)
		r.Header.Set("traceparent", operatorTrace)
		res, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != status {
			t.Fatalf("%s %s: %d, want %d", method, path, res.StatusCode, status)
		}
	}
	req("GET", "/v1/queues", "Bearer oncall-s3cret", http.StatusOK)
	req("POST", "/v1/queues/bulk/pause", "Bearer oncall-s3cret", http.StatusOK)
	req("POST", "/v1/jobs/999/cancel", "Bearer op-s3cret", http.StatusNotFound)
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2 (the GET has none)", len(spans))
	}
	pause, cancel := spans[0], spans[1]
	if pause.Name() != "admin.pause" || cancel.Name() != "admin.cancel" {
		t.Fatalf("spans %q, %q; want admin.pause, admin.cancel", pause.Name(), cancel.Name())
	}
	a := spanAttrs(pause)
	if a[tracing.AttrActor] != "oncall" || a[tracing.AttrTarget] != "queues/bulk" || a[tracing.AttrAction] != "pause" ||
		a[tracing.AttrHTTPStatus] != "200" || pause.SpanKind() != trace.SpanKindServer {
		t.Errorf("pause span: %v kind %v", a, pause.SpanKind())
	}
	if pause.Parent().SpanID().String() != "10f067aa0ba902b7" || pause.SpanContext().TraceID().String() != "5bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("pause span's parent %v: want the request's traceparent", pause.Parent())
	}
	c := spanAttrs(cancel)
	if c[tracing.AttrActor] != "default" || c[tracing.AttrTarget] != "jobs/999" || c[tracing.AttrHTTPStatus] != "404" ||
		cancel.Status().Code != codes.Error {
		t.Errorf("cancel span: %v status %v", c, cancel.Status())
	}
	for _, s := range spans {
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.String(), "s3cret") {
				t.Errorf("span %s: attribute %s holds a token", s.Name(), kv.Key)
			}
		}
	}
}

// An enqueue's span is stored as the job's traceparent, so that the
// job's attempts are its children; off, the job has none.
func TestEnqueueSpanParentsTheJob(t *testing.T) {
	t.Parallel()
	rec, tracer := recorder(t)
	for _, traced := range []bool{true, false} {
		var tr trace.Tracer
		if traced {
			tr = tracer
		}
		e := enqueueEnvTraced(t, tr)
		e.enqueue(t, "/v1/queues/q/jobs?kind=k", "key-1", "application/json", `{}`, "traceparent", operatorTrace).
			must(t, http.StatusAccepted)
		var keys []string
		var vals [][]byte
		if err := e.store.Pool().QueryRow(context.Background(), `SELECT header_keys, header_values FROM all_jobs`).Scan(&keys, &vals); err != nil {
			t.Fatal(err)
		}
		stored := ""
		for i, k := range keys {
			if k == "traceparent" {
				stored = string(vals[i])
			}
		}
		if !traced {
			if stored != "" {
				t.Errorf("tracing off: the job has traceparent %q, want none", stored)
			}
			continue
		}
		spans := rec.Ended()
		if len(spans) != 1 || spans[0].Name() != "admin.enqueue" {
			t.Fatalf("spans %v, want one admin.enqueue", spans)
		}
		if want := tracing.Format(spans[0].SpanContext()); stored != want {
			t.Errorf("the job's traceparent %q, want the enqueue span's %q", stored, want)
		}
		if spans[0].Parent().SpanID().String() != "10f067aa0ba902b7" {
			t.Errorf("enqueue span's parent %v, want the request's", spans[0].Parent())
		}
	}
}
