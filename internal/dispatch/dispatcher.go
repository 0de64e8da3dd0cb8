package dispatch

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/metrics"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/tracing"
	"github.com/switchyard-dev/switchyard/jobstate"
	"github.com/switchyard-dev/switchyard/workers"
)

// Queue configures one worker pool.
type Queue struct {
	Name string
	// Concurrency is the number of jobs this process runs at once.
	Concurrency int
	// Lease is how long a claim lasts without a heartbeat.
	Lease time.Duration
	// MaxRuntime caps one attempt; the lease never extends past it.
	MaxRuntime time.Duration
	// PollInterval is how often an idle pool looks for work.
	PollInterval time.Duration
	// Prefetch is how many jobs the pool may claim beyond its idle
	// workers under a backlog (config queues.*.prefetch); 0: none.
	Prefetch int
	// StealFrom lists queues whose runnable jobs this pool's idle workers
	// run when its own queue has none, in order.
	StealFrom []string
	// AllLimited: every route and schedule that feeds the queue has a
	// flow limit, so its claims take limited jobs only and look for the
	// others (left by routes no longer configured) once every
	// leftoverSweep.
	AllLimited bool
}

// Backoff is a route's retry policy: exponential, full jitter.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
}

// Config configures a Dispatcher.
type Config struct {
	Queues []Queue
	// Backoff per route; routes not listed use DefaultBackoff.
	Backoff map[string]Backoff
	// Resolve returns the handler for a job; an error makes the attempt
	// fail permanently (no handler is a wiring bug retries cannot fix).
	Resolve func(*workers.Job) (workers.Handler, error)
	// Grace is how long in-flight jobs may finish after Stop
	// (shutdown_grace). Required.
	Grace time.Duration
	// Retention is how long finished jobs are kept, by final state;
	// states not listed (or 0) are kept forever.
	Retention map[string]time.Duration
	// AuditRetention is how long the audit log keeps an action; 0 keeps
	// it forever.
	AuditRetention time.Duration
	// VersionRetention is how long an idle versioned lane keeps its last
	// applied version (pgstore.LanePrune); 0 keeps it forever.
	VersionRetention time.Duration
	// RescueInterval is how often expired leases are looked for.
	// Defaults to a third of the shortest lease, at most 5s.
	RescueInterval time.Duration
	// Paused reports whether an operator paused a queue (flow.Watcher):
	// its pool then claims nothing, starts no prefetched job and takes no
	// lane handoff until it is resumed (and woken, Wake). The claim
	// statement refuses a paused queue by itself; this stops the asking.
	// Nil: no queue is ever paused.
	Paused func(queue string) bool
	// Limits are the fleet-wide flow limits of routes, by queue: queue →
	// route → limits. Their jobs are claimed apart
	// (pgstore.JobClaimParams.Limits), a route's max_running is held by
	// slots this process leases, and they are never handed off.
	Limits map[string]map[string]pgstore.FlowLimit
	// ResultMaxBytes is how much of a success's result is kept, by route
	// (result_max_bytes); a route not listed keeps none.
	ResultMaxBytes map[string]int
	// AttemptKey signs every attempt's workers.Job.AttemptSecret
	// (pgstore.Store.AttemptKey); nil: attempts carry none.
	AttemptKey []byte
	// Tracer, when set, gives every attempt a span (internal/tracing);
	// nil, tracing is off and attempts cost nothing more.
	Tracer trace.Tracer
}

// DefaultBackoff applies to routes without their own.
var DefaultBackoff = Backoff{Initial: config.DefaultBackoffInitial, Max: config.DefaultBackoffMax}

// Dispatcher owns the pools of one process.
type Dispatcher struct {
	cfg   Config
	store *pgstore.Store
	log   *zap.Logger
	// events logs one line per job that ends dead (metrics.EventsLogger),
	// in its pool or in the rescue that parked it.
	events  *zap.Logger
	metrics *metrics.Metrics

	pools     map[string]*pool
	completer *completer

	stopClaim chan struct{} // closed: pools stop claiming
	hardStop  context.CancelCauseFunc
	jobCtx    context.Context // done when in-flight jobs must stop (poolEnv.jobCtx)
	wg        sync.WaitGroup  // pool loops, rescuer, listener
	stopOnce  sync.Once
	stopErr   error // what Stop could not finish
	started   bool
	// process names this dispatcher's rows in the reservations and
	// flow_slots tables.
	process string
	// slots are this process's shares of its routes' max_running (nil:
	// none has one), leased until slotsStop is closed.
	slots     *slots
	slotsStop chan struct{}
	slotsDone chan struct{}
	// lanesAfter is where the next prune of idle lanes starts (the
	// rescuer's alone).
	lanesAfter pgstore.LaneKey
}

// New validates cfg and builds a dispatcher.
func New(cfg Config, store *pgstore.Store, log *zap.Logger, m *metrics.Metrics) (*Dispatcher, error) {
	if cfg.Resolve == nil {
		return nil, errors.New("dispatch: Resolve is required")
	}
	if cfg.Grace <= 0 {
		return nil, fmt.Errorf("shutdown_grace: %v is not positive", cfg.Grace)
	}
	minLease, maxLease := time.Duration(0), time.Duration(0)
	for _, q := range cfg.Queues {
		maxLease = max(maxLease, q.Lease)
		if q.Concurrency < 1 || q.Lease <= 0 || q.MaxRuntime <= 0 || q.PollInterval <= 0 {
			return nil, fmt.Errorf("queues.%s: concurrency, lease, max_runtime and poll_interval must be positive", q.Name)
		}
		if minLease == 0 || q.Lease < minLease {
			minLease = q.Lease
		}
	}
	if cfg.RescueInterval == 0 {
		cfg.RescueInterval = min(max(minLease/3, 100*time.Millisecond), 5*time.Second)
	}
	d := &Dispatcher{cfg: cfg, store: store, log: log.Named("dispatch"), metrics: m,
		pools: map[string]*pool{}, stopClaim: make(chan struct{}), process: rand.Text()}
	d.events = d.log.Named(metrics.EventsLogger)
	d.jobCtx, d.hardStop = context.WithCancelCause(context.Background())
	d.completer = newCompleter(store, d.log, m)
	d.slots = newSlots(store, d.log, d.process, cfg.Limits, maxLease, minLease, d.wakeAll)
	d.slotsStop, d.slotsDone = make(chan struct{}), make(chan struct{})
	for _, q := range cfg.Queues {
		d.pools[q.Name] = newPool(d.poolEnv(), d.log, q)
	}
	return d, nil
}

// poolEnv is what the dispatcher gives each of its pools.
func (d *Dispatcher) poolEnv() poolEnv {
	return poolEnv{store: d.store, events: d.events, metrics: d.metrics, completer: d.completer, resolve: d.cfg.Resolve,
		backoff: d.backoff, jobCtx: d.jobCtx, stopClaim: d.stopClaim, paused: d.cfg.Paused, limits: d.cfg.Limits,
		slots: d.slots, holder: d.process, resultMax: d.cfg.ResultMaxBytes, attemptKey: d.cfg.AttemptKey,
		tracer: d.cfg.Tracer}
}

// wakeAll wakes every pool.
func (d *Dispatcher) wakeAll() {
	for _, p := range d.pools {
		p.wake()
	}
}

// Start launches the pools, the completer, the rescuer and the wake-up
// listener. It returns at once.
func (d *Dispatcher) Start(context.Context) error {
	d.completer.start()
	// The slots are leased apart from the pools' wait group: handlers run
	// on them until the last one has returned, after the pools stop.
	go func() {
		defer close(d.slotsDone)
		if d.slots != nil {
			d.slots.run(d.slotsStop)
		}
	}()
	for _, p := range d.pools {
		d.wg.Add(1)
		go func() { defer d.wg.Done(); p.run() }()
	}
	d.wg.Add(3)
	go func() { defer d.wg.Done(); d.rescue() }()
	go func() { defer d.wg.Done(); d.listen() }()
	go func() { defer d.wg.Done(); d.publishReservations() }()
	d.started = true
	return nil
}

// Wake tells a queue's pool that work may be waiting (in-process ingest
// calls it; other processes hear NOTIFY).
func (d *Dispatcher) Wake(queue string) {
	for _, p := range d.pools {
		if p.q.Name == queue || slices.Contains(p.q.StealFrom, queue) {
			p.wake()
		}
	}
}

// Stop shuts down in order (see the package doc). Idempotent.
func (d *Dispatcher) Stop(ctx context.Context) error {
	if !d.started {
		return nil
	}
	d.stopOnce.Do(func() {
		close(d.stopClaim)
		grace := time.NewTimer(d.cfg.Grace)
		defer grace.Stop()
		allIdle := make(chan struct{})
		go func() {
			for _, p := range d.pools {
				<-p.claimsDone
				p.jobs.Wait()
			}
			close(allIdle)
		}()
		select {
		case <-allIdle:
		case <-grace.C:
			d.log.Warn("grace period over; cancelling jobs still running", zap.Duration("grace", d.cfg.Grace))
		case <-ctx.Done():
		}
		d.hardStop(workers.ErrShutdown)
		for _, p := range d.pools {
			p.stopAttempts()
		}
		select {
		case <-allIdle:
		case <-ctx.Done():
			// A handler that ignores its context cannot be stopped from
			// here; its lease expires and the rescuer requeues the job.
			d.log.Error("handlers still running after cancellation; leaving their leases to expire")
			d.stopErr = errors.New("dispatch: handlers still running after cancellation; their leases will expire and their jobs be retried")
		}
		d.wg.Wait()
		close(d.slotsStop)
		<-d.slotsDone
		d.completer.stop()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if d.slots != nil && d.stopErr == nil {
			// Every handler has returned; with one still running, the
			// shares stay until they expire.
			d.slots.release(ctx)
		}
		if err := d.store.ReservationsDrop(ctx, d.process); err != nil {
			// They stop counting by themselves once they are 15s old.
			d.log.Warn("dropping this process's reservations failed", zap.Error(err))
		}
	})
	return d.stopErr
}

// reservationsEvery is how often a dispatcher publishes the jobs its
// pools hold claimed but not started; a row unchanged is refreshed every
// reservationsRefresh, well within the 15 s after which it stops counting.
const (
	reservationsEvery   = time.Second
	reservationsRefresh = 5 * time.Second
)

// publishReservations keeps this process's rows of the reservations
// table (see 0011_reservations.sql) until claiming stops.
func (d *Dispatcher) publishReservations() {
	t := time.NewTicker(reservationsEvery)
	defer t.Stop()
	var last map[string]int
	var lastAt time.Time
	for {
		select {
		case <-d.stopClaim:
			return
		case <-t.C:
		}
		now := map[string]int{}
		for name, p := range d.pools {
			now[name] = p.unstarted()
		}
		if maps.Equal(now, last) && time.Since(lastAt) < reservationsRefresh {
			continue
		}
		ctx, cancel := context.WithTimeout(d.jobCtx, 5*time.Second)
		err := d.store.ReservationsPut(ctx, d.process, now)
		cancel()
		if err != nil {
			d.log.Warn("publishing reserved jobs failed", zap.Error(err))
			continue
		}
		last, lastAt = now, time.Now()
	}
}

// rescue periodically returns expired leases to their queue, sweeps
// timed-out lane gaps, and prunes finished jobs past their retention and
// idle lanes that hold nothing.
func (d *Dispatcher) rescue() {
	t := time.NewTicker(d.cfg.RescueInterval)
	defer t.Stop()
	var lastPrune time.Time
	for {
		select {
		case <-d.stopClaim:
			return
		case <-t.C:
		}
		if time.Since(lastPrune) > pruneEvery {
			lastPrune = time.Now()
			d.prune()
		}
		ctx, cancel := context.WithTimeout(d.jobCtx, 30*time.Second)
		var lost []lostSpan
		r, err := d.store.JobRescue(ctx, 1000, d.lostSpans(&lost))
		if err == nil {
			dead := make(map[int64]bool, len(r.Dead))
			for _, j := range r.Dead {
				dead[j.ID] = true
			}
			for _, l := range lost {
				endAttempt(l.span, rescuedOutcome(dead[l.id]), pgstore.LeaseExpired)
			}
			d.rescued(r)
			_, err = d.store.LaneSweepGaps(ctx, 1000)
		}
		cancel()
		if err != nil {
			d.log.Warn("rescue failed", zap.Error(err))
		}
	}
}

// rescuedOutcome is the outcome of an attempt whose lease expired: as a
// failed attempt's, dead when it was the job's last (the rescue parked
// it), and lease_lost, not retry, when the job goes back to its queue.
func rescuedOutcome(dead bool) string {
	if dead {
		return string(jobstate.Dead)
	}
	return "lease_lost"
}

// rescued counts and logs what a rescue did. An attempt whose lease
// expired is counted here, once fleet-wide, whether its process died or
// only stalled (which then counts nothing itself: pool.observe); so is
// the end of a job it parked, which no attempt's process recorded.
func (d *Dispatcher) rescued(r pgstore.Rescued) {
	var retried int64
	for kind, n := range r.Retried {
		retried += n
		if d.metrics != nil {
			d.metrics.JobAttempts.WithLabelValues(kind, rescuedOutcome(false)).Add(float64(n))
		}
	}
	for _, j := range r.Dead {
		logDead(d.events, j.ID, j.Kind, j.Queue, j.Attempts, "max_attempts", pgstore.LeaseExpired)
		if d.metrics != nil {
			d.metrics.JobAttempts.WithLabelValues(j.Kind, rescuedOutcome(true)).Inc()
			d.metrics.Flow.Finished(j.Queue, 1)
		}
	}
	var expired int64
	for kind, n := range r.Expired {
		expired += n
		if d.metrics != nil {
			d.metrics.JobAttempts.WithLabelValues(kind, "expired").Add(float64(n))
		}
	}
	if retried+int64(len(r.Dead))+expired > 0 {
		d.log.Info("rescued expired leases", zap.Int64("retrying", retried), zap.Int("dead", len(r.Dead)), zap.Int64("expired", expired))
		for _, p := range d.pools {
			p.wake()
		}
	}
}

// lostSpan is the span of an attempt whose lease expired, and its job.
type lostSpan struct {
	id   int64
	span trace.Span
}

// lostSpans is JobRescue's spans (nil while tracing is off): a
// job.attempt span for each attempt whose lease expired, from its start,
// added to lost, which the caller ends once the rescue has committed. The
// process that ran the attempt, if it died, never ended its own.
func (d *Dispatcher) lostSpans(lost *[]lostSpan) func([]pgstore.LostAttempt) []string {
	if d.cfg.Tracer == nil {
		return nil
	}
	return func(attempts []pgstore.LostAttempt) []string {
		*lost = (*lost)[:0]
		spans := make([]string, len(attempts))
		for i, a := range attempts {
			job := &workers.Job{ID: a.ID, Kind: a.Kind, Queue: a.Queue, Route: a.Route, Attempt: a.Attempt,
				PreviousAttemptSpan: a.AttemptSpan}
			if a.Traceparent != nil {
				job.Headers = []workers.Header{{Key: tracing.HeaderName, Value: a.Traceparent}}
			}
			_, span := startAttempt(context.Background(), d.cfg.Tracer, job, trace.WithTimestamp(a.StartedAt))
			spans[i] = tracing.Format(span.SpanContext())
			*lost = append(*lost, lostSpan{a.ID, span})
		}
		return spans
	}
}

const (
	pruneEvery = 30 * time.Second
	pruneBatch = 5000
	// pruneMaxBatches bounds one sweep so that a backlog of history is
	// worked off over several sweeps instead of holding the rescuer.
	pruneMaxBatches = 20
	// lanePrunePage lanes are read by each of at most lanePruneMaxPages
	// LanePrune transactions a prune.
	lanePrunePage     = 1000
	lanePruneMaxPages = 20
)

func (d *Dispatcher) prune() {
	if keep := d.cfg.AuditRetention; keep > 0 {
		d.pruneBatches("the audit log", func(ctx context.Context) (int64, error) {
			return d.store.AuditPrune(ctx, keep, pruneBatch)
		})
	}
	for state, keep := range d.cfg.Retention {
		if keep > 0 {
			d.pruneBatches(state+" jobs", func(ctx context.Context) (int64, error) {
				return d.store.JobPrune(ctx, state, keep, pruneBatch)
			})
		}
	}
	d.pruneLanes()
}

// pruneLanes deletes the idle lanes that hold nothing, and promotes the
// jobs of idle lanes that wait (pgstore.LanePrune), a page at a time
// from where the last prune stopped: each reads a bounded part of a large
// lanes table, and a pass over a million lanes takes 50 of them (25
// minutes).
func (d *Dispatcher) pruneLanes() {
	for range lanePruneMaxPages {
		ctx, cancel := context.WithTimeout(d.jobCtx, 30*time.Second)
		next, _, promoted, err := d.store.LanePrune(ctx, d.lanesAfter, lanePrunePage, d.cfg.VersionRetention)
		cancel()
		if err != nil {
			d.log.Warn("pruning idle lanes failed", zap.Error(err))
			return
		}
		if promoted > 0 {
			// Their next job had been cancelled as their heads ended.
			d.log.Info("promoted the waiting jobs of lanes left without a head", zap.Int64("lanes", promoted))
		}
		if next == nil {
			d.lanesAfter = pgstore.LaneKey{} // the next prune starts a new pass
			return
		}
		d.lanesAfter = *next
	}
}

// pruneBatches deletes with del, a batch at a time, until a batch comes
// back short or pruneMaxBatches have run.
func (d *Dispatcher) pruneBatches(what string, del func(context.Context) (int64, error)) {
	for range pruneMaxBatches {
		ctx, cancel := context.WithTimeout(d.jobCtx, 30*time.Second)
		n, err := del(ctx)
		cancel()
		if err != nil {
			d.log.Warn("pruning failed", zap.String("what", what), zap.Error(err))
			return
		}
		if n < pruneBatch {
			return
		}
	}
}

// cancelled cancels this process's attempts of a job an operator
// cancelled while it ran (its NOTIFY), with workers.ErrCancelled.
func (d *Dispatcher) cancelled(id int64) {
	for _, p := range d.pools {
		p.cancelJob(id)
	}
}

// listening looks again, once LISTEN is in place (at the start, or again
// after a lost connection), at what the notifications sent before would
// have said: every pool claims (a job stored between a pool's first claim
// and the LISTEN waited for the poll: TestFreedWorkerOnADryQueueClaimsNothing,
// whose poll is an hour, timed out once in fifteen runs), and asks which
// held jobs were cancelled meanwhile. The asking is off the listener's
// goroutine, so that notifications keep flowing.
func (d *Dispatcher) listening() {
	for _, p := range d.pools {
		p.wake()
		go p.recheckCancels()
	}
}

// listen turns NOTIFY into wake-ups and cancellations, reconnecting on
// errors.
func (d *Dispatcher) listen() {
	ctx, cancel := context.WithCancel(d.jobCtx)
	defer cancel()
	go func() {
		select {
		case <-d.stopClaim:
		case <-ctx.Done():
		}
		cancel()
	}()
	notices := pgstore.Notices{Wake: d.Wake, Cancel: d.cancelled, Listening: d.listening}
	for ctx.Err() == nil {
		err := d.store.Listen(ctx, notices)
		if ctx.Err() != nil {
			return
		}
		d.log.Warn("listen for wake-ups failed; polling meanwhile", zap.Error(err))
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
