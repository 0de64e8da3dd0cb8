// Package sampler refreshes the gauges whose values live in Postgres and
// Kafka rather than in this process: queue depth by state and the oldest
// runnable age, DLQ entries, blocked lanes, and the Kafka lag of the
// partitions this process owns; and it takes the tally of job ends made in
// SQL into the attempts counter. It never changes a job.
package sampler

import (
	"context"
	"crypto/rand"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/switchyard-dev/switchyard/internal/dlq"
	"github.com/switchyard-dev/switchyard/internal/ingest"
	"github.com/switchyard-dev/switchyard/internal/metrics"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/startstop"
	"github.com/switchyard-dev/switchyard/jobstate"
)

// Config configures a Sampler.
type Config struct {
	// Queues are the configured queue names: each reports an oldest
	// runnable age, 0 included, even before it has rows.
	Queues []string
	// OrderedRoutes report switchyard_lanes_blocked, 0 included.
	OrderedRoutes []string
	// Groups are admin.GroupsOf the config: a job its group's cap holds
	// counts in the oldest waiting age, not the runnable one.
	Groups pgstore.Groups
	// Lag measures the Kafka lag of the partitions this process owns; nil
	// for a process that does not ingest.
	Lag func(ctx context.Context) ([]ingest.PartitionLag, error)
	// Interval is how often the gauges are refreshed. Defaults to 5s.
	Interval time.Duration
}

// Sampler is the gauges' refresher.
type Sampler struct {
	cfg     Config
	process string // names this process's queue_flow rows
	store   *pgstore.Store
	metrics *metrics.Metrics
	log     *zap.Logger
	loop    startstop.Loop
}

// New builds a Sampler; Start runs it.
func New(cfg Config, store *pgstore.Store, m *metrics.Metrics, log *zap.Logger) *Sampler {
	if cfg.Interval == 0 {
		cfg.Interval = 5 * time.Second
	}
	return &Sampler{cfg: cfg, store: store, metrics: m, log: log.Named("sampler"), process: rand.Text()}
}

// Start refreshes the gauges once at once and then every interval, until
// Stop. It returns at once.
func (s *Sampler) Start(ctx context.Context) error {
	s.loop.Start(ctx, s.run)
	return nil
}

// Stop ends the refreshing and waits for a round in progress, or until
// ctx ends. Idempotent.
func (s *Sampler) Stop(ctx context.Context) error { return s.loop.Stop(ctx) }

func (s *Sampler) run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		if err := s.publishFlow(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("publishing queue flow counts failed", zap.Error(err))
		}
		if err := s.takeTally(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("taking the tally of jobs ended in SQL failed", zap.Error(err))
		}
		if err := s.sampleQueues(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("reading queue stats failed", zap.Error(err))
		}
		s.sampleLag(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// publishFlow publishes this process's arrival and completion counts
// (metrics.QueueFlow), which GET /v1/queues sums over the fleet.
func (s *Sampler) publishFlow(ctx context.Context) error {
	arrived, finished := s.metrics.Flow.Snapshot()
	if len(arrived)+len(finished) == 0 {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return s.store.QueueFlowPut(pctx, s.process, arrived, finished)
}

// takeTally counts the job ends that SQL tallied (stale versions skipped
// by lane promotion, running attempts cancelled by an operator) into
// switchyard_job_attempts_total.
func (s *Sampler) takeTally(ctx context.Context) error {
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ends, err := s.store.OutcomeTallyTake(tctx)
	for end, n := range ends {
		s.metrics.JobAttempts.WithLabelValues(end[0], end[1]).Add(float64(n))
	}
	return err
}

// sampleQueues refreshes the queue, DLQ and lane gauges from Postgres.
func (s *Sampler) sampleQueues(ctx context.Context) error {
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	stats, err := s.store.QueueStats(qctx, s.cfg.Groups)
	var pauses map[pgstore.PauseKind]map[string]time.Time
	if err == nil {
		pauses, err = s.store.Pauses(qctx)
	}
	cancel()
	if err != nil {
		return err
	}
	m := s.metrics
	// A paused queue's runnable age grows by design: alerts and scalers
	// leave it out by this gauge.
	for _, name := range s.cfg.Queues {
		paused := 0.0
		if _, ok := pauses[pgstore.PauseQueue][name]; ok {
			paused = 1
		}
		m.QueuePaused.WithLabelValues(name).Set(paused)
	}
	m.QueueJobs.Reset()
	m.QueueOldestAge.Reset()
	m.QueueWaitingAge.Reset()
	m.DLQEntries.Reset()
	// Every configured queue reports every depth state, zero included,
	// so that a series does not vanish as its jobs come and go.
	for _, name := range s.cfg.Queues {
		m.QueueOldestAge.WithLabelValues(name).Set(0)
		m.QueueWaitingAge.WithLabelValues(name).Set(0)
		for _, st := range jobstate.Depth {
			m.QueueJobs.WithLabelValues(name, string(st)).Set(0)
		}
		m.QueueJobs.WithLabelValues(name, pgstore.Reserved).Set(0)
		for _, reason := range dlq.Reasons {
			m.DLQEntries.WithLabelValues(name, reason).Set(0)
		}
	}
	for q, st := range stats {
		m.QueueOldestAge.WithLabelValues(q).Set(st.OldestRunnableAgeSeconds)
		m.QueueWaitingAge.WithLabelValues(q).Set(st.OldestWaitingAgeSeconds)
		for state, n := range st.Jobs {
			m.QueueJobs.WithLabelValues(q, state).Set(float64(n))
		}
		for reason, n := range st.DLQ {
			m.DLQEntries.WithLabelValues(q, reason).Set(float64(n))
		}
	}
	qctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	blocked, err := s.store.LaneBlocked(qctx)
	cancel()
	if err != nil {
		return err
	}
	m.LanesBlocked.Reset()
	for _, r := range s.cfg.OrderedRoutes {
		m.LanesBlocked.WithLabelValues(r).Set(float64(blocked[r]))
	}
	return nil
}

// sampleLag refreshes the Kafka lag gauges of the partitions this process
// owns; a process that does not ingest has none.
func (s *Sampler) sampleLag(ctx context.Context) {
	if s.cfg.Lag == nil {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	lags, err := s.cfg.Lag(lctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("reading kafka lag failed", zap.Error(err))
		}
		return
	}
	m := s.metrics
	m.KafkaLagRecords.Reset()
	m.KafkaLagSeconds.Reset()
	seconds := map[string]float64{}
	for _, l := range lags {
		m.KafkaLagRecords.WithLabelValues(l.Topic, strconv.Itoa(int(l.Partition))).Set(float64(l.Records))
		seconds[l.Topic] = max(seconds[l.Topic], l.Seconds)
	}
	for topic, sec := range seconds {
		m.KafkaLagSeconds.WithLabelValues(topic).Set(sec)
	}
}
