package dispatch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/jobstate"
	"github.com/switchyard-dev/switchyard/workers"
)

// pool is one queue's workers in this process.
type pool struct {
	d     *Dispatcher
	q     Queue
	log   *zap.Logger
	wakeC chan struct{}
	freed chan struct{}
	jobs  sync.WaitGroup // running handlers
	// claimsDone is closed when the pool has stopped claiming: after it,
	// no job starts and jobs.Wait is safe.
	claimsDone chan struct{}

	mu sync.Mutex
	// leases are held from claim until the outcome is written (or the
	// lease is released or lost): the heartbeat extends all of them. They
	// are keyed by fencing token, not job id: after an outage a job whose
	// old outcome is still being written can be rescued and claimed again
	// by this very pool, and the two attempts must not share an entry.
	leases map[int64]*running
	// busy counts handlers still running. A worker slot frees when its
	// handler returns, not when the completer has written the outcome, so
	// the completer's batching never idles a worker.
	busy int
	// reserved counts the slots asked for by claims in flight.
	reserved int
	// ready holds lane jobs handed off to the pool while every worker was
	// busy or reserved; the next worker to free takes the first. They
	// are leased and heartbeated like running jobs.
	ready []*running
	// closed is set when the pool stops claiming: nothing starts after it,
	// and a job handed off after it is released.
	closed bool
	// handoffWindow is laneHandoffWindow; tests shorten it.
	handoffWindow time.Duration
}

type running struct {
	job    *workers.Job
	ctx    context.Context
	cancel context.CancelCauseFunc
	// chain is when this job's lane began running here without going
	// through the queue: the claim of the first job of a run of handoffs.
	chain time.Time
	// waiting is when a handed-off job began waiting in ready; zero for
	// a job that started at once.
	waiting time.Time
	// returned is set when the handler has returned; its outcome is then
	// on its way to the completer and a lost lease is the completer's
	// business, not a reason to cancel anything.
	returned bool
}

func newPool(d *Dispatcher, q Queue) *pool {
	return &pool{d: d, q: q, log: d.log.With(zap.String("queue", q.Name)),
		wakeC: make(chan struct{}, 1), freed: make(chan struct{}, 1), claimsDone: make(chan struct{}),
		leases: map[int64]*running{}, handoffWindow: laneHandoffWindow}
}

func (p *pool) wake() {
	select {
	case p.wakeC <- struct{}{}:
	default:
	}
}

// leaseCap bounds a pool's leases at leaseCap × its concurrency: running
// handlers plus outcomes waiting for the completer. The bound makes a slow
// completer hold claims back instead of piling up outcomes; it is loose
// enough that a completer keeping up never does (measured, 64 workers on
// a no-op handler: at 2× most claims waited for outcomes to be written,
// 16-18k jobs/s; at 4×, 21.5k).
const leaseCap = 4

// free is the number of jobs to claim now: idle workers not reserved by a
// claim in flight or taken by a handed-off job, within the lease cap.
func (p *pool) free() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return max(0, min(p.q.Concurrency-p.busy-len(p.ready), leaseCap*p.q.Concurrency-len(p.leases))-p.reserved)
}

// reserve sets n worker slots aside for a claim in flight.
func (p *pool) reserve(n int) {
	p.mu.Lock()
	p.reserved += n
	p.mu.Unlock()
}

// settleClaim returns a finished claim's reservation: the jobs it got
// hold their slots as busy workers by now.
func (p *pool) settleClaim(r claimResult) {
	p.mu.Lock()
	p.reserved -= r.asked
	p.startReady()
	p.mu.Unlock()
}

// run heartbeats the pool's leases every lease/3 and claims until the
// dispatcher stops claiming; claimsDone is closed once no claim can start
// a job any more.
func (p *pool) run() {
	hb := time.NewTicker(p.q.Lease / 3)
	defer hb.Stop()
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		for {
			select {
			case <-p.d.jobCtx.Done():
				return
			case <-hb.C:
				p.heartbeat()
			}
		}
	}()
	// Leases must keep being extended while in-flight jobs finish during
	// the grace period; the heartbeat goroutine stops with jobCtx, after
	// Stop has waited for the jobs.
	defer func() { <-hbDone }()
	p.claimLoop()
	p.close()
	close(p.claimsDone)
}

// close stops the pool from starting jobs and releases the handed-off
// jobs no worker took (I7).
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	if len(ready) == 0 {
		return
	}
	jobs := make([]*workers.Job, len(ready))
	for i, r := range ready {
		jobs[i] = r.job
	}
	p.releaseLeases(jobs...)
	for _, j := range jobs {
		p.finish(j.Token)
	}
}

// claimsInFlight is how many claim statements a pool may have running at
// once under a backlog. With one, the database idles while a claim's
// result travels back and its jobs start; with two, the next claim is
// already under way.
const claimsInFlight = 2

// fromStartEvery bounds how long a pool working through a backlog claims
// from its position (pgstore.ClaimPosition) before claiming from the
// beginning of the queue again, which picks up jobs that became runnable
// behind that position.
const fromStartEvery = time.Second

// claimLookBack is how far behind its position a pool's claims start.
// A job's scheduled_at is its transaction's start (now()), so a
// transaction that began before the last claimed job's and committed
// after it (a lane head promoted by a slower completion batch, a long
// ingest) puts jobs just behind the position; looking back this far finds
// them at once instead of at the next claim from the beginning, at the
// cost of skipping the dead entries of those few milliseconds.
const claimLookBack = 100 * time.Millisecond

type claimResult struct {
	asked, got int
	own        int // of got, from the pool's own queue
	last       pgstore.ClaimPosition
	err        error
}

// claimLoop claims for every free worker in one statement, up to
// claimsInFlight statements at a time, then waits for a slot, a wake-up,
// a claim's result or the poll interval.
func (p *pool) claimLoop() {
	poll := time.NewTimer(p.q.PollInterval)
	defer poll.Stop()
	results := make(chan claimResult, claimsInFlight)
	inFlight := 0
	defer func() {
		for ; inFlight > 0; inFlight-- {
			p.settleClaim(<-results)
		}
	}()
	backoff := 100 * time.Millisecond
	backlog := false
	// news is set by anything that may have made work claimable (a
	// wake-up, a freed worker, the poll, a full claim) and cleared by
	// starting a claim: a claim that came back short is not repeated
	// until there is news, or an idle pool would claim in a busy loop.
	news := true
	var cursor pgstore.ClaimPosition // where the last full claim ended
	var fromStart time.Time          // when the last claim from the beginning started
	for {
		select {
		case <-p.d.stopClaim:
			return
		default:
		}
		free := p.free()
		// With a backlog (the last claim filled every slot asked for),
		// wait until a quarter of the pool is free and claim for all of
		// it in one statement; one statement per freed worker would cap
		// the pool at the claim's round trip. Without a backlog, claim
		// for any free worker at once: latency matters more. A second
		// claim in flight only pays under a backlog.
		if news && free > 0 && (inFlight == 0 || (backlog && inFlight < claimsInFlight)) &&
			(!backlog || free >= max(1, p.q.Concurrency/4)) {
			after := pgstore.ClaimPosition{ScheduledAt: cursor.ScheduledAt.Add(-claimLookBack)}
			if !backlog || time.Since(fromStart) >= fromStartEvery {
				after, fromStart = pgstore.ClaimPosition{}, time.Now()
			}
			p.reserve(free)
			inFlight++
			news = backlog // under a backlog the next claim may start at once
			go func() {
				r, err := p.claim(free, after)
				r.err = err
				results <- r
			}()
			continue
		}
		if inFlight == 0 {
			resetTimer(poll, p.q.PollInterval)
		}
		select {
		case <-p.d.stopClaim:
			return
		case r := <-results:
			inFlight--
			p.settleClaim(r)
			switch {
			case r.err != nil:
				p.log.Warn("claim failed", zap.Error(r.err), zap.Duration("backoff", backoff))
				backlog = false
				// Back off before the next claim: nothing else may claim
				// meanwhile (a wake-up would only fail again).
				if !p.sleep(backoff) {
					return
				}
				backoff = min(backoff*2, 5*time.Second)
				news = true
			case r.got == r.asked:
				backoff = 100 * time.Millisecond
				backlog = true // every slot filled: there is probably more work
				news = true
				switch {
				case r.own < r.asked: // its own queue came back short
					cursor = pgstore.ClaimPosition{}
				case cursor.Before(r.last):
					cursor = r.last
				}
			default:
				backoff = 100 * time.Millisecond
				backlog = false
				cursor = pgstore.ClaimPosition{}
			}
		case <-p.wakeC:
			news = true
		case <-p.freed:
			news = true
		case <-poll.C:
			news = true
		}
	}
}

// sleep waits d unless claiming stops first.
func (p *pool) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.d.stopClaim:
		return false
	case <-t.C:
		return true
	}
}

func resetTimer(t *time.Timer, d time.Duration) {
	t.Stop()
	select {
	case <-t.C:
	default:
	}
	t.Reset(d)
}

// claim claims up to n jobs for reserved slots: from the pool's own
// queue past after, then, for slots still free, from the queues it may
// steal from, in their order. It starts the jobs and says how many it got
// in all and from its own queue, and where the own claim ended.
func (p *pool) claim(n int, after pgstore.ClaimPosition) (claimResult, error) {
	ctx, cancel := context.WithTimeout(p.d.jobCtx, 30*time.Second)
	defer cancel()
	r := claimResult{asked: n, last: after}
	jobs, last, err := p.d.store.JobClaim(ctx, pgstore.JobClaimParams{
		Queue: p.q.Name, Limit: n, Lease: p.q.Lease, MaxRuntime: p.q.MaxRuntime, After: after})
	if err != nil {
		return r, err
	}
	r.own, r.last = len(jobs), last
	for _, from := range p.q.StealFrom {
		if len(jobs) == n {
			break
		}
		// Stolen jobs run under this pool's lease and max_runtime: its
		// workers hold them.
		stolen, _, err := p.d.store.JobClaim(ctx, pgstore.JobClaimParams{
			Queue: from, Limit: n - len(jobs), Lease: p.q.Lease, MaxRuntime: p.q.MaxRuntime})
		if err != nil {
			p.log.Warn("claim from a queue to steal from failed", zap.String("from", from), zap.Error(err))
			break
		}
		jobs = append(jobs, stolen...)
	}
	now := time.Now()
	p.mu.Lock()
	for _, j := range jobs {
		// Reserved slots: a claim's jobs always start. Stop waits for the
		// claims in flight before it closes the pool.
		p.start(p.hold(workerJob(j), now))
	}
	p.mu.Unlock()
	r.got = len(jobs)
	return r, nil
}

// checkpointer saves a job's checkpoints under its attempt's token.
func (p *pool) checkpointer(j *workers.Job) func(ctx context.Context, data []byte) error {
	return func(ctx context.Context, data []byte) error {
		err := p.d.store.JobCheckpoint(ctx, j.ID, j.Token, data)
		if errors.Is(err, pgstore.ErrLeaseLost) {
			return workers.ErrLeaseLost
		}
		return err
	}
}

func (p *pool) execute(r *running) {
	defer p.jobs.Done()
	ctx, job := r.ctx, r.job
	start := time.Now()
	// A handed-off job can lose its lease while it waits for a worker.
	p.restamp(r)
	err := context.Cause(ctx)
	if err == nil {
		err = p.invoke(ctx, job)
	}
	elapsed := time.Since(start)
	cause := context.Cause(ctx)
	p.returned(job.Token)
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
		return
	case err != nil && errors.Is(cause, workers.ErrShutdown):
		p.release(job)
		return
	case err == nil && job.Finished():
		// The handler committed the outcome in its own transaction.
		p.finish(job.Token)
		p.observe(job, "succeeded", elapsed)
		return
	}
	out := p.outcome(job, err)
	out.Handoff = p.handoff(r, out)
	p.d.completer.submit(out, func(applied bool, next *workers.Job) {
		// Counted once the write is settled: a rejected (stale) outcome is
		// a lost lease, not a success.
		outcome := "lease_lost"
		if applied {
			outcome = metricOutcome(out.State)
		}
		p.observe(job, outcome, elapsed)
		p.finish(job.Token)
		if next != nil {
			p.adopt(next, r.chain)
		}
	})
}

// laneHandoffWindow bounds how long a lane keeps running in one pool by
// handoffs (see handoff) before its next job goes through the queue like
// any other: a lane with a steady stream of jobs must not keep a worker
// from the other lanes.
const laneHandoffWindow = time.Second

// handoff decides whether a lane job's successor is handed straight to
// this pool when the job's outcome is written, rather than queued to be
// claimed: it saves a row version of the job and a claim. Only for jobs
// of the pool's own queue (a stolen job's successor belongs to its
// queue's pool), within laneHandoffWindow, and not once the pool is
// closing.
func (p *pool) handoff(r *running, out pgstore.Outcome) *pgstore.Handoff {
	if !out.Lane || out.State == jobstate.Retrying || r.job.Queue != p.q.Name || time.Since(r.chain) >= p.handoffWindow {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	return &pgstore.Handoff{Queue: p.q.Name, Lease: min(p.q.Lease, p.q.MaxRuntime)}
}

// adopt takes a job handed off to the pool: it runs on a free worker at
// once, or waits in ready for the next one (claims hold back meanwhile).
// After close it is released instead.
func (p *pool) adopt(j *workers.Job, chain time.Time) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.releaseLeases(j)
		return
	}
	r := p.hold(j, chain)
	if p.busy+p.reserved < p.q.Concurrency && len(p.ready) == 0 {
		p.start(r)
	} else {
		r.waiting = time.Now()
		p.ready = append(p.ready, r)
	}
	p.mu.Unlock()
}

// readyRestamp is how long a handed-off job may wait in ready before its
// attempt's clock is started again when a worker takes it: the lease is
// capped at started_at + max_runtime, and a job that waited for a slow
// handler to finish must not lose that time from its own max_runtime.
// Shorter waits are not worth a statement.
const readyRestamp = time.Second

// restamp restarts the attempt's runtime clock of a handed-off job that
// waited long in ready; a job no longer held has its context cancelled
// with workers.ErrLeaseLost.
func (p *pool) restamp(r *running) {
	if r.waiting.IsZero() || time.Since(r.waiting) < readyRestamp {
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, p.q.Lease/3)
	defer cancel()
	err := p.d.store.JobRestart(ctx, r.job.ID, r.job.Token, p.q.Lease, p.q.MaxRuntime)
	switch {
	case errors.Is(err, pgstore.ErrLeaseLost):
		r.cancel(workers.ErrLeaseLost)
	case err != nil:
		// Not knowing is not losing: the job runs on its current lease,
		// which the heartbeat extends as far as its first clock allows.
		p.log.Warn("restarting a handed-off job's clock failed", zap.Int64("job_id", r.job.ID), zap.Error(err))
	}
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
	h, err := p.d.cfg.Resolve(job)
	if err != nil {
		return workers.Permanent(err)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, p.q.MaxRuntime,
		fmt.Errorf("max_runtime %s exceeded", p.q.MaxRuntime))
	defer cancel()
	return h.Handle(ctx, job)
}

// outcome decides what an attempt's error means (SPEC §5 for HTTP; the
// same rules for Go handlers).
func (p *pool) outcome(job *workers.Job, err error) pgstore.Outcome {
	o := pgstore.Outcome{ID: job.ID, Token: job.Token, Lane: job.Ordered}
	switch {
	case err == nil:
		o.State = jobstate.Succeeded
		return o
	case workers.IsPermanent(err):
		o.State, o.Reason = jobstate.Dead, "permanent"
	case job.Attempt >= job.MaxAttempts:
		o.State, o.Reason = jobstate.Dead, "max_attempts"
	default:
		o.State = jobstate.Retrying
		o.Delay = p.d.backoff(job, err)
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
	m := p.d.metrics
	if m == nil {
		return
	}
	m.JobAttempts.WithLabelValues(job.Kind, outcome).Inc()
	if elapsed > 0 {
		m.JobDuration.WithLabelValues(job.Kind, outcome).Observe(elapsed.Seconds())
	}
}

// hold records a claimed or handed-off attempt's lease, with a context
// cancelled on lease loss or shutdown. p.mu is held.
func (p *pool) hold(j *workers.Job, chain time.Time) *running {
	j.SetCheckpointStore(p.checkpointer(j))
	ctx, cancel := context.WithCancelCause(p.d.jobCtx)
	r := &running{job: j, ctx: ctx, cancel: cancel, chain: chain}
	p.leases[j.Token] = r
	return r
}

// start runs a held attempt on a worker. p.mu is held and the pool is not
// closed, so that the jobs.Add happens before Stop's jobs.Wait.
func (p *pool) start(r *running) {
	p.busy++
	p.jobs.Add(1)
	go p.execute(r)
}

// returned frees the worker slot of a handler that has returned, or gives
// it to the first handed-off job waiting.
func (p *pool) returned(token int64) {
	p.mu.Lock()
	if r, ok := p.leases[token]; ok && !r.returned {
		r.returned = true
		p.busy--
	}
	started := p.startReady()
	p.mu.Unlock()
	if !started {
		p.signalFreed()
	}
}

// startReady starts waiting handed-off jobs on the free workers and says
// whether it started any. p.mu is held.
func (p *pool) startReady() bool {
	started := false
	for len(p.ready) > 0 && !p.closed && p.busy+p.reserved < p.q.Concurrency {
		p.start(p.ready[0])
		p.ready = p.ready[1:]
		started = true
	}
	return started
}

// finish forgets a lease whose outcome is settled and releases its
// context (an uncancelled child would stay attached to the parent until
// shutdown: a leak per job).
func (p *pool) finish(token int64) {
	p.mu.Lock()
	r, ok := p.leases[token]
	delete(p.leases, token)
	p.mu.Unlock()
	if ok {
		r.cancel(nil)
	}
	p.signalFreed()
}

func (p *pool) signalFreed() {
	select {
	case p.freed <- struct{}{}:
	default:
	}
}

func (p *pool) release(job *workers.Job) {
	p.releaseLeases(job)
	p.finish(job.Token)
}

// releaseLeases gives jobs back to their queue at shutdown.
func (p *pool) releaseLeases(jobs ...*workers.Job) {
	leases := make([]pgstore.Lease, len(jobs))
	for i, j := range jobs {
		leases[i] = pgstore.Lease{ID: j.ID, Token: j.Token}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.d.jobCtx), 10*time.Second)
	defer cancel()
	if _, err := p.d.store.JobRelease(ctx, leases); err != nil {
		// The leases will expire and the rescuer will requeue the jobs.
		p.log.Warn("release at shutdown failed; the leases will expire instead", zap.Int("jobs", len(jobs)), zap.Error(err))
	}
}

// heartbeat extends all leases of the pool in one statement and cancels
// the handlers of those it could not extend.
func (p *pool) heartbeat() {
	p.mu.Lock()
	leases := make([]pgstore.Lease, 0, len(p.leases))
	for token, r := range p.leases {
		leases = append(leases, pgstore.Lease{ID: r.job.ID, Token: token})
	}
	p.mu.Unlock()
	if len(leases) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.d.jobCtx), p.q.Lease/3)
	defer cancel()
	kept, err := p.d.store.JobHeartbeat(ctx, leases, p.q.Lease, p.q.MaxRuntime)
	if err != nil {
		// Not knowing is not losing: the next beat may still be in time.
		p.log.Warn("heartbeat failed", zap.Error(err))
		return
	}
	var lost []pgstore.Lease
	for _, l := range leases {
		if !kept[l.Token] {
			lost = append(lost, l)
		}
	}
	if len(lost) == 0 {
		return
	}
	// Rare: ask which were lost to an operator's cancel, so that the
	// handler learns why (context.Cause is workers.ErrCancelled).
	cancelled, err := p.d.store.JobCancelled(ctx, lost)
	if err != nil {
		p.log.Warn("reading cancellations failed", zap.Error(err))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range lost {
		// A returned handler's lease may simply have been completed
		// between the snapshot and the heartbeat; the completer knows.
		r, ok := p.leases[l.Token]
		if !ok || r.returned {
			continue
		}
		if cancelled[l.Token] {
			p.log.Info("job cancelled; cancelling the attempt", zap.Int64("job_id", l.ID), zap.Int64("token", l.Token))
			r.cancel(workers.ErrCancelled)
			continue
		}
		p.log.Warn("lease lost; cancelling the attempt", zap.Int64("job_id", l.ID), zap.Int64("token", l.Token))
		r.cancel(workers.ErrLeaseLost)
	}
}
