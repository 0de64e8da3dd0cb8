package dispatch

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/switchyard-dev/switchyard/internal/metrics"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

// completer batches outcomes into one token-checked statement.
type completer struct {
	store   *pgstore.Store
	log     *zap.Logger
	metrics *metrics.Metrics
	in      chan pending
	done    chan struct{}
	once    sync.Once
}

type pending struct {
	out  pgstore.Outcome
	then func(applied bool)
}

const (
	completeBatch = 500
	completeWait  = 2 * time.Millisecond
)

func newCompleter(store *pgstore.Store, log *zap.Logger, m *metrics.Metrics) *completer {
	return &completer{store: store, log: log, metrics: m, in: make(chan pending, 4*completeBatch), done: make(chan struct{})}
}

func (c *completer) start() { go c.run() }

func (c *completer) submit(o pgstore.Outcome, then func(applied bool)) {
	c.in <- pending{out: o, then: then}
}

// stop flushes what was submitted and waits. Callers must have stopped
// submitting.
func (c *completer) stop() {
	c.once.Do(func() { close(c.in) })
	<-c.done
}

func (c *completer) run() {
	defer close(c.done)
	batch := make([]pending, 0, completeBatch)
	for {
		p, ok := <-c.in
		if !ok {
			return
		}
		batch = append(batch[:0], p)
		// Gather what arrives within a short window: under load the batch
		// fills at once, when idle it costs one wait.
		timer := time.NewTimer(completeWait)
	gather:
		for len(batch) < completeBatch {
			select {
			case p, ok := <-c.in:
				if !ok {
					break gather
				}
				batch = append(batch, p)
			case <-timer.C:
				break gather
			}
		}
		timer.Stop()
		c.flush(batch)
	}
}

// flush writes a batch, retrying database errors: an outcome is only
// dropped when its lease has since been lost, in which case the write
// would be rejected anyway and the rescuer owns the job.
func (c *completer) flush(batch []pending) {
	outs := make([]pgstore.Outcome, len(batch))
	for i, p := range batch {
		outs[i] = p.out
	}
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		applied, err := c.store.JobComplete(ctx, outs)
		cancel()
		if err == nil {
			for _, p := range batch {
				p.then(applied[p.out.ID])
			}
			return
		}
		if attempt >= 10 {
			c.log.Error("recording outcomes failed; their leases will expire and the jobs be retried",
				zap.Int("jobs", len(outs)), zap.Error(err))
			for _, p := range batch {
				p.then(false)
			}
			return
		}
		c.log.Warn("recording outcomes failed; retrying", zap.Error(err))
		time.Sleep(backoff)
		backoff = min(backoff*2, 2*time.Second)
	}
}
