package dispatch

// The lane handoff: a lane's next job handed to the pool that ran its predecessor.

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/jobstate"
	"github.com/switchyard-dev/switchyard/workers"
)

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
// closing or its queue paused, and never for a route with fleet-wide
// flow limits (only its locked claim may start its jobs).
func (p *pool) handoff(r *running, out pgstore.Outcome) *pgstore.Handoff {
	if !out.Lane || out.State == jobstate.Retrying || r.job.Queue != p.q.Name || time.Since(r.chain) >= p.handoffWindow ||
		p.env.paused(p.q.Name) || p.env.limited(p.q.Name, r.job.Route) {
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
	err := p.env.store.JobRestart(ctx, r.job.ID, r.job.Token, p.q.Lease, p.q.MaxRuntime, p.env.holder)
	switch {
	case errors.Is(err, pgstore.ErrLeaseLost):
		r.cancel(workers.ErrLeaseLost)
	case err != nil:
		// Not knowing is not losing: the job runs on its current lease,
		// which the heartbeat extends as far as its first clock allows.
		p.log.Warn("restarting a handed-off job's clock failed", zap.Int64("job_id", r.job.ID), zap.Error(err))
	}
}
