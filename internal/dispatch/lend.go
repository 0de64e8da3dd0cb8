package dispatch

// Claims that ingest carries: the process that stores a batch lends its
// idle workers to a claim in the batch's own transaction
// (pgstore.IngestClaim), so that at low load a record costs no claim
// transaction and no wake-up round trip of its own.

import (
	"maps"
	"slices"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

// IngestClaims lends, for a batch about to be stored, the idle workers of
// the pools of queues: a pool whose last claim found its queue dry, with
// none in flight (under a backlog its own claims take more at once), not
// paused or closing. Its workers stay reserved until IngestClaimed, which
// must follow whatever the batch's fate.
func (d *Dispatcher) IngestClaims(queues []string) []*pgstore.IngestClaim {
	var out []*pgstore.IngestClaim
	for _, q := range queues {
		p := d.pools[q]
		if p == nil {
			continue
		}
		if n := p.lend(); n > 0 {
			out = append(out, &pgstore.IngestClaim{Queue: q, Limit: n, Lease: p.q.Lease, MaxRuntime: p.q.MaxRuntime,
				Limited: slices.Sorted(maps.Keys(p.env.limits[q]))})
		}
	}
	return out
}

// IngestClaimed hands each claim's jobs to its pool and gives back the
// rest of the workers lent. A pool whose claim did not run (the batch
// failed, or took a path that claims nothing) or came back full is woken:
// runnable jobs may wait. One whose claim came back short gets its
// workers back as freed ones, for a wake-up that came meanwhile.
func (d *Dispatcher) IngestClaimed(claims []*pgstore.IngestClaim) {
	for _, c := range claims {
		d.pools[c.Queue].takeLent(c)
	}
}

// lend reserves the pool's idle workers for a claim that ingest carries,
// and says how many (see IngestClaims).
func (p *pool) lend() int {
	select {
	case <-p.env.stopClaim: // stopping: nothing may start now
		return 0
	default:
	}
	if !p.idle.Load() || p.env.paused(p.q.Name) {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0
	}
	n := p.freeLocked()
	p.reserved += n
	return n
}

// takeLent takes a lent claim's jobs as its own claims' (take), or
// releases them if the pool closed meanwhile, and returns the
// reservation.
func (p *pool) takeLent(c *pgstore.IngestClaim) {
	p.mu.Lock()
	closed := p.closed
	if !closed {
		p.take(c.Claimed, c.Limit)
	}
	p.reserved -= c.Limit
	if !closed {
		p.startReady()
	}
	p.mu.Unlock()
	if closed {
		for _, j := range c.Claimed {
			p.releaseLeases(workerJob(j))
		}
	}
	if !c.Ran || len(c.Claimed) >= c.Limit {
		p.wake()
		return
	}
	// Workers lent and not used are free again: a wake-up that came while
	// they were lent found none free, and is claimed for now (a freed
	// worker is news only to news already pending; see claimLoop).
	p.signalFreed()
}
