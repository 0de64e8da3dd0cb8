package dispatch

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/switchyard-dev/switchyard/internal/metrics"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/workers"
)

// completer batches outcomes into one token-checked statement.
type completer struct {
	store   *pgstore.Store
	log     *zap.Logger
	metrics *metrics.Metrics
	in      chan pending
	done    chan struct{}

	mu      sync.RWMutex
	closed  bool
	closing atomic.Bool
}

type pending struct {
	out pgstore.Outcome
	by  settler
}

// settler is the attempt an outcome is of (*running). It learns whether
// the outcome applied and, if its pool asked, the lane job handed off to
// it (running and leased: it must start it or release it). An interface
// holding the attempt, not a closure: a closure over an attempt's
// outcome cost two allocations a job.
type settler interface {
	settled(out pgstore.Outcome, applied bool, next *workers.Job)
}

// A batch holds at most completeBatch outcomes, gathered for at most
// completeWait, and completeFlushers batches are written at once.
//
// Why 200: a pool holds up to leaseCap × concurrency outcomes in flight,
// and with lane handoffs nearly all of them wait for the completer. At
// 500 they went out in one or two batches at a time and the database sat
// half idle between them (ordered 13.3k jobs/s); at 100–200 several are
// written at once (17–19k). On a faster machine, where ordered is bound
// by the database's CPU, 200 beat 100 by a tenth (bench --only ordered,
// medians of nine runs each in turn: 30.7k against 27.3k jobs/s; 300 no
// better than 200): each completion's lanes_advance has a cost per
// statement as well as per job. Unordered batches grew from 85 outcomes
// on average to about 134, and work's pace did not move.
const (
	completeBatch    = 200
	completeWait     = 2 * time.Millisecond
	completeFlushers = 4
)

func newCompleter(store *pgstore.Store, log *zap.Logger, m *metrics.Metrics) *completer {
	return &completer{store: store, log: log, metrics: m, in: make(chan pending, 4*completeBatch), done: make(chan struct{})}
}

func (c *completer) start() { go c.run() }

// submit queues an outcome. After stop, the outcome is dropped: only a
// handler that outlived shutdown can get here, and its lease expiring
// hands the job to the rescuer.
func (c *completer) submit(o pgstore.Outcome, by settler) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		by.settled(o, false, nil)
		return
	}
	c.in <- pending{out: o, by: by}
}

// stop flushes what was submitted and waits. Idempotent.
func (c *completer) stop() {
	c.closing.Store(true)
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.in)
	}
	c.mu.Unlock()
	<-c.done
}

// run gathers outcomes into batches and hands them to completeFlushers
// goroutines, so that one slow statement (a batch of lane heads ends in a
// transaction of its own) does not hold up the next batch. Concurrent
// batches never share a job, and lane rows are locked in a fixed order.
func (c *completer) run() {
	defer close(c.done)
	batches := make(chan []pending)
	var flushers sync.WaitGroup
	for range completeFlushers {
		flushers.Add(1)
		go func() {
			defer flushers.Done()
			for b := range batches {
				c.flush(b)
			}
		}()
	}
	defer flushers.Wait()
	defer close(batches)
	for {
		p, ok := <-c.in
		if !ok {
			return
		}
		batch := make([]pending, 1, completeBatch)
		batch[0] = p
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
		batches <- batch
	}
}

// flush writes a batch, retrying database errors for as long as the
// process runs: an outcome written late is still applied if its token
// holds (nobody else took the job meanwhile), which saves a re-run after
// an outage. Only once the completer is stopping does it give up after a
// few attempts, so that shutdown is bounded; those jobs' leases expire and
// the rescuer requeues them.
func (c *completer) flush(batch []pending) {
	outs := make([]pgstore.Outcome, len(batch))
	for i, p := range batch {
		outs[i] = p.out
	}
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		done, err := c.store.JobComplete(ctx, outs)
		cancel()
		if err == nil {
			for _, p := range batch {
				// Only an applied outcome ended its lane's head, so each
				// handed-off job reaches exactly one pool.
				applied := done.Applied[p.out.Token]
				var next *workers.Job
				if applied {
					next = workerJob(done.Next[p.out.ID])
				}
				p.by.settled(p.out, applied, next)
			}
			return
		}
		if c.stopping() && attempt >= stopAttempts {
			c.log.Error("recording outcomes failed at shutdown; their leases will expire and the jobs be retried",
				zap.Int("jobs", len(outs)), zap.Error(err))
			for _, p := range batch {
				p.by.settled(p.out, false, nil)
			}
			return
		}
		c.log.Warn("recording outcomes failed; retrying", zap.Error(err), zap.Int("attempt", attempt))
		time.Sleep(backoff)
		backoff = min(backoff*2, 2*time.Second)
	}
}

// stopAttempts bounds the retries of a batch once the completer stops.
const stopAttempts = 5

// stopping is an atomic, not c.mu: stop may be waiting for c.mu while a
// submitter holds it, blocked on a full channel that only the flushers can
// drain.
func (c *completer) stopping() bool { return c.closing.Load() }
