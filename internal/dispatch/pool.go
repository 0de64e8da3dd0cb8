package dispatch

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/switchyard-dev/switchyard/internal/metrics"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/workers"
)

// poolEnv is what a pool uses of its dispatcher, handed to it at
// construction: a pool never reaches back into the dispatcher.
type poolEnv struct {
	store *pgstore.Store
	// events logs one line per job that ends dead (see metrics.EventsLogger).
	events    *zap.Logger
	metrics   *metrics.Metrics // nil: none
	completer *completer
	resolve   func(*workers.Job) (workers.Handler, error)
	backoff   func(*workers.Job, error) time.Duration
	// jobCtx is cancelled (with a cause) when in-flight jobs must stop;
	// the attempts' contexts are cancelled with it (hold, stopAttempts).
	jobCtx context.Context
	// stopClaim is closed when the pools must stop claiming.
	stopClaim <-chan struct{}
	// paused reports whether an operator paused a queue (Config.Paused).
	paused func(queue string) bool
	// limits is Config.Limits.
	limits map[string]map[string]pgstore.FlowLimit
	// slots is this process's shares of its routes' max_running; nil
	// when no route has one. holder names them (the dispatcher's
	// process): heartbeats never extend a lease past them.
	slots  *slots
	holder string
	// resultMax is Config.ResultMaxBytes.
	resultMax map[string]int
	// attemptKey signs the AttemptSecret of an attempt asked for it; nil:
	// none.
	attemptKey []byte
	// tracer starts each attempt's span; nil: tracing is off.
	tracer trace.Tracer
}

// limited reports whether a route of a queue has fleet-wide flow limits.
func (e *poolEnv) limited(queue, route string) bool {
	return e.limits[queue][route].Limited()
}

// pool is one queue's workers in this process.
type pool struct {
	env poolEnv
	q   Queue
	log *zap.Logger
	// overRuntime is the cause of an attempt's context past max_runtime,
	// made once: a fmt.Errorf per attempt was a tenth of the pool's CPU.
	overRuntime error
	wakeC       chan struct{}
	// freed says a worker came free with no held job to take, or a
	// lease was settled; freedLane that a settled one was a lane job's,
	// whose end may have queued its lane's next job (see claimLoop).
	freed     chan struct{}
	freedLane atomic.Bool
	// idle: the pool's last claim found its queue dry and none is in
	// flight, so its idle workers may be lent to a claim that ingest
	// carries (lend).
	idle atomic.Bool
	// work hands started attempts to the pool's workers: goroutines that
	// live as long as the pool. A goroutine per attempt grew a new stack
	// for every job, a twelfth of a no-op job's CPU. Its buffer holds a
	// pool's worth: an attempt waiting in it is busy, and busy never
	// exceeds concurrency, so a send never blocks.
	work chan *running
	// workers is how many worker goroutines run (p.mu). start adds one
	// whenever there are fewer than busy attempts, so a pool has as many
	// as it has ever run at once, up to its concurrency: a pool of
	// thousands that runs a few keeps a few.
	workers int
	jobs    sync.WaitGroup // running handlers
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
	// reserved counts the slots asked for by claims in flight, and
	// prefetching the places in ready they asked for beyond them.
	reserved, prefetching int
	// ready holds jobs claimed beyond the free workers (prefetched) and
	// lane jobs handed off to the pool while every worker was busy or
	// reserved; the next worker to free takes the first. They are leased
	// and heartbeated like running jobs.
	ready []*running
	// restamps are the restarts of jobs that waited long in ready.
	restamps restamps
	// closed is set when the pool stops claiming: nothing starts after it,
	// and a job handed off after it is released.
	closed bool
	// handoffWindow is laneHandoffWindow; tests shorten it.
	handoffWindow time.Duration
	// unlimitedDryUntil: until then the pool's claims take only its
	// limited routes' jobs (see unlimitedDryFor).
	unlimitedDryUntil time.Time
}

// running is a held attempt: the lease the pool keeps for a job it
// claimed or was handed, from then until its outcome is written. It is
// the job's workers.Attempt.
type running struct {
	pool   *pool
	job    *workers.Job
	ctx    context.Context
	cancel context.CancelCauseFunc
	// chain is when this job's lane began running here without going
	// through the queue: the claim of the first job of a run of handoffs.
	chain time.Time
	// waiting is when a job began waiting in ready; zero for a job that
	// started at once.
	waiting time.Time
	// returned is set when the handler has returned; its outcome is then
	// on its way to the completer and a lost lease is the completer's
	// business, not a reason to cancel anything.
	returned bool
	// slot is set while the handler runs on a slot of its route's
	// max_running (slots.take), which its return gives back.
	slot bool
	// elapsed and span are the handler's run time and the attempt's span
	// (nil: tracing off), kept for when its outcome is settled.
	elapsed time.Duration
	span    trace.Span
}

func newPool(env poolEnv, log *zap.Logger, q Queue) *pool {
	if env.paused == nil {
		env.paused = func(string) bool { return false }
	}
	return &pool{env: env, q: q, log: log.With(zap.String("queue", q.Name)),
		overRuntime: fmt.Errorf("%w (%s)", workers.ErrMaxRuntime, q.MaxRuntime),
		wakeC:       make(chan struct{}, 1), freed: make(chan struct{}, 1), claimsDone: make(chan struct{}),
		work:   make(chan *running, q.Concurrency),
		leases: map[int64]*running{}, handoffWindow: laneHandoffWindow,
		restamps: restamps{kick: make(chan struct{}, 1)}}
}

// unstarted is how many jobs the pool holds claimed but not started
// (prefetched, or handed off while every worker was busy): reserved.
func (p *pool) unstarted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}

func (p *pool) wake() {
	select {
	case p.wakeC <- struct{}{}:
	default:
	}
}

// run heartbeats the pool's leases every lease/3, writes its restarts,
// and claims until the dispatcher stops claiming; claimsDone is closed
// once no claim can start a job any more.
func (p *pool) run() {
	hb := time.NewTicker(p.q.Lease / 3)
	defer hb.Stop()
	// Leases must keep being extended while in-flight jobs finish during
	// the grace period; these goroutines stop with jobCtx, after Stop has
	// waited for the jobs.
	var leases sync.WaitGroup
	defer leases.Wait()
	leases.Go(func() {
		for {
			select {
			case <-p.env.jobCtx.Done():
				return
			case <-hb.C:
				p.heartbeat()
			}
		}
	})
	leases.Go(p.restampLoop)
	p.claimLoop()
	p.close()
	// Nothing starts after close: the workers end once the attempts
	// already handed to them have, which Stop waits for as jobs (not
	// here: a handler that ignores its cancellation must not hold Stop
	// past its context).
	close(p.work)
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
