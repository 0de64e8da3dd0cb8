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
	depth  map[string]int  // queue → unstarted jobs as last read, plus Added since
	over   map[string]bool // queue → backpressured
}

// New builds a Watcher; Refresh (or Run) fills it.
func New(store *pgstore.Store, cfg Config, log *zap.Logger) (*Watcher, error) {
	if cfg.Interval <= 0 {
		return nil, errors.New("flow: Interval must be positive")
	}
	cfg.MaxDepth, cfg.RouteQueue = maps.Clone(cfg.MaxDepth), maps.Clone(cfg.RouteQueue)
	return &Watcher{store: store, cfg: cfg, log: log.Named("flow"), queues: map[string]bool{},
		routes: map[string]bool{}, depth: map[string]int{}, over: map[string]bool{}}, nil
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
	for q, n := range depths {
		w.depth[q] = n
		limit := w.cfg.MaxDepth[q]
		// Over at the limit; back under only below 90 % of it.
		over := n >= limit || (w.over[q] && n*10 >= limit*9)
		changed = changed || over != w.over[q]
		w.over[q] = over
	}
	w.mu.Unlock()
	if changed && w.cfg.OnChange != nil {
		w.cfg.OnChange()
	}
	return nil
}

// Added counts n unstarted jobs that ingest just stored in queue, so that
// the route holds at the batch that took it to max_depth rather than at
// the next read.
func (w *Watcher) Added(queue string, n int) {
	limit := w.cfg.MaxDepth[queue]
	if limit <= 0 || n <= 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.depth[queue] += n
	if w.depth[queue] >= limit {
		w.over[queue] = true
	}
}

// QueuePaused reports whether an operator paused queue.
func (w *Watcher) QueuePaused(queue string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.queues[queue]
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
