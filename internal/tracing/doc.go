// Package tracing owns Switchyard's OpenTelemetry tracer provider: built
// from the `tracing:` block of the config and the standard OTEL_*
// environment, shut down (and flushed) with the engine. It also holds the
// few helpers every traced component shares: reading a W3C traceparent
// into a span context, writing one back, and the names and attribute keys
// of the spans, so that each is defined once.
//
// # Off costs nothing
//
// Tracing is on only when an endpoint is configured somewhere:
// tracing.otlp_endpoint, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
// OTEL_EXPORTER_OTLP_ENDPOINT (and OTEL_SDK_DISABLED=true turns it off
// whatever the rest says). Off, Tracer returns nil and every component
// tests for nil before doing anything: the hot paths (a fetched batch, a
// job attempt, an HTTP target call) then parse no header, allocate no
// span and no context, and the HTTP target sends a record's traceparent
// through exactly as it did before tracing existed; the admin API mounts
// its actions unwrapped, and an API enqueue stores no traceparent. The
// test of this is TestOffIsNil and the workers' pass-through tests, which
// run with no tracer.
//
// # Sampling
//
// ParentBased(TraceIDRatioBased(sample_ratio)): a record that carries a
// sampled traceparent is traced whatever the ratio (the producer decided),
// one without is a new trace sampled at the ratio. OTEL_TRACES_SAMPLER,
// when set, wins over sample_ratio, as the SDK reads it.
//
// # Endpoints
//
// tracing.otlp_endpoint is host:port for OTLP over gRPC; it wins over the
// environment's endpoint, as an option passed in code wins over the
// environment in every OTel SDK. A loopback host (127.0.0.0/8, ::1,
// localhost: a collector beside the process) is spoken to in plain gRPC;
// any other host with TLS unless OTEL_EXPORTER_OTLP_INSECURE=true. An
// endpoint from the environment is a URL, whose scheme (http or https)
// decides. The other OTEL_EXPORTER_OTLP_* settings (headers, timeout,
// certificates, compression) and OTEL_SERVICE_NAME /
// OTEL_RESOURCE_ATTRIBUTES are read by the exporter and the SDK
// themselves.
//
// # Spans and their parentage
//
// The README's "Tracing" lists the spans and their attributes; the
// choices behind them:
//
//   - A job's attempt is the child of its record's traceparent: the
//     producer's trace is the one a person follows, and an attempt is the
//     work that record asked for. The ingest batch cannot be that parent (a
//     batch has many records, each of another trace), so it is a trace of
//     its own that links to each record's, capped at MaxLinks.
//   - A retry links to the attempt before it, rather than being its child:
//     both are children of the record, siblings in one trace, and the link
//     says which came first. The previous attempt may have run in another
//     process, so its span context is stored with the job (the column
//     jobs.attempt_span, written by the same statement that records the
//     outcome, and only while tracing is on: off, the statement passes a
//     NULL array and writes nothing).
//   - An attempt whose process died has a span too, made by the process
//     that rescues its expired lease (dispatch's rescuer): the same
//     job.attempt span, from the attempt's start (jobs.started_at) to the
//     rescue, outcome lease_lost (dead when it was the job's last attempt,
//     parked by the rescue), and its context stored as attempt_span
//     in the rescue's transaction, so that the next attempt links to it.
//     The dead process's own span, never ended, is never exported. A
//     process that only stalled past its lease (SIGSTOP, a long pause)
//     ends its own span as lease_lost when it wakes: that attempt then has
//     two spans, the rescuer's the one the next attempt links to.
//   - The HTTP target's call is a client span, a child of the attempt, and
//     the target receives that span's traceparent (not the record's), so
//     that the target's server span hangs under the call that made it.
//   - An API enqueue's span is stored as the job's traceparent header:
//     the attempts of a job asked for over HTTP are children of the request
//     that asked, as a Kafka job's are of its producer.
//   - An attempt's outcome uses switchyard_job_attempts_total's words, so
//     that a trace and a dashboard say the same thing.
//
// # What it must never do
//
// Put a secret in a span: tokens, attempt secrets, payloads and header
// values stay out; the admin actions carry the actor's token name, never
// the token. Nor may it block shutdown past its context: Shutdown flushes
// what it can within the engine's shutdown deadline and drops the rest.
package tracing
