package flow

import (
	"context"
	"errors"
	"maps"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

// Why a route is held.
const (
	CauseOperator     = "operator"
	CauseBackpressure = "backpressure"
)

// Causes are the values of a route's hold besides "" (not held), for the
// metric's label set.
var Causes = []string{CauseOperator, CauseBackpressure}

// Config configures a Watcher.
type Config struct {
	// Interval is how often pauses and depths are read. Required.
	Interval time.Duration
	// MaxDepth is each queue's max_depth; 0 or absent: no backpressure.
	MaxDepth map[string]int
	// RouteQueue maps each route this process ingests (by name) to the
	// queue it feeds.
	RouteQueue map[string]string
	// OnChange, when set, is called after a read that changed what is
	// held, outside the Watcher's lock.
	OnChange func()
}

// Watcher keeps this process's view of the pauses and of backpressure.
// Its methods are safe for concurrent use.
type Watcher struct {
	store *pgstore.Store
	cfg   Config
	log   *zap.Logger

	mu     sync.Mutex
	queues map[string]bool // paused by an operator
	routes map[string]bool // paused by an operator
	// schedules are the paused schedules (internal/schedule asks).
	schedules map[string]bool
	depth     map[string]int  // queue → unstarted jobs as last read, plus Added since
	over      map[string]bool // queue → backpressured
	// known is when what depth says of a queue was true: the start of the
	// read it comes from, or the last Added. A read that started earlier
	// is stale — it may miss a batch counted since — and is ignored.
	known map[string]time.Time
}

// New builds a Watcher; Refresh (or Run) fills it.
func New(store *pgstore.Store, cfg Config, log *zap.Logger) (*Watcher, error) {
	if cfg.Interval <= 0 {
		return nil, errors.New("flow: Interval must be positive")
	}
	cfg.MaxDepth, cfg.RouteQueue = maps.Clone(cfg.MaxDepth), maps.Clone(cfg.RouteQueue)
	return &Watcher{store: store, cfg: cfg, log: log.Named("flow"), queues: map[string]bool{},
		routes: map[string]bool{}, schedules: map[string]bool{}, depth: map[string]int{}, over: map[string]bool{}, known: map[string]time.Time{}}, nil
}

// Run refreshes every Interval until ctx ends. A failed read keeps what
// was known: a pause stays a pause while the database is away.
func (w *Watcher) Run(ctx context.Context) {
	t := time.NewTicker(w.cfg.Interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := w.Refresh(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			w.log.Warn("reading pauses and queue depths failed; keeping what was known", zap.Error(err))
			failing = true
		case err == nil && failing:
			w.log.Info("reading pauses and queue depths again")
			failing = false
		}
	}
}

// Refresh reads the pauses and the depth of every queue with a
// max_depth that a route of this process feeds.
func (w *Watcher) Refresh(ctx context.Context) error {
	pauses, err := w.store.Pauses(ctx)
	if err != nil {
		return err
	}
	depths := map[string]int{}
	start := time.Now()
	for _, q := range w.cfg.RouteQueue {
		limit := w.cfg.MaxDepth[q]
		if _, done := depths[q]; done || limit <= 0 {
			continue
		}
		if depths[q], err = w.store.QueueDepth(ctx, q, limit); err != nil {
			return err
		}
	}
	w.mu.Lock()
	changed := !sameKeys(w.queues, pauses[pgstore.PauseQueue]) || !sameKeys(w.routes, pauses[pgstore.PauseRoute])
	w.queues, w.routes = set(pauses[pgstore.PauseQueue]), set(pauses[pgstore.PauseRoute])
	w.schedules = set(pauses[pgstore.PauseSchedule])
	for q, n := range depths {
		changed = w.setDepth(q, n, start) || changed
	}
	w.mu.Unlock()
	if changed && w.cfg.OnChange != nil {
		w.cfg.OnChange()
	}
	return nil
}

// setDepth records a read of queue's depth that started at start, unless
// it is stale (see known), and says whether that changed the queue's
// backpressure: over at the limit, back under only below 90 % of it
// (hysteresis). w.mu is held.
func (w *Watcher) setDepth(queue string, n int, start time.Time) bool {
	if start.Before(w.known[queue]) {
		return false
	}
	w.depth[queue], w.known[queue] = n, start
	limit := w.cfg.MaxDepth[queue]
	over := n >= limit || (w.over[queue] && n*10 >= limit*9)
	changed := over != w.over[queue]
	w.over[queue] = over
	return changed
}

// Added counts n unstarted jobs that ingest just stored in queue, and
// reads the queue's depth again at once: the other ingesting processes'
// batches since the last read are in it, so that each process adds at
// most one batch past the limit, never a guess's worth of the others'.
// (A read counts no further than max_depth: at most that many index
// entries per batch, a fraction of what storing a full batch costs.) The
// caller applies the holds before it fetches again.
func (w *Watcher) Added(ctx context.Context, queue string, n int) {
	limit := w.cfg.MaxDepth[queue]
	if limit <= 0 || n <= 0 {
		return
	}
	w.mu.Lock()
	w.depth[queue] += n
	w.known[queue] = time.Now()
	if w.depth[queue] >= limit {
		w.over[queue] = true
	}
	w.mu.Unlock()
	start := time.Now()
	depth, err := w.store.QueueDepth(ctx, queue, limit)
	if err != nil {
		return // the estimate stands until the next read
	}
	w.mu.Lock()
	w.setDepth(queue, depth, start)
	w.mu.Unlock()
}

// QueuePaused reports whether an operator paused queue.
func (w *Watcher) QueuePaused(queue string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.queues[queue]
}

// SchedulePaused reports whether an operator paused a schedule.
func (w *Watcher) SchedulePaused(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.schedules[name]
}

// RouteHold says why a route's fetching is held: CauseOperator,
// CauseBackpressure, or "" when it is not.
func (w *Watcher) RouteHold(route string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.routes[route]:
		return CauseOperator
	case w.over[w.cfg.RouteQueue[route]]:
		return CauseBackpressure
	}
	return ""
}

func set[V any](m map[string]V) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

func sameKeys[V any](a map[string]bool, b map[string]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range b {
		if !a[k] {
			return false
		}
	}
	return true
}
