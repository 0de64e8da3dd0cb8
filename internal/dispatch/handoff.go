package dispatch

// The lane handoff: a lane's next job handed to the pool that ran its predecessor.

import (
	"time"

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
	if out.Lane == nil || out.State == jobstate.Retrying || r.job.Queue != p.q.Name || time.Since(r.chain) >= p.handoffWindow ||
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
