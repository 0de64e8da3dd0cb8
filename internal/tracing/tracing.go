package tracing

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/switchyard-dev/switchyard/config"
)

// ScopeName is the instrumentation scope of every Switchyard span.
const ScopeName = "github.com/switchyard-dev/switchyard"

// Span names (README "Tracing").
const (
	SpanIngestBatch = "ingest.batch"
	SpanJobAttempt  = "job.attempt"
	// SpanTargetCall is the HTTP target's client span: the method, as
	// OTel's HTTP conventions name client spans.
	SpanTargetCall = "POST"
	// SpanActionPrefix starts the name of an operator action's span:
	// admin.cancel, admin.redrive, …
	SpanActionPrefix = "admin."
)

// Attribute keys. The job's are Switchyard's own; the rest are OTel's
// semantic conventions.
const (
	AttrJobID      = attribute.Key("switchyard.job.id")
	AttrJobKind    = attribute.Key("switchyard.job.kind")
	AttrJobQueue   = attribute.Key("switchyard.job.queue")
	AttrJobRoute   = attribute.Key("switchyard.job.route")
	AttrJobAttempt = attribute.Key("switchyard.job.attempt")
	// AttrJobOutcome takes switchyard_job_attempts_total's outcome
	// values: succeeded, retry, dead, cancelled, lease_lost; and
	// released, for an attempt handed back at shutdown (which that
	// metric does not count).
	AttrJobOutcome = attribute.Key("switchyard.job.outcome")

	AttrIngestJobs         = attribute.Key("switchyard.ingest.jobs")
	AttrIngestPartitions   = attribute.Key("switchyard.ingest.partitions")
	AttrIngestLinksDropped = attribute.Key("switchyard.ingest.links_dropped")
	AttrIngestTries        = attribute.Key("switchyard.ingest.tries")

	// AttrLinkKind says what a link points to: previous_attempt (a
	// retry's link), record (an ingest batch's links).
	AttrLinkKind = attribute.Key("switchyard.link")

	AttrAction = attribute.Key("switchyard.action")
	AttrActor  = attribute.Key("switchyard.actor")
	AttrTarget = attribute.Key("switchyard.action.target")

	AttrMessagingSystem     = attribute.Key("messaging.system")
	AttrMessagingBatchCount = attribute.Key("messaging.batch.message_count")
	AttrHTTPMethod          = attribute.Key("http.request.method")
	AttrHTTPStatus          = attribute.Key("http.response.status_code")
	AttrURL                 = attribute.Key("url.full")
	AttrServerAddress       = attribute.Key("server.address")
)

// MaxLinks caps the links of one ingest batch's span to its records'
// traces: a batch holds up to kafka.fetch_max_records records, and a span
// with thousands of links is one no backend shows usefully (the SDK's own
// default limit is 128 too). The links past it are counted in
// switchyard.ingest.links_dropped.
const MaxLinks = 128

// Config is the tracing block of the config, plus what is not in the
// file.
type Config struct {
	// Endpoint is tracing.otlp_endpoint: host:port of an OTLP gRPC
	// receiver. Defaults to the environment's, else tracing is off.
	Endpoint string
	// SampleRatio is tracing.sample_ratio, in [0, 1]: the share of new
	// traces (records without a traceparent) that are sampled.
	SampleRatio float64
	// ServiceVersion is the resource's service.version. Defaults to the
	// binary's module version.
	ServiceVersion string
	// Getenv reads the OTEL_* variables that decide whether tracing is on.
	// Defaults to os.Getenv. (The exporter and the SDK read the others
	// from the process's environment themselves.)
	Getenv func(string) string
	// Exporter, when set, replaces the OTLP exporter and turns tracing on
	// whatever the endpoints say: tests pass an in-memory one.
	Exporter sdktrace.SpanExporter
	// Syncer exports each span as it ends rather than in batches: for
	// tests with an in-memory Exporter.
	Syncer bool
}

// Tracing is the process's tracer provider, or nothing when off. The zero
// value and nil are off.
type Tracing struct {
	sdk    *sdktrace.TracerProvider
	tracer trace.Tracer
	// Endpoint is where spans go, for the start-up log ("" when off or
	// in-memory).
	Endpoint string
}

// Off is tracing turned off.
func Off() *Tracing { return &Tracing{} }

// New builds the provider cfg and the environment ask for: off (Off)
// when no endpoint is configured anywhere.
func New(ctx context.Context, cfg Config) (*Tracing, error) {
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if cfg.SampleRatio < 0 || cfg.SampleRatio > 1 {
		return nil, fmt.Errorf("tracing.sample_ratio: %v is out of range 0..1", cfg.SampleRatio)
	}
	if disabled, _ := strconv.ParseBool(getenv("OTEL_SDK_DISABLED")); disabled {
		return Off(), nil
	}
	envEndpoint := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if envEndpoint == "" {
		envEndpoint = getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	exp := cfg.Exporter
	shown := ""
	if exp == nil {
		if cfg.Endpoint == "" && envEndpoint == "" {
			return Off(), nil
		}
		var opts []otlptracegrpc.Option
		shown = envEndpoint
		if cfg.Endpoint != "" {
			if _, _, err := net.SplitHostPort(cfg.Endpoint); err != nil {
				return nil, fmt.Errorf("tracing.otlp_endpoint: %q: want host:port", cfg.Endpoint)
			}
			opts = append(opts, otlptracegrpc.WithEndpoint(cfg.Endpoint))
			if config.Loopback(cfg.Endpoint) {
				opts = append(opts, otlptracegrpc.WithInsecure())
			}
			shown = cfg.Endpoint
		}
		// New does not connect: the gRPC client dials lazily, so a
		// receiver that is down costs dropped spans, never a start-up.
		var err error
		if exp, err = otlptracegrpc.New(ctx, opts...); err != nil {
			return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
		}
	}
	if cfg.ServiceVersion == "" {
		if bi, ok := debug.ReadBuildInfo(); ok {
			cfg.ServiceVersion = bi.Main.Version
		}
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", "switchyard"), attribute.String("service.version", cfg.ServiceVersion)))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over ours.
	if env, err := resource.New(ctx, resource.WithFromEnv()); err == nil {
		if merged, err := resource.Merge(res, env); err == nil {
			res = merged
		}
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if cfg.Syncer {
		opts = append(opts, sdktrace.WithSyncer(exp))
	} else {
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	// The SDK reads OTEL_TRACES_SAMPLER itself; an explicit sampler would
	// override it, so sample_ratio applies only when it is unset.
	if getenv("OTEL_TRACES_SAMPLER") == "" {
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	return &Tracing{sdk: tp, tracer: tp.Tracer(ScopeName), Endpoint: shown}, nil
}

// Enabled reports whether spans are recorded and exported.
func (t *Tracing) Enabled() bool { return t != nil && t.sdk != nil }

// Tracer is the tracer of every Switchyard span; nil when off, which
// components test for before doing anything on a hot path.
func (t *Tracing) Tracer() trace.Tracer {
	if !t.Enabled() {
		return nil
	}
	return t.tracer
}

// Provider is the tracer provider: the no-op one when off.
func (t *Tracing) Provider() trace.TracerProvider {
	if !t.Enabled() {
		return noop.NewTracerProvider()
	}
	return t.sdk
}

// Shutdown ends the provider, exporting the spans still buffered, within
// ctx: those not sent by its deadline are dropped. Idempotent; nothing to
// do when off.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if !t.Enabled() {
		return nil
	}
	err := t.sdk.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("tracing: spans not exported by the shutdown deadline were dropped: %w", err)
	}
	return err
}

// HeaderName is the W3C trace context header.
const HeaderName = "traceparent"

// Parse reads a W3C traceparent value into a remote span context; the
// zero (invalid) one when v is not a valid traceparent.
func Parse(v string) trace.SpanContext {
	if v == "" {
		return trace.SpanContext{}
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), one(v))
	return trace.SpanContextFromContext(ctx)
}

// Format writes sc as a W3C traceparent value; "" for an invalid sc.
func Format(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	return fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
}

// one is a carrier holding a single traceparent.
type one string

func (c one) Get(key string) string {
	if strings.EqualFold(key, HeaderName) {
		return string(c)
	}
	return ""
}
func (one) Set(string, string) {}
func (one) Keys() []string     { return []string{HeaderName} }

// Propagator writes a span's context into outgoing requests: W3C trace
// context only (traceparent and tracestate).
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}
