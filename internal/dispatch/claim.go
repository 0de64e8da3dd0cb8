package dispatch

// Claiming: how many jobs a pool asks for, and when.

import (
	"context"
	"maps"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

// leaseCap bounds a pool's leases at leaseCap × its concurrency, plus its
// prefetch (maxLeases): running handlers, outcomes waiting for the
// completer and prefetched jobs waiting for a worker. The bound makes a
// slow completer hold claims back instead of piling up outcomes; it is
// loose enough that a completer keeping up never does (measured, 64
// workers on a no-op handler: at 2× most claims waited for outcomes to be
// written, 16-18k jobs/s; at 4×, 21.5k). The prefetch is on top, not
// inside it: inside, the outcomes in flight left a prefetch of 192 room
// for claims of 75 jobs, and it bought nothing.
const leaseCap = 4

// maxLeases is how many leases the pool may hold (its queue's settings
// never change, so no lock is needed).
func (p *pool) maxLeases() int { return MaxLeases(p.q.Concurrency, p.q.Prefetch) }

// MaxLeases is how many leases a pool of the given concurrency and
// prefetch may hold at once: a route's max_running at least this large
// never binds that pool.
func MaxLeases(concurrency, prefetch int) int { return leaseCap*concurrency + prefetch }

// free is the number of jobs to claim now: idle workers not reserved by a
// claim in flight or taken by a handed-off job, within the lease cap.
func (p *pool) free() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.freeLocked()
}

// freeLocked is free with p.mu held.
func (p *pool) freeLocked() int {
	return max(0, min(p.q.Concurrency-p.busy-len(p.ready), p.maxLeases()-len(p.leases))-p.reserved)
}

// prefetchable is how many jobs a pool under a backlog may claim beyond
// its idle workers, to wait in ready for the next ones: up to its
// Prefetch, within the lease cap. Claims then come in larger batches and
// a freed worker takes its next job without a round trip.
func (p *pool) prefetchable() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	room := p.maxLeases() - len(p.leases) - p.reserved - p.prefetching
	return max(0, min(p.q.Prefetch-len(p.ready)-p.prefetching, room))
}

// reserve sets up to n worker slots aside for a claim in flight, and
// extra places in ready for the jobs it may get beyond them, and returns
// the slots set aside: fewer than n if a claim that ingest carries (lend)
// took some since free was read.
func (p *pool) reserve(n, extra int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n = min(n, p.freeLocked())
	p.reserved += n
	p.prefetching += extra
	return n
}

// settleClaim returns a finished claim's reservation: the jobs it got
// hold their slots as busy workers, or wait in ready, by now.
func (p *pool) settleClaim(r claimResult) {
	p.mu.Lock()
	p.reserved -= r.asked
	p.prefetching -= r.extra
	p.startReady()
	p.mu.Unlock()
}

// claimsInFlight is how many claim statements a pool may have running at
// once under a backlog (one if its queue has a counted route: see
// countedClaims). With one, the database idles while a claim's result
// travels back and its jobs start; with two, the next claim is already
// under way.
const claimsInFlight = 2

// countedClaims reports whether any route of the pool's queue has its
// claims counted (pgstore.FlowLimit.Counted). Those run one at a time
// per route, so the pool keeps one claim in flight, not claimsInFlight:
// a second would wait for the first's lock with its workers reserved,
// and then claim only the workers free when it was sent, while one
// claim sent after the first returns takes every worker freed meanwhile.
// Fewer, larger claims spread the claim's fixed cost (the route's lock,
// the count of its running jobs, the commit) over more jobs: 109 jobs a
// claim instead of 61 in bench grouped, which ran at 0.82 of work with
// one claim in flight and 0.63 with two (medians of 18 rounds each, in
// turn; docs/performance.md).
func (p *pool) countedClaims() bool {
	for _, l := range p.env.limits[p.q.Name] {
		if l.Counted() {
			return true
		}
	}
	return false
}

// fromStartEvery bounds how long a pool working through a backlog claims
// from its position (pgstore.ClaimPosition) before claiming from the
// beginning of the queue again, which picks up jobs that became runnable
// behind that position.
const fromStartEvery = time.Second

// unlimitedDryFor is how long a pool of a queue with limited routes skips
// the claim of the queue's other jobs after one found none. That claim
// walks past every runnable limited job (its index holds them all, in
// time order), a full scan under a limited route's backlog: at once a
// second, a tenth of the database's time in bench grouped.
const unlimitedDryFor = time.Second

// leftoverSweep is how often the pool of a queue that only limited routes
// feed (Queue.AllLimited) claims the queue's other jobs: none should
// exist but those of routes since removed from the config.
const leftoverSweep = time.Minute

// limitedRetry is how soon a pool claims again after a limit held back a
// claim: other processes' jobs of the route may end, and free room, with
// no wake-up of this pool (its own workers ask again as they free). A
// rate limit's next start comes sooner, after one interval, at most this.
const limitedRetry = 50 * time.Millisecond

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
	extra      int // asked for beyond the idle workers (prefetch)
	own        int // of got, from the pool's own queue
	last       pgstore.ClaimPosition
	err        error
	// throttled: a flow limit held the claim back, not a dry queue; retry
	// is then how soon to claim again, as its room comes back sooner than
	// the poll.
	throttled bool
	retry     time.Duration
	// bounded: a route's slot budget (its free share of max_running)
	// bounded the claim, so a short claim did not find the queue dry:
	// a worker that frees gives back a slot to claim for.
	bounded bool
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
	var retry time.Duration          // the last short claim's result.retry
	// held: the last claim was short for a flow limit (a route's slots,
	// or a counted claim's room). A second claim in flight would find no
	// more room than it did.
	held := false
	// bounded: the last claim was short for a slot budget (claimResult).
	bounded := false
	// serial: the queue has a counted route; one claim in flight at all
	// times (countedClaims).
	serial := p.countedClaims()
	for {
		select {
		case <-p.env.stopClaim:
			return
		default:
		}
		free := p.free()
		// With a backlog (the last claim filled every slot asked for),
		// wait until a quarter of the pool is free and claim for all of
		// it in one statement; one statement per freed worker would cap
		// the pool at the claim's round trip. Without a backlog, claim
		// for any free worker at once: latency matters more. A second
		// claim in flight only pays under a backlog. Held back by a flow
		// limit, claim for any free worker too: the limit's room, not the
		// pool's, is what there is to fill (a cap of 60 on 64 workers
		// would otherwise wait for 16 of them to be free).
		if news && free > 0 && (inFlight == 0 || (backlog && !held && !serial && inFlight < claimsInFlight)) &&
			(!backlog || held || free >= max(1, p.q.Concurrency/4)) && !p.env.paused(p.q.Name) {
			after := pgstore.ClaimPosition{ScheduledAt: cursor.ScheduledAt.Add(-claimLookBack)}
			if !backlog || time.Since(fromStart) >= fromStartEvery {
				after, fromStart = pgstore.ClaimPosition{}, time.Now()
			}
			extra := 0
			if backlog {
				extra = p.prefetchable()
			}
			if free = p.reserve(free, extra); free == 0 && extra == 0 {
				continue // lent meanwhile
			}
			p.idle.Store(false)
			inFlight++
			// Under a backlog the next claim may start at once; held back
			// by a limit, not before a worker frees or the retry is due:
			// with workers idle and every group at its cap, a claim that
			// followed each throttled one ran some 2,000 a second, each
			// under the route's lock (TestThrottledPoolWaitsForRoom).
			news = backlog && !held
			go func() {
				r, err := p.claim(free, extra, after)
				r.err = err
				results <- r
			}()
			continue
		}
		if inFlight == 0 {
			wait := p.q.PollInterval
			if retry > 0 {
				wait = min(wait, retry)
			}
			resetTimer(poll, wait)
		}
		select {
		case <-p.env.stopClaim:
			return
		case r := <-results:
			inFlight--
			p.settleClaim(r)
			retry, held, bounded = r.retry, r.throttled, r.bounded
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
			case r.got == r.asked+r.extra:
				backoff = 100 * time.Millisecond
				backlog = true // every slot filled: there is probably more work
				news = true
				switch {
				case r.own < r.asked+r.extra: // its own queue came back short
					cursor = pgstore.ClaimPosition{}
				case cursor.Before(r.last):
					cursor = r.last
				}
			case r.throttled:
				// Short for a limit, not for want of jobs: the backlog and
				// its position stand, but nothing is news until a worker
				// frees or the retry is due.
				backoff = 100 * time.Millisecond
				backlog = true
				if cursor.Before(r.last) {
					cursor = r.last
				}
			default:
				backoff = 100 * time.Millisecond
				backlog = false
				cursor = pgstore.ClaimPosition{}
			}
			// Found the queue dry, with nothing in flight: a claim that
			// ingest carries may borrow the idle workers (lend).
			p.idle.Store(inFlight == 0 && r.err == nil && !backlog && !held && !bounded)
		case <-p.wakeC:
			news = true
			// A resumed queue's prefetched jobs wait in ready with their
			// slots taken: no claim would start them.
			p.mu.Lock()
			p.startReady()
			p.mu.Unlock()
		case <-p.freed:
			// A freed worker is news to claims that waited for workers
			// (a backlog) or for room a returned attempt gives back (held
			// by a limit, or bounded by a slot budget), and so is a lane
			// job's settled outcome, which may have queued its lane's
			// next job. Otherwise the last claim found the queue dry, and
			// a freed worker made nothing runnable: new work wakes the
			// pool or the poll finds it. Claims on freed workers were a
			// fifth of e2e's at 1,000 records/s, two of three for jobs
			// that arrive one at a time, and empty.
			news = news || backlog || held || bounded || p.freedLane.Swap(false)
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
	case <-p.env.stopClaim:
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

// endedLimited are the tokens of the pool's attempts of grouped routes
// whose handlers have returned, their outcomes on the way to the
// completer (pgstore.JobClaimParams.Ended). p.mu is held.
func (p *pool) endedLimited() []int64 {
	var out []int64
	for token, r := range p.leases {
		if r.returned && p.env.limits[r.job.Queue][r.job.Route].GroupMaxRunning > 0 {
			out = append(out, token)
		}
	}
	return out
}

// slotBudget is how many jobs of each of limits' routes with a
// max_running a claim may take (pgstore.JobClaimParams.Slots): the free
// slots of the process's share and, within the share, the pool's
// prefetch, less the jobs of the route that already wait in ready. A
// process holds no more of a capped route's jobs than its share can soon
// start, so that the others' shares find the rest. p.mu is held.
func (p *pool) slotBudget(limits map[string]pgstore.FlowLimit) map[string]int {
	out := map[string]int{}
	for route, l := range limits {
		if l.MaxRunning == 0 {
			continue
		}
		free, share, _ := p.env.slots.free(route)
		waiting := 0
		for _, r := range p.ready {
			if r.job.Route == route {
				waiting++
			}
		}
		out[route] = max(0, free+min(p.q.Prefetch, share)-waiting)
	}
	return out
}

// slotsClaimed tells the slots which capped routes' claims came back
// full (more may wait: the route got its budget, or the claim as a whole
// got all it asked for, which may have been less) or short with none of
// its jobs waiting in ready (dry here for now: the share may shrink to
// what is in use). A route that had no room in the claim is activated
// if it was not (a claim is made when work may be waiting: the lease
// then asks for slots to find it with), and named to throttled if it
// was: its share, all in use, held the claim back. It reports whether a
// route's budget bounded the claim: jobs may be left that a freed slot
// can start.
func (p *pool) slotsClaimed(budget map[string]int, jobs []*pgstore.Claimed, filled bool,
	throttled func(route, limit string)) (bounded bool) {
	if len(budget) == 0 {
		return false
	}
	got := map[string]int{}
	for _, j := range jobs {
		got[j.Route]++
	}
	waiting := map[string]bool{}
	p.mu.Lock()
	for _, r := range p.ready {
		waiting[r.job.Route] = true
	}
	p.mu.Unlock()
	for route, n := range budget {
		if n > 0 {
			bounded = bounded || got[route] >= n
			p.env.slots.claimed(route, filled || got[route] >= n || waiting[route])
			continue
		}
		if _, _, active := p.env.slots.free(route); active {
			throttled(route, pgstore.LimitMaxRunning)
		} else {
			p.env.slots.activate(route)
		}
	}
	return bounded
}

// claim claims up to n jobs for reserved slots and extra more to wait in
// ready: from the pool's own queue past after, then, for slots still
// free, from the queues it may steal from, in their order. It starts the
// jobs (the first n; the others wait in ready for a worker) and says how
// many it got in all and from its own queue, and where the own claim
// ended.
func (p *pool) claim(slots, extra int, after pgstore.ClaimPosition) (claimResult, error) {
	ctx, cancel := context.WithTimeout(p.env.jobCtx, 30*time.Second)
	defer cancel()
	n := slots + extra
	r := claimResult{asked: slots, extra: extra, last: after}
	limits := p.env.limits[p.q.Name]
	p.mu.Lock()
	limitedOnly := len(limits) > 0 && time.Now().Before(p.unlimitedDryUntil)
	ended := p.endedLimited()
	budget := p.slotBudget(limits)
	for _, from := range p.q.StealFrom {
		maps.Copy(budget, p.slotBudget(p.env.limits[from]))
	}
	p.mu.Unlock()
	// A limit that held the claim back says when to claim again.
	throttled := func(route, limit string) {
		if p.env.metrics != nil {
			p.env.metrics.FlowThrottled.WithLabelValues(route, limit).Inc()
		}
		retry := limitedRetry
		if l, ok := p.env.limits[p.q.Name][route]; ok && limit == pgstore.LimitRate {
			retry = min(retry, max(l.RateInterval, time.Millisecond))
		}
		if r.retry == 0 || retry < r.retry {
			r.retry = retry
		}
		r.throttled = true
	}
	jobs, last, err := p.env.store.JobClaim(ctx, pgstore.JobClaimParams{
		Queue: p.q.Name, Limit: n, Lease: p.q.Lease, MaxRuntime: p.q.MaxRuntime, After: after,
		Limits: limits, Slots: budget, LimitedOnly: limitedOnly, Throttled: throttled, Ended: ended})
	if err != nil {
		return r, err
	}
	if len(limits) > 0 && !limitedOnly &&
		!slices.ContainsFunc(jobs, func(j *pgstore.Claimed) bool { return !limits[j.Route].Limited() }) {
		// The queue's unlimited claim found nothing, after walking past
		// every limited job: skip it for a while (pgstore's LimitedOnly).
		// The queue's other routes' jobs then wait up to that long.
		p.mu.Lock()
		dry := unlimitedDryFor
		if p.q.AllLimited {
			dry = leftoverSweep
		}
		p.unlimitedDryUntil = time.Now().Add(dry)
		p.mu.Unlock()
	}
	r.own, r.last = len(jobs), last
	for _, from := range p.q.StealFrom {
		if len(jobs) == n {
			break
		}
		// Stolen jobs run under this pool's lease and max_runtime: its
		// workers hold them.
		stolen, _, err := p.env.store.JobClaim(ctx, pgstore.JobClaimParams{
			Queue: from, Limit: n - len(jobs), Lease: p.q.Lease, MaxRuntime: p.q.MaxRuntime,
			Limits: p.env.limits[from], Slots: budget, Throttled: throttled, Ended: ended})
		if err != nil {
			p.log.Warn("claim from a queue to steal from failed", zap.String("from", from), zap.Error(err))
			break
		}
		jobs = append(jobs, stolen...)
	}
	r.bounded = p.slotsClaimed(budget, jobs, len(jobs) == n, throttled)
	p.mu.Lock()
	// Stop waits for the claims in flight before it closes the pool.
	p.take(jobs, slots)
	p.mu.Unlock()
	r.got = len(jobs)
	return r, nil
}

// take holds claimed jobs: the first slots of them start on the workers
// reserved for them, each with a slot of its route's max_running if it
// has one; the rest wait in ready, heartbeated like them, and are
// released by Stop if no worker takes them. p.mu is held.
func (p *pool) take(jobs []*pgstore.Claimed, slots int) {
	now := time.Now()
	for i, j := range jobs {
		r := p.hold(workerJob(j), now)
		if i < slots && p.startable(r) {
			p.start(r)
			continue
		}
		r.waiting = now
		p.ready = append(p.ready, r)
	}
}
