package dispatch

// Leases: the book of what a pool holds, heartbeats, release.

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/workers"
)

// hold records a claimed or handed-off attempt's lease, with a context
// cancelled on lease loss or shutdown. p.mu is held.
//
// The context is not a child of jobCtx: every attempt of every pool
// registering with one parent, and leaving it, serialized the workers
// on that parent's lock (half of an attempt's context cost in a
// parallel benchmark). stopAttempts cancels what jobCtx's cancellation
// would have, under the same p.mu as this, and an attempt held after it
// is cancelled here.
func (p *pool) hold(j *workers.Job, chain time.Time) *running {
	ctx, cancel := context.WithCancelCause(context.Background())
	if cause := context.Cause(p.env.jobCtx); cause != nil {
		cancel(cause)
	}
	r := &running{pool: p, job: j, ctx: ctx, cancel: cancel, chain: chain}
	j.SetAttempt(r)
	p.leases[j.Token] = r
	return r
}

// stopAttempts cancels every held attempt with jobCtx's cause, once
// jobCtx is cancelled (hold).
func (p *pool) stopAttempts() {
	cause := context.Cause(p.env.jobCtx)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.leases {
		r.cancel(cause)
	}
}

// finish forgets a lease whose outcome is settled and cancels its
// context, so that whatever the handler derived from it and left behind
// stops with the attempt.
func (p *pool) finish(token int64) {
	p.mu.Lock()
	r, ok := p.leases[token]
	delete(p.leases, token)
	p.mu.Unlock()
	if ok {
		r.cancel(nil)
		if r.job.Ordered {
			// Settled: its lane's next job may be queued now.
			p.freedLane.Store(true)
		}
	}
	p.signalFreed()
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
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.env.jobCtx), 10*time.Second)
	defer cancel()
	if _, err := p.env.store.JobRelease(ctx, leases); err != nil {
		// The leases will expire and the rescuer will requeue the jobs.
		p.log.Warn("release at shutdown failed; the leases will expire instead", zap.Int("jobs", len(jobs)), zap.Error(err))
	}
}

// held is a snapshot of the leases the pool holds.
func (p *pool) held() []pgstore.Lease {
	p.mu.Lock()
	defer p.mu.Unlock()
	leases := make([]pgstore.Lease, 0, len(p.leases))
	for token, r := range p.leases {
		leases = append(leases, pgstore.Lease{ID: r.job.ID, Token: token})
	}
	return leases
}

// heartbeat extends all leases of the pool in one statement and cancels
// the handlers of those it could not extend.
func (p *pool) heartbeat() {
	leases := p.held()
	if len(leases) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.env.jobCtx), p.q.Lease/3)
	defer cancel()
	kept, err := p.env.store.JobHeartbeat(ctx, p.covered(leases), p.q.Lease, p.q.MaxRuntime, p.env.holder)
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
	// handler learns why (context.Cause is workers.ErrCancelled). The
	// cancel's NOTIFY has usually done so already (cancelJob).
	cancelled, err := p.env.store.JobCancelled(ctx, lost)
	if err != nil {
		p.log.Warn("reading cancellations failed", zap.Error(err))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range lost {
		if cancelled[l.Token] {
			p.cancelAttempt(l.Token, workers.ErrCancelled)
		} else {
			p.cancelAttempt(l.Token, workers.ErrLeaseLost)
		}
	}
}

// covered leaves out of leases the handlers running on a slot of a
// max_running whose share would run out before their extended lease: the
// share's slots could then be given to another process while they ran
// (internal/flow/doc.go). Left out, they are lost, and cancelled.
func (p *pool) covered(leases []pgstore.Lease) []pgstore.Lease {
	if p.env.slots == nil {
		return leases
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := leases[:0:0]
	for _, l := range leases {
		if r := p.leases[l.Token]; r != nil && r.slot && !p.env.slots.covers(r.job.Route, p.q.Lease) {
			continue
		}
		out = append(out, l)
	}
	return out
}

// cancelAttempt cancels a held attempt's handler with cause, unless the
// handler has returned (its lease may simply have been completed between
// the snapshot and the heartbeat; the completer knows). p.mu is held.
func (p *pool) cancelAttempt(token int64, cause error) {
	r, ok := p.leases[token]
	if !ok || r.returned || r.ctx.Err() != nil {
		return
	}
	if cause == workers.ErrCancelled {
		p.log.Info("job cancelled; cancelling the attempt", zap.Int64("job_id", r.job.ID), zap.Int64("token", token))
	} else {
		p.log.Warn("lease lost; cancelling the attempt", zap.Int64("job_id", r.job.ID), zap.Int64("token", token))
	}
	r.cancel(cause)
}

// cancelJob cancels the pool's attempts of a job an operator cancelled
// while it ran. The NOTIFY comes after the cancel committed, so every
// attempt of the job is over: the job is cancelled, whoever holds it.
func (p *pool) cancelJob(id int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for token, r := range p.leases {
		if r.job.ID == id {
			p.cancelAttempt(token, workers.ErrCancelled)
		}
	}
}

// recheckCancels cancels the attempts of the pool's held jobs that were
// cancelled while no NOTIFY could reach this process.
func (p *pool) recheckCancels() {
	leases := p.held()
	if len(leases) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.env.jobCtx), 10*time.Second)
	defer cancel()
	cancelled, err := p.env.store.JobCancelled(ctx, leases)
	if err != nil {
		p.log.Warn("reading cancellations failed", zap.Error(err))
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for token := range cancelled {
		p.cancelAttempt(token, workers.ErrCancelled)
	}
}
