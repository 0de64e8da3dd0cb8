package tracing

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

// With no endpoint anywhere, tracing is off: a nil tracer (what the hot
// paths test for) and the no-op provider, nothing to shut down.
func TestOffIsNil(t *testing.T) {
	for name, getenv := range map[string]func(string) string{
		"nothing set": env(nil),
		"sdk disabled": env(map[string]string{"OTEL_SDK_DISABLED": "true",
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"}),
	} {
		tr, err := New(context.Background(), Config{SampleRatio: 1, Getenv: getenv})
		if err != nil {
			t.Fatal(err)
		}
		if tr.Enabled() || tr.Tracer() != nil {
			t.Errorf("%s: enabled %v, tracer %v; want off and nil", name, tr.Enabled(), tr.Tracer())
		}
		_, span := tr.Provider().Tracer("x").Start(context.Background(), "s")
		if span.IsRecording() || span.SpanContext().IsValid() {
			t.Errorf("%s: the provider records spans; want the no-op one", name)
		}
		if err := tr.Shutdown(context.Background()); err != nil {
			t.Errorf("%s: shutdown: %v", name, err)
		}
	}
	var none *Tracing
	if none.Enabled() || none.Tracer() != nil {
		t.Error("a nil *Tracing is not off")
	}
}

// An endpoint in the config or in either OTEL variable turns it on; the
// config's wins. Nothing connects at New.
func TestEndpointTurnsItOn(t *testing.T) {
	for name, c := range map[string]struct {
		cfg  string
		env  map[string]string
		want string
	}{
		"config":      {cfg: "127.0.0.1:4317", want: "127.0.0.1:4317"},
		"env":         {env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, want: "http://127.0.0.1:1"},
		"traces env":  {env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:2"}, want: "http://127.0.0.1:2"},
		"config wins": {cfg: "localhost:3", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}, want: "localhost:3"},
	} {
		tr, err := New(context.Background(), Config{Endpoint: c.cfg, SampleRatio: 1, Getenv: env(c.env)})
		if err != nil {
			t.Fatal(err)
		}
		if !tr.Enabled() || tr.Tracer() == nil || tr.Endpoint != c.want {
			t.Errorf("%s: enabled %v endpoint %q; want on, %q", name, tr.Enabled(), tr.Endpoint, c.want)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // nothing is buffered: shutting down sends nothing
		_ = tr.Shutdown(ctx)
	}
	if _, err := New(context.Background(), Config{SampleRatio: 1.5, Getenv: env(nil)}); err == nil {
		t.Error("a ratio of 1.5 was accepted")
	}
	if _, err := New(context.Background(), Config{Endpoint: "collector", SampleRatio: 1, Getenv: env(nil)}); err == nil {
		t.Error("an endpoint without a port was accepted")
	}
}

// ParentBased(TraceIDRatioBased): at ratio 0 a new trace is not sampled,
// but a record's sampled traceparent is followed, and an unsampled one
// is not.
func TestSamplerFollowsTheRecord(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr, err := New(context.Background(), Config{SampleRatio: 0, Getenv: env(nil), Exporter: exp, Syncer: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	start := func(parent string) trace.Span {
		ctx := context.Background()
		if sc := Parse(parent); sc.IsValid() {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
		_, s := tr.Tracer().Start(ctx, "s")
		s.End()
		return s
	}
	if s := start(""); s.SpanContext().IsSampled() {
		t.Error("ratio 0: a new trace was sampled")
	}
	if s := start("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"); !s.SpanContext().IsSampled() {
		t.Error("a sampled parent was not followed")
	}
	if s := start("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"); s.SpanContext().IsSampled() {
		t.Error("an unsampled parent was sampled")
	}
	if got := len(exp.GetSpans()); got != 1 {
		t.Errorf("%d spans exported, want 1", got)
	}
	var _ sdktrace.SpanExporter = exp
}

func TestParseFormat(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sc := Parse(tp)
	if !sc.IsValid() || !sc.IsRemote() || Format(sc) != tp {
		t.Fatalf("Parse(%q) = %v; Format = %q", tp, sc, Format(sc))
	}
	for _, bad := range []string{"", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"} {
		if Parse(bad).IsValid() {
			t.Errorf("Parse(%q) is valid", bad)
		}
	}
	if Format(trace.SpanContext{}) != "" {
		t.Error("an invalid span context formats")
	}
}
