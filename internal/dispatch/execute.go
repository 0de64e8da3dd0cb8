package dispatch

// Running handlers and turning their returns into outcomes.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/tracing"
	"github.com/switchyard-dev/switchyard/jobstate"
	"github.com/switchyard-dev/switchyard/workers"
)

// SaveCheckpoint saves the job's checkpoint under this attempt's token
// (workers.Attempt).
func (r *running) SaveCheckpoint(ctx context.Context, data []byte) error {
	err := r.pool.env.store.JobCheckpoint(ctx, r.job.ID, r.job.Token, data)
	if errors.Is(err, pgstore.ErrLeaseLost) {
		return workers.ErrLeaseLost
	}
	return err
}

// Secret is this attempt's workers.AttemptSecret under the deployment's
// attempt key, "" without one (workers.Attempt).
func (r *running) Secret() string {
	if key := r.pool.env.attemptKey; key != nil {
		return workers.AttemptSecret(key, r.job.ID, r.job.Token)
	}
	return ""
}

func (p *pool) execute(r *running) {
	defer p.jobs.Done()
	ctx, job := r.ctx, r.job
	start := time.Now()
	if m := p.env.metrics; m != nil && !job.RunnableAt.IsZero() {
		m.QueueWait.WithLabelValues(job.Queue, job.Kind).Observe(max(0, start.Sub(job.RunnableAt).Seconds()))
	}
	// Off, the tracer is nil and nothing here costs anything.
	var span trace.Span
	if p.env.tracer != nil {
		ctx, span = startAttempt(ctx, p.env.tracer, job)
	}
	// A job that waited in ready can lose its lease meanwhile.
	p.restamp(r)
	err := context.Cause(ctx)
	if err == nil {
		err = p.invoke(ctx, job)
	}
	elapsed := time.Since(start)
	cause := context.Cause(ctx)
	p.returned(job.Token)
	if state, ok := job.Finished(); ok {
		// The handler committed the outcome in its own transaction
		// (whatever it returned after: a stale version's ErrStale too).
		p.finish(job.Token)
		p.observe(job, string(state), elapsed)
		endAttempt(span, string(state), "")
		return
	}
	switch {
	case errors.Is(cause, workers.ErrLeaseLost), errors.Is(cause, workers.ErrCancelled):
		// Cancelled, or someone else may own the job now; whatever we'd
		// write would be rejected by the token anyway.
		p.finish(job.Token)
		outcome := "lease_lost"
		if errors.Is(cause, workers.ErrCancelled) {
			outcome = "cancelled"
		}
		p.observe(job, outcome, elapsed)
		endAttempt(span, outcome, cause.Error())
		return
	case err != nil && errors.Is(cause, workers.ErrShutdown):
		p.release(job)
		endAttempt(span, "released", err.Error())
		return
	}
	out := p.outcome(job, err)
	out.Handoff = p.handoff(r, out)
	if span != nil {
		out.Span = tracing.Format(span.SpanContext())
	}
	r.elapsed, r.span = elapsed, span
	p.env.completer.submit(out, r)
}

// settled ends an attempt whose outcome went to the completer, once the
// write is settled (settler): counted then, as a rejected (stale) outcome
// is a lost lease, not a success.
func (r *running) settled(out pgstore.Outcome, applied bool, next *workers.Job) {
	p, job := r.pool, r.job
	outcome := "lease_lost"
	if applied {
		outcome = metricOutcome(out.State)
	}
	if applied && out.State == jobstate.Dead {
		logDead(p.env.events, job.ID, job.Kind, job.Queue, job.Attempt, out.Reason, out.Error)
	}
	p.observe(job, outcome, r.elapsed)
	endAttempt(r.span, outcome, out.Error)
	p.finish(job.Token)
	if next != nil {
		p.adopt(next, r.chain)
	}
}

// logDead logs the events line of a job that ended dead, in whichever
// process ended it: its attempt's, or the one that rescued its lease.
func logDead(events *zap.Logger, id int64, kind, queue string, attempts int, reason, err string) {
	events.Info("job dead", zap.Int64("job_id", id), zap.String("kind", kind), zap.String("queue", queue),
		zap.Int("attempts", attempts), zap.String("reason", reason), zap.String("error", err))
}

// startAttempt starts the span of an attempt: a child of the trace
// context of the job's record (its traceparent header) when it had one, a
// new trace otherwise, linked to the previous attempt's span.
func startAttempt(ctx context.Context, tracer trace.Tracer, job *workers.Job, more ...trace.SpanStartOption) (context.Context, trace.Span) {
	for _, h := range job.Headers {
		if strings.EqualFold(h.Key, tracing.HeaderName) {
			if sc := tracing.Parse(string(h.Value)); sc.IsValid() {
				ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
			}
			break
		}
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		tracing.AttrJobID.Int64(job.ID), tracing.AttrJobKind.String(job.Kind), tracing.AttrJobQueue.String(job.Queue),
		tracing.AttrJobRoute.String(job.Route), tracing.AttrJobAttempt.Int(job.Attempt))}
	if prev := tracing.Parse(job.PreviousAttemptSpan); prev.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: prev,
			Attributes: []attribute.KeyValue{tracing.AttrLinkKind.String("previous_attempt")}}))
	}
	return tracer.Start(ctx, tracing.SpanJobAttempt, append(opts, more...)...)
}

// endAttempt ends an attempt's span (nil: tracing is off) with its
// outcome; an attempt that did not succeed carries its error.
func endAttempt(span trace.Span, outcome, errText string) {
	if span == nil {
		return
	}
	span.SetAttributes(tracing.AttrJobOutcome.String(outcome))
	if outcome != string(jobstate.Succeeded) && errText != "" {
		span.SetStatus(codes.Error, truncateText(errText, maxSpanError))
	}
	span.End()
}

// maxSpanError bounds the error an attempt's span carries, as the job's
// error history bounds each entry.
const maxSpanError = 1024

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

// invoke runs the handler with the attempt's deadline, turning a panic
// into an ordinary (transient) error rather than a dead process.
func (p *pool) invoke(ctx context.Context, job *workers.Job) (err error) {
	defer func() {
		if r := recover(); r != nil {
			p.log.Error("handler panicked", zap.Int64("job_id", job.ID), zap.Any("panic", r),
				zap.ByteString("stack", debug.Stack()))
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	h, err := p.env.resolve(job)
	if err != nil {
		return workers.Permanent(err)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, p.q.MaxRuntime, p.overRuntime)
	defer cancel()
	return h.Handle(ctx, job)
}

// outcome decides what an attempt's error means (SPEC §5 for HTTP; the
// same rules for Go handlers).
func (p *pool) outcome(job *workers.Job, err error) pgstore.Outcome {
	o := pgstore.Outcome{ID: job.ID, Token: job.Token}
	if job.Ordered {
		o.Lane = &pgstore.LaneRef{Route: job.Route, Key: job.Key, Version: job.Version}
	}
	switch {
	case err == nil:
		o.State = jobstate.Succeeded
		if ct, data := job.Result(); data != nil {
			if keep := p.env.resultMax[job.Route]; keep > 0 {
				o.Result, o.ResultType = data[:min(len(data), keep)], ct
			}
		}
		return o
	case workers.IsPermanent(err):
		o.State, o.Reason = jobstate.Dead, "permanent"
	case job.Attempt >= job.MaxAttempts:
		o.State, o.Reason = jobstate.Dead, "max_attempts"
	default:
		o.State = jobstate.Retrying
		o.Delay = p.env.backoff(job, err)
		if asked, ok := workers.RetryDelay(err); ok && o.Delay < asked {
			// The error names the delay asked for ("retry after 1m40s");
			// recorded alone, it would read as when the retry runs.
			err = fmt.Errorf("backoff.max caps the retry at %s: %w", o.Delay, err)
		}
	}
	o.Error = err.Error()
	return o
}

// backoff is exponential with full jitter: a uniform delay in
// [0, min(max, initial·2^(attempt−1))]. A RetryAfter delay wins, capped
// by max.
func (d *Dispatcher) backoff(job *workers.Job, err error) time.Duration {
	b, ok := d.cfg.Backoff[job.Route]
	if !ok {
		b = DefaultBackoff
	}
	if after, ok := workers.RetryDelay(err); ok {
		return min(after, b.Max)
	}
	ceil := b.Initial
	for i := 1; i < job.Attempt && ceil < b.Max; i++ {
		ceil *= 2
	}
	ceil = min(ceil, b.Max)
	if ceil <= 0 {
		return 0
	}
	return rand.N(ceil + 1)
}

func metricOutcome(state jobstate.State) string {
	switch state {
	case jobstate.Succeeded, jobstate.Dead:
		return string(state)
	}
	return "retry"
}

func (p *pool) observe(job *workers.Job, outcome string, elapsed time.Duration) {
	m := p.env.metrics
	if m == nil {
		return
	}
	// A lost lease is counted by the process that rescues it (rescued),
	// which also sees the attempts of processes that died: counted here
	// too, a stalled process's would count twice. A cancelled attempt is
	// counted by the cancel's own transaction (pgstore.JobCancel), which
	// also sees the attempts whose handler returned before it arrived.
	if outcome != "lease_lost" && outcome != "cancelled" {
		m.JobAttempts.WithLabelValues(job.Kind, outcome).Inc()
	}
	if outcome == string(jobstate.Succeeded) || outcome == string(jobstate.Dead) {
		m.Flow.Finished(job.Queue, 1)
	}
	if outcome == string(jobstate.Succeeded) && !job.ArrivedAt.IsZero() {
		m.JobLatency.WithLabelValues(job.Queue, job.Kind).Observe(max(0, time.Since(job.ArrivedAt).Seconds()))
	}
	if elapsed > 0 {
		m.JobDuration.WithLabelValues(job.Kind, outcome).Observe(elapsed.Seconds())
	}
}

// start runs a held attempt on a worker. p.mu is held and the pool is not
// closed, so that the jobs.Add happens before Stop's jobs.Wait.
func (p *pool) start(r *running) {
	p.busy++
	p.jobs.Add(1)
	p.work <- r
	if p.workers < p.busy {
		p.workers++
		go p.worker()
	}
}

// worker runs the attempts started on the pool until it closes.
func (p *pool) worker() {
	for r := range p.work {
		p.execute(r)
	}
}

// returned frees the worker slot of a handler that has returned, or gives
// it to the first handed-off job waiting.
func (p *pool) returned(token int64) {
	p.mu.Lock()
	if r, ok := p.leases[token]; ok && !r.returned {
		r.returned = true
		p.busy--
		if r.slot {
			r.slot = false
			p.env.slots.put(r.job.Route)
		}
	}
	started := p.startReady()
	p.mu.Unlock()
	if !started {
		p.signalFreed()
	}
}

// startReady starts waiting jobs (prefetched or handed off) on the free
// workers, in order, passing over those whose route has no free slot of
// its max_running, and says whether it started any. p.mu is held.
func (p *pool) startReady() bool {
	started := false
	for i := 0; i < len(p.ready) && !p.closed && p.busy+p.reserved < p.q.Concurrency && !p.env.paused(p.q.Name); {
		if !p.startable(p.ready[i]) {
			i++
			continue
		}
		p.start(p.ready[i])
		p.ready = slices.Delete(p.ready, i, i+1)
		started = true
	}
	return started
}

// startable takes what a held job needs to start beside a worker: a slot
// of its route's max_running, if it has one. p.mu is held.
func (p *pool) startable(r *running) bool {
	ok, took := p.env.slots.take(r.job.Route, p.q.Lease)
	r.slot = took
	return ok
}

func (p *pool) signalFreed() {
	select {
	case p.freed <- struct{}{}:
	default:
	}
}

// workerJob is what a handler is handed of a claimed job.
func workerJob(c *pgstore.Claimed) *workers.Job {
	if c == nil {
		return nil
	}
	j := &workers.Job{ID: c.ID, Kind: c.Kind, Queue: c.Queue, Route: c.Route, Key: c.Key, Version: c.Version,
		Attempt: c.Attempt, MaxAttempts: c.MaxAttempts, Token: c.Token, Payload: c.Payload,
		Source:    workers.Source{Topic: c.Source.Topic, Partition: c.Source.Partition, Offset: c.Source.Offset},
		CreatedAt: c.CreatedAt, RunnableAt: c.ScheduledAt, ArrivedAt: c.ArrivedAt, Ordered: c.Lane, Checkpoint: c.Checkpoint,
		PreviousAttemptSpan: c.AttemptSpan}
	for _, h := range c.Headers {
		j.Headers = append(j.Headers, workers.Header{Key: h.Key, Value: h.Value})
	}
	return j
}
