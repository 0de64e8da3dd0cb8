package dispatch

// Restamps: the runtime clocks of jobs that waited long for a worker,
// started again in batches.

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/workers"
)

// readyRestamp is how long a job may wait in ready (handed off, or
// prefetched) before its attempt's clock is started again when a worker
// takes it: the lease is capped at started_at + max_runtime, and a job
// that waited for a slow handler to finish must not lose that time from
// its own max_runtime. Shorter waits are not worth a statement.
const readyRestamp = time.Second

// restamps gathers a pool's restarts (store.JobRestart): whatever is
// asked while one statement is in flight goes out in the next, as one.
//
// Why batched: a pool that prefetches ahead of slow handlers starts
// nearly every job after a wait of a second or more. One statement per
// start was the database's busiest statement at 10,000 leases (69,000
// single-row updates, each its own commit: 12.7 s of a 17.6 s run,
// `bench --scale --only leases`), and held the pool to 0.68 of the ideal
// rate.
type restamps struct {
	mu      sync.Mutex
	pending []restampAsk
	kick    chan struct{} // buffered 1: something is pending
}

// restampAsk is one attempt's restart; done receives nil once it is
// restarted, pgstore.ErrLeaseLost if it is no longer held, or the
// statement's error.
type restampAsk struct {
	r    *running
	done chan error
}

func (q *restamps) ask(a restampAsk) {
	q.mu.Lock()
	q.pending = append(q.pending, a)
	q.mu.Unlock()
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

func (q *restamps) take() []restampAsk {
	q.mu.Lock()
	defer q.mu.Unlock()
	asks := q.pending
	q.pending = nil
	return asks
}

// restamp restarts the attempt's runtime clock of a job that waited long
// in ready, before its handler runs; a job no longer held has its context
// cancelled with workers.ErrLeaseLost.
func (p *pool) restamp(r *running) {
	if r.waiting.IsZero() || time.Since(r.waiting) < readyRestamp {
		return
	}
	done := make(chan error, 1)
	p.restamps.ask(restampAsk{r: r, done: done})
	var err error
	select {
	case err = <-done:
	case <-r.ctx.Done():
		return // over already: execute reads why from the context
	}
	switch {
	case errors.Is(err, pgstore.ErrLeaseLost):
		r.cancel(workers.ErrLeaseLost)
	case err != nil:
		// Not knowing is not losing: the job runs on its current lease,
		// which the heartbeat extends as far as its first clock allows.
		p.log.Warn("restarting a waiting job's clock failed", zap.Int64("job_id", r.job.ID), zap.Error(err))
	}
}

// restampLoop writes the pool's restarts until in-flight jobs must stop
// (as the heartbeat: a job handed to a worker before the pool closed may
// still start during the grace period). An ask it leaves behind is of an
// attempt whose context is cancelled, which restamp also waits on.
func (p *pool) restampLoop() {
	for {
		select {
		case <-p.env.jobCtx.Done():
			return
		case <-p.restamps.kick:
		}
		asks := p.restamps.take()
		if len(asks) == 0 {
			continue
		}
		leases := make([]pgstore.Lease, len(asks))
		for i, a := range asks {
			leases[i] = pgstore.Lease{ID: a.r.job.ID, Token: a.r.job.Token}
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(p.env.jobCtx), p.q.Lease/3)
		kept, err := p.env.store.JobRestart(ctx, leases, p.q.Lease, p.q.MaxRuntime, p.env.holder)
		cancel()
		for _, a := range asks {
			switch {
			case err != nil:
				a.done <- err
			case !kept[a.r.job.Token]:
				a.done <- pgstore.ErrLeaseLost
			default:
				a.done <- nil
			}
		}
	}
}
