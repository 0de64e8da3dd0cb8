package dispatch

// Slots: this process's shares of its routes' max_running.

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

// slots holds this process's share of the max_running of each of its
// routes that has one (internal/flow/doc.go): a handler of such a route
// starts only on a slot of the share (take), and gives it back when it
// returns (put). The share is leased from the database
// (pgstore.FlowSlotsLease), renewed every `every` for `ttl` (every
// slotsBusyEvery while a route may have work here), and sooner when the
// process wants more of it than it has (kick).
type slots struct {
	store  *pgstore.Store
	log    *zap.Logger
	holder string
	// ttl is how long a lease of shares holds; every, how often they are
	// renewed. A handler's lease never outlasts the share it runs under
	// (take, covers), so ttl must leave room for a job lease past a
	// renewal: slotsTTL.
	ttl, every time.Duration
	wake       func() // wakes every pool: a share may have grown
	kick       chan struct{}

	mu     sync.Mutex
	routes map[string]*routeSlots
}

type routeSlots struct {
	cap int
	// share is how many of the route's handlers this process may run at
	// once, until until (by this process's clock, measured from before
	// the lease was asked for, so never past the row's expiry).
	share int
	until time.Time
	inUse int
	// leasing is set while a lease is in flight, with the in-use count it
	// sent: the new row keeps at least that many slots, and no more may be
	// in use until the new share is known (take).
	leasing bool
	sent    int
	// active: the route may have work here, so its lease asks for all of
	// max_running (the database splits it among the processes that ask);
	// else for the slots in use. Set by a claim that filled its part of
	// the route, or a start that found no slot; cleared by a claim that
	// came back short of it.
	active bool
	// refused: a start found no slot since the last lease was sent; the
	// lease that follows wakes the pools, whose refused starts wait.
	refused bool
}

// slotsGap is the least time between two leases: a kick waits for it.
const slotsGap = 10 * time.Millisecond

// slotsBusyEvery is how often the shares are renewed while a route may
// have work here (routeSlots.active), if that is sooner than every: the
// database splits max_running among the processes that ask only when
// they lease. A process that took all of it before another asked gives
// the other its part at its next lease, and one that asked while the
// other held all gets it at its own next lease: with the default job
// lease of 30 s (renewed every 10 s), two processes sharing a
// max_running of 3 ran at most 2 through a 5 s burst.
const slotsBusyEvery = time.Second

// slotsTTL is how long a lease of shares holds, given the longest and
// the shortest job lease of the process's queues: renewed every third of
// the shortest, a share always holds for a job lease and a half after a
// renewal, so that a handler started on it (take) or extended (covers)
// never holds its job past the share.
func slotsTTL(longest, shortest time.Duration) (ttl, every time.Duration) {
	return longest + longest/2, shortest / 3
}

// newSlots returns the slots of the routes with a max_running among
// limits, or nil when there are none.
func newSlots(store *pgstore.Store, log *zap.Logger, holder string, limits map[string]map[string]pgstore.FlowLimit,
	longest, shortest time.Duration, wake func()) *slots {
	routes := map[string]*routeSlots{}
	for _, byRoute := range limits {
		for route, l := range byRoute {
			if l.MaxRunning > 0 {
				routes[route] = &routeSlots{cap: l.MaxRunning, active: true}
			}
		}
	}
	if len(routes) == 0 {
		return nil
	}
	ttl, every := slotsTTL(longest, shortest)
	return &slots{store: store, log: log, holder: holder, ttl: ttl, every: every, wake: wake,
		kick: make(chan struct{}, 1), routes: routes}
}

// take takes a slot of route for a handler whose job lease is lease
// (took), or says that none is free (ok false) and asks for more. A route
// without a max_running needs none (ok, not took). Nil slots hold no
// route.
func (s *slots) take(route string, lease time.Duration) (ok, took bool) {
	if s == nil {
		return true, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.routes[route]
	if r == nil {
		return true, false
	}
	limit := r.share
	if r.leasing {
		limit = min(limit, r.sent)
	}
	if r.inUse < limit && time.Until(r.until) > lease {
		r.inUse++
		return true, true
	}
	r.active, r.refused = true, true
	s.kickLocked()
	return false, false
}

// put gives back a slot that take gave.
func (s *slots) put(route string) {
	s.mu.Lock()
	s.routes[route].inUse--
	s.mu.Unlock()
}

// covers reports whether a handler of route may have its job lease
// extended by lease: its share must hold at least as long, or another
// process could be given its slot while it runs.
func (s *slots) covers(route string, lease time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Until(s.routes[route].until) > lease
}

// free is how many more handlers of route the share lets start now, the
// share, and whether the route is active.
func (s *slots) free(route string) (free, share int, active bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.routes[route]
	return max(0, r.share-r.inUse), r.share, r.active
}

// activate marks route as maybe having work here, and asks for a lease
// that wants its slots.
func (s *slots) activate(route string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.routes[route]; !r.active {
		r.active = true
		s.kickLocked()
	}
}

// claimed tells the slots whether a claim of route found all it asked
// for (more may be waiting) or less (the route is dry here for now).
func (s *slots) claimed(route string, full bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.routes[route]; r != nil && r.active != full {
		r.active = full
		if !full {
			s.kickLocked() // give back what is not in use
		}
	}
}

// kickLocked asks for a lease soon. s.mu is held.
func (s *slots) kickLocked() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// run leases the shares until stop is closed: when the last lease says
// (s.every, or slotsBusyEvery), and on a kick at most every slotsGap.
func (s *slots) run(stop <-chan struct{}) {
	t := time.NewTimer(0)
	defer t.Stop()
	var last time.Time
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if wait := s.every - time.Since(last); wait > 0 && !s.busy() {
				// A renewal early for a route that had work, which has
				// none any more: wait for the regular one.
				resetTimer(t, wait)
				continue
			}
		case <-s.kick:
			if wait := slotsGap - time.Since(last); wait > 0 {
				select {
				case <-stop:
					return
				case <-time.After(wait):
				}
			}
		}
		last = time.Now()
		resetTimer(t, s.lease())
	}
}

// busy reports whether a route may have work here: its shares are then
// renewed every slotsBusyEvery.
func (s *slots) busy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.routes {
		if r.active {
			return true
		}
	}
	return false
}

// lease renews every share once, and says when to renew them next
// (every, or slotsBusyEvery while a route may have work here). While it
// is in flight, no more slots may be in use than it says (take): the row
// it writes keeps at least those, and the share it returns may be
// smaller than the one it replaces (the database splits max_running
// among the processes that ask). A lease that fails may still have
// committed: the share is then cut to what was in use, which the row
// kept whatever it says; it runs out at its time, and handlers stop
// starting on it.
func (s *slots) lease() time.Duration {
	s.mu.Lock()
	asks := make([]pgstore.SlotAsk, 0, len(s.routes))
	was := make(map[string]int, len(s.routes))
	refused := false
	for _, route := range slices.Sorted(maps.Keys(s.routes)) {
		r := s.routes[route]
		want := r.inUse
		if r.active {
			want = r.cap
		}
		r.leasing, r.sent = true, r.inUse
		was[route] = r.share
		refused = refused || r.refused
		r.refused = false
		asks = append(asks, pgstore.SlotAsk{Route: route, Cap: r.cap, Want: want, InUse: r.inUse})
	}
	s.mu.Unlock()
	sent := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), s.every)
	defer cancel()
	shares, err := s.store.FlowSlotsLease(ctx, s.holder, asks, s.ttl)
	grew := false
	s.mu.Lock()
	for route, r := range s.routes {
		r.leasing = false
		if err != nil {
			r.share = min(r.share, r.sent)
			continue
		}
		r.share, r.until = shares[route], sent.Add(s.ttl)
		grew = grew || r.share > was[route]
	}
	s.mu.Unlock()
	if err != nil {
		s.log.Warn("leasing max_running slots failed", zap.Error(err))
		return s.next()
	}
	// A share that grew has room to claim for, and starts refused before
	// the lease wait in ready: wake the pools. Only then: a lease that
	// woke them each time kept an idle process busy, its claim finding
	// the route dry and shrinking the share (a lease), the next finding
	// no room and asking for it again (a lease, a wake-up), some 70
	// times a second (TestIdleProcessStaysQuiet).
	if grew || refused {
		s.wake()
	}
	return s.next()
}

// next is when to renew the shares after a lease.
func (s *slots) next() time.Duration {
	if s.busy() {
		return min(s.every, slotsBusyEvery)
	}
	return s.every
}

// release gives back every share (at stop, once no handler runs).
func (s *slots) release(ctx context.Context) {
	if err := s.store.FlowSlotsRelease(ctx, s.holder); err != nil {
		s.log.Warn("releasing max_running slots failed; they come back when their lease expires", zap.Error(err))
	}
}
