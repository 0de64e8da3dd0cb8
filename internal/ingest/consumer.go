package ingest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/metrics"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/tracing"
)

// Config configures a Consumer.
type Config struct {
	// Kafka is the config's kafka block as config.SetDefaults leaves it:
	// brokers, group, reset, fetch size, group protocol, session timeout,
	// static membership, TLS and SASL. The defaults live there only.
	Kafka config.Kafka
	// OAuthToken is an embedder's OAUTHBEARER hook (see ClientOpts).
	OAuthToken OAuthTokenFunc
	// Routes, several per topic when their filters split it. Required.
	Routes []*Route
	// ResetOffsets allows resuming from Kafka's committed offsets for
	// partitions that have none stored in Postgres. Without it such a
	// partition stops the consumer: the database was lost or replaced, and
	// silently resuming would skip whatever the old database held.
	ResetOffsets bool
	// Opts are extra franz-go options for embedders (tuning, dialers).
	// They are applied after Switchyard's own.
	Opts []kgo.Opt
	// StuckAfter is how long a polled batch may go unstored (its
	// transaction failing or hanging) before Ready reports the consumer
	// stuck. Defaults to 30s.
	StuckAfter time.Duration
	// Holds says which routes' fetching to hold (flow.Watcher; see
	// ApplyHolds): a topic is fetched while none of its routes is held.
	// Nil: none is ever held.
	Holds Holds
	// Tracer, when set, gives each stored batch a span linked to its
	// records' traces (internal/tracing); nil, tracing is off and no
	// record header is read for it.
	Tracer trace.Tracer
	// Wake, when set, is told each queue that a stored batch gave
	// runnable jobs, as soon as it commits: a dispatcher in the same
	// process then claims them without waiting for the NOTIFY, which
	// still wakes the others.
	Wake func(queue string)
	// Claims and Claimed, when set, lend this process's idle workers to
	// the batches it stores (the dispatcher's IngestClaims and
	// IngestClaimed): a batch that commits in one round trip claims
	// runnable jobs of its queues for them in its own transaction
	// (pgstore.IngestClaim), and a queue claimed for needs no wake-up.
	// Claimed follows every attempt at storing a batch that Claims lent
	// workers to, whatever its outcome.
	Claims  func(queues []string) []*pgstore.IngestClaim
	Claimed func([]*pgstore.IngestClaim)
}

// Holds is what the consumer asks of flow control.
type Holds interface {
	// RouteHold says why a route's fetching is held ("" when it is not).
	RouteHold(route string) string
	// Added counts the unstarted jobs a stored batch added to a queue,
	// net of those its claims started (n ≤ 0 adds none).
	Added(ctx context.Context, queue string, n int)
}

var errSimulatedCrash = errors.New("simulated crash after the Postgres commit")

type tp struct {
	topic     string
	partition int32
}

// Consumer turns records into job rows (see doc.go).
type Consumer struct {
	cfg     Config
	opts    []kgo.Opt // from the kafka block: ClientOpts and groupOpts
	lagOpts []kgo.Opt // ClientOpts and the embedder's: Lag's reads of first unstored records
	store   *pgstore.Store
	log     *zap.Logger
	metrics *metrics.Metrics
	// topics are the routes of each topic, in config order; routes are
	// the same routes by name.
	topics map[string][]*Route
	routes map[string]*Route
	// crashAfterStore, when set and returning true, makes the loop stop
	// right after the Postgres commit, before the Kafka commit, as a crash
	// there would: tests use it to hit that exact point.
	crashAfterStore func() bool
	// splitPolls counts the polls stored in two halves (split), for
	// tests to see that they were.
	splitPolls atomic.Int64

	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}
	err    error // why the loop stopped, read after done closes

	commits     *kafkaCommits // Kafka's offsets, following the stored ones
	commitEvery time.Duration // kafkaCommitEvery; tests stretch it

	stopOnce sync.Once
	stopErr  error // what Stop could not finish

	mu sync.Mutex
	// pendingSince is when the batch in hand was first tried; zero while
	// there is none. See Ready.
	pendingSince time.Time
	// expected is the stored next offset of each owned partition as this
	// member last saw it, -1 when no row exists yet: the fence of I1.
	expected map[tp]int64
	// stored is the timestamp of the last record stored per owned
	// partition, for the time lag; until this member stores one, that of
	// the first record not stored, once Lag has read it.
	stored map[tp]time.Time
	fatal  error

	holdMu sync.Mutex
	held   map[string]string // topic → why its fetching is held: hold.why

	// rebalanceWaiting is set while a rebalance waits for the polls in
	// hand to be stored (pollahead.go).
	rebalanceWaiting atomic.Bool
}

// New validates cfg and builds a consumer; Start connects.
func New(cfg Config, store *pgstore.Store, log *zap.Logger, m *metrics.Metrics) (*Consumer, error) {
	k := cfg.Kafka
	switch {
	case len(k.Brokers) == 0:
		return nil, errors.New("kafka.brokers: at least one broker is required")
	case k.Group == "":
		return nil, errors.New("kafka.group: required")
	case k.FetchMaxRecords <= 0:
		return nil, fmt.Errorf("kafka.fetch_max_records: %d is not positive", k.FetchMaxRecords)
	case k.FetchMaxBytes <= 0:
		return nil, fmt.Errorf("kafka.fetch_max_bytes: %d is not positive", k.FetchMaxBytes)
	case len(cfg.Routes) == 0:
		return nil, errors.New("routes: at least one route is required")
	}
	opts, err := ClientOpts(k, cfg.OAuthToken)
	if err != nil {
		return nil, err
	}
	lagOpts := append(slices.Clone(opts), cfg.Opts...)
	opts = append(opts, groupOpts(k)...)
	if cfg.StuckAfter == 0 {
		cfg.StuckAfter = 30 * time.Second
	}
	c := &Consumer{cfg: cfg, opts: opts, lagOpts: lagOpts, store: store, log: log.Named("ingest"), metrics: m,
		topics: map[string][]*Route{}, routes: map[string]*Route{}, expected: map[tp]int64{}, stored: map[tp]time.Time{}, held: map[string]string{},
		commitEvery: kafkaCommitEvery}
	for _, r := range cfg.Routes {
		c.topics[r.Topic] = append(c.topics[r.Topic], r)
		c.routes[r.Name] = r
	}
	return c, nil
}

func (c *Consumer) topicNames() []string {
	return slices.Sorted(maps.Keys(c.topics))
}

// fetchMaxWait is how long the broker may hold a fetch that finds no new
// data: the Java consumer's and librdkafka's default, not the client's
// 5 s. A fetch in flight is not cut short when a topic's hold is lifted or
// a partition is newly assigned; those are fetched by the next, so an idle
// fetch of the process's other partitions kept their records waiting up
// to its max wait (TestResumedTopicIsFetchedWithoutWaitingOutAnIdleFetch:
// 5.0 s; a CI run saw one partition's first record 4.9 s behind the
// other's). An idle consumer sends two fetches a second instead of one in
// five; a fetch that finds data returns at once either way.
const fetchMaxWait = 500 * time.Millisecond

// Start joins the group and begins consuming. It returns once the client
// is created; Done reports when the loop ends.
func (c *Consumer) Start(ctx context.Context) error {
	// The kafka block's options (ClientOpts, with the group's), then the
	// consumer's own hooks, then the embedder's.
	opts := append(slices.Clone(c.opts),
		kgo.ConsumeTopics(c.topicNames()...),
		kgo.DisableAutoCommit(),
		// No rebalance can revoke a partition between a poll and the end
		// of its transaction, so we never commit for a partition we lost
		// in the middle of a batch. The Postgres fence covers the rest.
		kgo.BlockRebalanceOnPoll(),
		kgo.AdjustFetchOffsetsFn(c.adjustOffsets),
		kgo.OnPartitionsRevoked(c.revoked),
		kgo.OnPartitionsLost(c.lost),
		kgo.OnPartitionsCallbackBlocked(func(context.Context, *kgo.Client) { c.rebalanceWaiting.Store(true) }),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// A transaction's marker takes an offset but holds no record, and
		// follows an aborted transaction's records, which read committed
		// never returns. Kept, it moves the stored position past them
		// (build); dropped, a partition whose last write ended a
		// transaction would read one record behind for ever, and its lag
		// in seconds grow without end.
		kgo.KeepControlRecords(),
		kgo.FetchMaxWait(fetchMaxWait),
		kgo.WithLogger(kgoLogger{c.log}),
	)
	cl, err := kgo.NewClient(append(opts, c.cfg.Opts...)...)
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	c.cl = cl
	c.commits = startKafkaCommits(cl, c.log, c.commitEvery)
	// Before the first fetch: a route paused before a restart stays paused.
	c.ApplyHolds()
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.cancel = cancel
	c.done = make(chan struct{})
	go func() {
		defer close(c.done)
		c.err = c.loop(loopCtx)
	}()
	return nil
}

// Done is closed when the consume loop has ended; Err then says why.
func (c *Consumer) Done() <-chan struct{} { return c.done }

// Err is the reason the loop ended: nil after Stop, else a fatal error.
func (c *Consumer) Err() error {
	<-c.done
	return c.err
}

// Stop stops fetching, lets the batch in hand finish its transaction,
// leaves the group and closes the client, even when ctx ends first (the
// error then says what was left unfinished). Idempotent.
func (c *Consumer) Stop(ctx context.Context) error {
	if c.cl == nil {
		return nil
	}
	c.stopOnce.Do(func() {
		c.cancel()
		select {
		case <-c.done:
			c.commits.stop(ctx)
		case <-ctx.Done():
			// The batch in hand is still being stored; its transaction
			// ends on its own (bounded), and whatever it did not store is
			// read again by the partition's next owner. Closing leaves the
			// group, which BlockRebalanceOnPoll would hold up until the
			// batch is done: allow the rebalance now. The Postgres fence
			// keeps the batch from storing a range another member took, and
			// no Kafka commit follows a closed client.
			c.stopErr = fmt.Errorf("ingest: stopped before the batch in hand was stored: %w", ctx.Err())
			c.commits.cancel()
			c.cl.AllowRebalance()
		}
		// Closed either way: the client's connections and group
		// membership must not outlive Stop.
		c.cl.Close()
	})
	return c.stopErr
}

// adjustOffsets replaces Kafka's committed offsets with the positions
// stored in Postgres, the source of truth (I1).
func (c *Consumer) adjustOffsets(ctx context.Context, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	stored, err := c.store.OffsetLoad(ctx, c.cfg.Kafka.Group, c.topicNames())
	if err != nil {
		return nil, fmt.Errorf("load stored offsets: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for topic, parts := range offs {
		for p, o := range parts {
			if next, ok := stored[topic][p]; ok {
				parts[p] = kgo.NewOffset().At(next).WithEpoch(-1)
				c.expected[tp{topic, p}] = next
				continue
			}
			if committed := o.EpochOffset().Offset; committed >= 0 && !c.cfg.ResetOffsets {
				c.fatal = fmt.Errorf("partition %s/%d: Kafka group %q has committed offset %d but Postgres has no stored offset: "+
					"the database looks lost or replaced, so resuming would silently skip its jobs; "+
					"restart with --reset-offsets to resume from Kafka's committed offsets",
					topic, p, c.cfg.Kafka.Group, committed)
				return nil, c.fatal
			}
			c.expected[tp{topic, p}] = -1
		}
	}
	return offs, nil
}

// ApplyHolds pauses the fetching of every topic one of whose routes
// Holds holds, and resumes the others (see internal/flow for why this
// loses and reorders nothing). The routes of a topic share its offsets,
// so one held route holds its siblings too: fetching on for them would
// move the position past records the held route has not taken. Each
// route of a held topic reports the cause in switchyard_ingest_paused,
// and the topic in switchyard_ingest_topic_paused.
// Safe to call from any goroutine, at any time after Start.
func (c *Consumer) ApplyHolds() {
	if c.cfg.Holds == nil || c.cl == nil {
		return
	}
	c.holdMu.Lock()
	defer c.holdMu.Unlock()
	for _, topic := range c.topicNames() {
		cause, by := "", ""
		for _, r := range c.topics[topic] {
			if cause = c.cfg.Holds.RouteHold(r.Name); cause != "" {
				by = r.Name
				break
			}
		}
		was := c.held[topic]
		if cause == was {
			continue
		}
		switch {
		case cause != "" && was == "":
			c.cl.PauseFetchTopics(topic)
			c.log.Info("holding the topic's fetching", zap.String("topic", topic), zap.String("route", by), zap.String("cause", cause))
		case cause == "":
			c.cl.ResumeFetchTopics(topic)
			c.log.Info("resuming the topic's fetching", zap.String("topic", topic), zap.String("was", was))
		}
		c.held[topic] = cause
		if c.metrics != nil {
			for _, r := range c.topics[topic] {
				if was != "" {
					c.metrics.IngestPaused.WithLabelValues(r.Name, was).Set(0)
				}
				if cause != "" {
					c.metrics.IngestPaused.WithLabelValues(r.Name, cause).Set(1)
				}
			}
			if was != "" {
				c.metrics.IngestTopicPaused.WithLabelValues(topic, was).Set(0)
			}
			if cause != "" {
				c.metrics.IngestTopicPaused.WithLabelValues(topic, cause).Set(1)
			}
		}
	}
}

// revoked commits the revoked partitions' last stored offsets to Kafka
// while this member still owns them, then forgets them.
func (c *Consumer) revoked(ctx context.Context, _ *kgo.Client, parts map[string][]int32) {
	c.commits.revoked(ctx, parts)
	c.forget(parts)
}

// lost forgets partitions another member may own already: their
// pending Kafka commits are dropped.
func (c *Consumer) lost(_ context.Context, _ *kgo.Client, parts map[string][]int32) {
	c.commits.lost(parts)
	c.forget(parts)
}

func (c *Consumer) forget(lost map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for topic, parts := range lost {
		for _, p := range parts {
			delete(c.expected, tp{topic, p})
			delete(c.stored, tp{topic, p})
		}
	}
}

func (c *Consumer) loop(ctx context.Context) error {
	// failures counts polls in a row whose batch could not be handled (a
	// re-seek that cannot read the stored offsets, say): each waits
	// longer before the next, so a lasting fault is retried, and logged,
	// at a bounded rate rather than at full speed.
	failures := 0
	// next is the poll taken while the last one was being stored
	// (pollahead.go), chained since the rebalances were last allowed.
	var next *polled
	var chained time.Time
	for {
		cur := next
		if cur == nil {
			cur = c.poll(ctx)
			chained = time.Now()
		}
		next = nil
		if ctx.Err() != nil {
			c.cl.AllowRebalance()
			return nil
		}
		c.mu.Lock()
		fatal := c.fatal
		c.mu.Unlock()
		if fatal != nil {
			c.cl.AllowRebalance()
			return fatal
		}
		var ahead func() *polled
		if c.mayPollAhead(cur, chained) {
			ahead = c.pollAhead(ctx)
		}
		reread, err := c.process(ctx, cur)
		if ahead != nil {
			next = ahead()
		}
		if errors.Is(err, errSimulatedCrash) {
			c.cl.AllowRebalance()
			return nil
		}
		// The batch may have taken a queue to its max_depth: hold its
		// topics before the next poll, and drop what was taken ahead of
		// them (Start applied the holds before the first poll).
		c.ApplyHolds()
		var rewind map[tp]int64
		next, rewind = c.keepAhead(next, reread)
		c.seek(rewind)
		if len(reread) > 0 && err == nil {
			err = c.reseek(ctx, reread)
		}
		if next == nil {
			c.allowRebalance()
		}
		if err == nil || ctx.Err() != nil {
			failures = 0
			continue
		}
		failures++
		wait := retryBackoff(failures)
		c.log.Error("batch not stored; it will be consumed again", zap.Error(err),
			zap.Int("failures_in_a_row", failures), zap.Duration("backoff", wait))
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// retryBackoff is the wait before the n-th retry in a row (n ≥ 1):
// doubling from 100ms up to 5s.
func retryBackoff(n int) time.Duration {
	return min(100*time.Millisecond<<min(n-1, 6), 5*time.Second)
}

// Ready reports an error while the batch in hand has gone unstored for
// longer than Config.StuckAfter: ingest is stuck (the database refuses
// or hangs), lag grows, and /readyz should say so. The error carries no
// detail that could hold a secret; the log has the cause.
func (c *Consumer) Ready() error {
	c.mu.Lock()
	since := c.pendingSince
	c.mu.Unlock()
	if since.IsZero() {
		return nil
	}
	if d := time.Since(since); d > c.cfg.StuckAfter {
		return fmt.Errorf("ingest has not stored a polled batch for %s (see the log)", d.Truncate(time.Second))
	}
	return nil
}

// process stores one poll. Transient database errors are retried with the
// same batch until they pass or the consumer stops; records already
// polled are never skipped. It returns the partitions to read again from
// their stored positions (falling back to the offset given where none is
// stored): the poll's records of partitions this member does not know,
// or the partitions of what the fence refused.
//
// A large poll is stored in two transactions at once
// (pgstore.IngestSplit), the second committing after the first. Of the
// parts an attempt leaves unstored, the earliest decides what follows:
// refused by the fence, their partitions are re-read (a later part's
// fence fails whenever an earlier part's transaction did, so it speaks
// for nothing); failed, they are tried again, without the parts that
// committed.
func (c *Consumer) process(ctx context.Context, p *polled) (reread map[tp]int64, err error) {
	batch := &p.batch
	reread = p.unknown // the poll's own: added to if the fence refuses it
	if len(reread) > 0 {
		c.log.Warn("records for partitions with no known stored position; re-seeking them", zap.Int("partitions", len(reread)))
	}
	if len(batch.Offsets) == 0 {
		return reread, nil
	}
	c.mu.Lock()
	expected := make(map[tp]int64, len(batch.Offsets))
	for i, o := range batch.Offsets {
		batch.Offsets[i].Expected = c.expected[tp{o.Topic, o.Partition}]
		expected[tp{o.Topic, o.Partition}] = batch.Offsets[i].Expected
	}
	c.mu.Unlock()
	began := time.Now()
	c.setPending(began)
	defer c.setPending(time.Time{})
	var span trace.Span
	if c.cfg.Tracer != nil {
		ctx, span = startBatch(ctx, c.cfg.Tracer, p.fetches, *batch, p.counts)
		defer span.End()
	}
	pending := c.split(p)
	for attempt := 1; ; attempt++ {
		results, errs := c.storeParts(ctx, pending)
		var left []*polled
		var failed error
		for i, part := range pending {
			if errs[i] != nil {
				left = append(left, part)
				if failed == nil {
					failed = errs[i]
				}
				continue
			}
			if c.crashAfterStore != nil && c.crashAfterStore() {
				return nil, errSimulatedCrash
			}
			c.committed(ctx, part.batch, part.commits, part.counts, part.stamps, results[i])
		}
		if span != nil {
			span.SetAttributes(tracing.AttrIngestTries.Int(attempt))
			if failed != nil {
				span.RecordError(failed)
			}
		}
		if failed == nil {
			if c.metrics != nil {
				c.metrics.IngestBatch.Observe(time.Since(began).Seconds())
			}
			return reread, nil
		}
		if errors.Is(failed, pgstore.ErrOffsetFenced) {
			c.log.Warn("stored offsets moved under this member; re-seeking", zap.Error(failed))
			for _, part := range left {
				for _, o := range part.batch.Offsets {
					// A fenced partition has a row unless an operator just
					// reset it; then re-read from where this poll began.
					reread[tp{o.Topic, o.Partition}] = max(expected[tp{o.Topic, o.Partition}], 0)
				}
			}
			return reread, nil
		}
		pending = left
		if c.metrics != nil {
			for topic := range p.counts {
				c.metrics.IngestErrors.WithLabelValues(topic).Inc()
			}
		}
		backoff := retryBackoff(attempt)
		c.log.Warn("storing batch failed; retrying", zap.Error(failed), zap.Int("attempt", attempt), zap.Duration("backoff", backoff))
		select {
		case <-ctx.Done():
			return reread, failed
		case <-time.After(backoff):
		}
	}
}

// storeParts stores each part in its own transaction, all at once (the
// second of a split commits after the first: IngestBatch.Continues).
func (c *Consumer) storeParts(ctx context.Context, parts []*polled) ([]pgstore.IngestResult, []error) {
	results := make([]pgstore.IngestResult, len(parts))
	errs := make([]error, len(parts))
	if len(parts) == 1 {
		results[0], errs[0] = c.storeOne(ctx, &parts[0].batch)
		return results, errs
	}
	var wg sync.WaitGroup
	for i, part := range parts {
		wg.Go(func() { results[i], errs[i] = c.storeOne(ctx, &part.batch) })
	}
	wg.Wait()
	return results, errs
}

// storeOne stores one batch in one transaction, with claims for this
// process's idle workers where it carries them.
func (c *Consumer) storeOne(ctx context.Context, b *pgstore.IngestBatch) (pgstore.IngestResult, error) {
	// The transaction runs on a context that Stop does not cancel: a
	// batch in hand finishes (or fails) on its own, bounded.
	txCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
	defer cancel()
	b.Claims = nil
	if c.cfg.Claims != nil && b.CarriesClaims() {
		b.Claims = c.cfg.Claims(b.Queues())
	}
	res, err := c.store.IngestCommit(txCtx, *b)
	if len(b.Claims) > 0 {
		c.cfg.Claimed(b.Claims)
	}
	return res, err
}

// split is p's batch as pgstore.IngestSplit divides it, each half with
// its share of p's bookkeeping, or p alone when it is stored whole.
func (c *Consumer) split(p *polled) []*polled {
	first, second, ok := c.store.IngestSplit(p.batch)
	if !ok {
		return []*polled{p}
	}
	c.splitPolls.Add(1)
	return []*polled{p.part(first, true), p.part(second, false)}
}

// part is the share of p that b, a half of p's batch, holds: the Kafka
// commits and record times of its partitions (a partition split between
// the halves ends at the split point in the first, which leaves its time
// to the second), and its counts, the poll's filtered records counted
// with the first half.
func (p *polled) part(b pgstore.IngestBatch, first bool) *polled {
	q := &polled{batch: b, commits: map[tp]kgo.EpochOffset{}, stamps: map[tp]time.Time{}, counts: map[string]*Decoded{}}
	for _, o := range b.Offsets {
		k := tp{o.Topic, o.Partition}
		end := p.commits[k]
		q.commits[k] = kgo.EpochOffset{Epoch: end.Epoch, Offset: o.Next}
		if o.Next == end.Offset {
			q.stamps[k] = p.stamps[k]
		}
	}
	count := func(topic string) *Decoded {
		if q.counts[topic] == nil {
			q.counts[topic] = &Decoded{}
		}
		return q.counts[topic]
	}
	for i := range b.Jobs {
		count(b.Jobs[i].Topic).Jobs++
	}
	for i := range b.Poison {
		count(b.Poison[i].Topic).Poison++
	}
	if first {
		for topic, n := range p.counts {
			count(topic).Filtered += n.Filtered
		}
	}
	return q
}

// startBatch starts the span of a batch stored in one transaction: a new
// trace (a batch has as many parents as records), linked to the trace of
// each record that carries a traceparent, at most tracing.MaxLinks of
// them.
func startBatch(ctx context.Context, tracer trace.Tracer, fetches kgo.Fetches, batch pgstore.IngestBatch,
	counts map[string]*Decoded) (context.Context, trace.Span) {
	var links []trace.Link
	records, dropped := 0, 0
	linkAttrs := []attribute.KeyValue{tracing.AttrLinkKind.String("record")}
	fetches.EachRecord(func(r *kgo.Record) {
		if r.Attrs.IsControl() {
			return
		}
		records++
		for _, h := range r.Headers {
			if !strings.EqualFold(h.Key, tracing.HeaderName) {
				continue
			}
			if sc := tracing.Parse(string(h.Value)); sc.IsValid() {
				if len(links) < tracing.MaxLinks {
					links = append(links, trace.Link{SpanContext: sc, Attributes: linkAttrs})
				} else {
					dropped++
				}
			}
			break
		}
	})
	jobs := 0
	for _, n := range counts {
		jobs += n.Jobs
	}
	return tracer.Start(ctx, tracing.SpanIngestBatch, trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithLinks(links...), trace.WithAttributes(tracing.AttrMessagingSystem.String("kafka"),
			tracing.AttrMessagingBatchCount.Int(records), tracing.AttrIngestJobs.Int(jobs),
			tracing.AttrIngestPartitions.Int(len(batch.Offsets)), tracing.AttrIngestLinksDropped.Int(dropped)))
}

func (c *Consumer) setPending(t time.Time) {
	c.mu.Lock()
	c.pendingSince = t
	c.mu.Unlock()
}

// build decodes a poll. Each partition's advance is left without its
// expected offset, which process reads when it stores the batch: a poll
// taken ahead is built while the batch before it is still being stored.
// A partition's ownership, read here, cannot change until the poll is
// stored, because BlockRebalanceOnPoll holds the revokes until then.
func (c *Consumer) build(fetches kgo.Fetches) *polled {
	// Sized for one job a record, as most topics' one route makes: a
	// NewJob is large, and growing the slice by appending was a third of
	// decoding a poll (bench --only ingest --cpuprofile).
	p := &polled{
		fetches: fetches,
		batch:   pgstore.IngestBatch{Group: c.cfg.Kafka.Group, Jobs: make([]pgstore.NewJob, 0, fetches.NumRecords())},
		unknown: map[tp]int64{},
		stamps:  map[tp]time.Time{},
		commits: map[tp]kgo.EpochOffset{},
		counts:  map[string]*Decoded{},
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		if len(fp.Records) == 0 {
			return
		}
		_, owned := c.expected[tp{fp.Topic, fp.Partition}]
		routes := c.topics[fp.Topic]
		if routes == nil {
			return
		}
		if !owned {
			// Not expected with BlockRebalanceOnPoll; if it ever happens,
			// storing nothing and re-reading from the stored position is
			// the safe answer.
			p.unknown[tp{fp.Topic, fp.Partition}] = fp.Records[0].Offset
			return
		}
		cnt := p.counts[fp.Topic]
		if cnt == nil {
			cnt = &Decoded{}
			p.counts[fp.Topic] = cnt
		}
		n := decodeInto(&p.batch, routes, dataRecords(fp.Records), now)
		cnt.Jobs += n.Jobs
		cnt.Poison += n.Poison
		cnt.Filtered += n.Filtered
		last := fp.Records[len(fp.Records)-1]
		p.batch.Offsets = append(p.batch.Offsets, pgstore.OffsetAdvance{Topic: fp.Topic, Partition: fp.Partition, Next: last.Offset + 1})
		p.commits[tp{fp.Topic, fp.Partition}] = kgo.EpochOffset{Epoch: last.LeaderEpoch, Offset: last.Offset + 1}
		p.stamps[tp{fp.Topic, fp.Partition}] = last.Timestamp
	})
	return p
}

// dataRecords leaves out a fetch's transaction markers (control records),
// which make no job and are not counted, but whose offsets are stored.
func dataRecords(recs []*kgo.Record) []*kgo.Record {
	if !slices.ContainsFunc(recs, func(r *kgo.Record) bool { return r.Attrs.IsControl() }) {
		return recs
	}
	return slices.DeleteFunc(slices.Clone(recs), func(r *kgo.Record) bool { return r.Attrs.IsControl() })
}

func (c *Consumer) committed(ctx context.Context, batch pgstore.IngestBatch, commits map[tp]kgo.EpochOffset,
	counts map[string]*Decoded, stamps map[tp]time.Time, res pgstore.IngestResult) {
	c.mu.Lock()
	for _, o := range batch.Offsets {
		c.expected[tp{o.Topic, o.Partition}] = o.Next
	}
	for p, ts := range stamps {
		c.stored[p] = ts
	}
	c.mu.Unlock()
	// Kafka's committed offset only follows Postgres, so that lag tools
	// keep working; losing a commit loses nothing, so they are paced and
	// off the per-batch path (kafkaCommits).
	c.commits.add(commits)
	if c.cfg.Wake != nil {
		for _, q := range res.Queues {
			if !slices.ContainsFunc(batch.Claims, func(cl *pgstore.IngestClaim) bool { return cl.Queue == q }) {
				c.cfg.Wake(q)
			}
		}
	}
	if c.cfg.Holds != nil {
		// Unstarted jobs: those stored, less those the batch's claims
		// started (which may be older ones: the queue's net change).
		added := map[string]int{}
		for route, n := range res.InsertedByRoute {
			if r := c.routes[route]; r != nil {
				added[r.Queue] += int(n)
			}
		}
		for _, cl := range batch.Claims {
			added[cl.Queue] -= len(cl.Claimed)
		}
		for queue, n := range added {
			c.cfg.Holds.Added(ctx, queue, n)
		}
	}
	events := c.log.Named(metrics.EventsLogger)
	for _, p := range batch.Poison {
		events.Info("record parked", zap.String("route", p.Route), zap.String("reason", p.Reason),
			zap.String("source", fmt.Sprintf("%s/%d/%d", p.Topic, p.Partition, p.Offset)), zap.String("error", p.Error))
	}
	if c.metrics != nil {
		for route, n := range res.InsertedByRoute {
			if r := c.routes[route]; r != nil {
				c.metrics.Flow.Arrived(r.Queue, n)
			}
		}
	}
	if c.metrics != nil {
		for kind, n := range res.CoalescedByKind {
			c.metrics.JobAttempts.WithLabelValues(kind, "coalesced").Add(float64(n))
		}
		// Counted per topic, as SPEC §7 names them: a record that two
		// routes take counts once per route, a filtered one once.
		for topic, cnt := range counts {
			var inserted, refused int64
			for _, r := range c.topics[topic] {
				inserted += res.InsertedByRoute[r.Name]
				refused += res.RefusedByRoute[r.Name]
			}
			c.metrics.IngestRecords.WithLabelValues(topic, "job").Add(float64(inserted))
			c.metrics.IngestRecords.WithLabelValues(topic, "duplicate").Add(float64(int64(cnt.Jobs) - inserted - refused))
			c.metrics.IngestRecords.WithLabelValues(topic, "poison").Add(float64(int64(cnt.Poison) + refused))
			c.metrics.IngestRecords.WithLabelValues(topic, "filtered").Add(float64(cnt.Filtered))
		}
	}
}

// PartitionLag is how far behind one owned partition's stored position is.
type PartitionLag struct {
	Topic     string
	Partition int32
	// Records between the stored position and the partition's end; with
	// no stored position, from where the partition starts (kafka.reset:
	// the log's start, or its end for latest).
	Records int64
	// Seconds is the age of the last record stored when the partition is
	// behind, 0 when it is not: an upper bound on the age of the oldest
	// record not stored yet, which keeps growing while ingest is stuck
	// (the database down, say). Until this member has stored a record of
	// the partition (a new partition, or one taken over after a restart
	// or a rebalance), the age of the first record not stored.
	Seconds float64
}

// Lag measures every partition this member owns, against the partition's
// end offset from the broker.
func (c *Consumer) Lag(ctx context.Context) ([]PartitionLag, error) {
	c.mu.Lock()
	owned := make(map[tp]int64, len(c.expected))
	stored := make(map[tp]time.Time, len(c.stored))
	topics := map[string]bool{}
	unstored := false
	for p, next := range c.expected {
		owned[p] = next
		topics[p.topic] = true
		unstored = unstored || next < 0
	}
	for p, ts := range c.stored {
		stored[p] = ts
	}
	cl := c.cl
	c.mu.Unlock()
	if cl == nil || len(owned) == 0 {
		return nil, nil
	}
	adm := kadm.NewClient(cl)
	// The last stable offsets: the consumer reads committed records only.
	ends, err := adm.ListCommittedOffsets(ctx, slices.Collect(maps.Keys(topics))...)
	if err != nil {
		return nil, fmt.Errorf("listing end offsets: %w", err)
	}
	var starts kadm.ListedOffsets
	if unstored && c.cfg.Kafka.Reset != "latest" {
		if starts, err = adm.ListStartOffsets(ctx, slices.Collect(maps.Keys(topics))...); err != nil {
			return nil, fmt.Errorf("listing start offsets: %w", err)
		}
	}
	now := time.Now()
	out := make([]PartitionLag, 0, len(owned))
	from := map[tp]int64{}
	unknown := map[string]map[int32]kgo.Offset{}
	for p, next := range owned {
		end, ok := ends.Lookup(p.topic, p.partition)
		if !ok || end.Err != nil {
			continue
		}
		at := next
		if at < 0 {
			at = end.Offset // kafka.reset: latest
			if s, ok := starts.Lookup(p.topic, p.partition); ok && s.Err == nil {
				at = s.Offset
			}
		}
		l := PartitionLag{Topic: p.topic, Partition: p.partition, Records: max(0, end.Offset-at)}
		if l.Records > 0 {
			if ts, ok := stored[p]; ok {
				l.Seconds = max(0, now.Sub(ts).Seconds())
			} else {
				if unknown[p.topic] == nil {
					unknown[p.topic] = map[int32]kgo.Offset{}
				}
				unknown[p.topic][p.partition] = kgo.NewOffset().At(at)
				from[p] = next
			}
		}
		out = append(out, l)
	}
	if len(unknown) == 0 {
		return out, nil
	}
	// The first record not stored is read once: its timestamp stands for
	// the partition's until this member stores a record of it, as the last
	// stored record's would (both are at most the oldest unstored record's
	// age, which is what a stuck ingest makes grow).
	first := (&LagReader{opts: c.lagOpts}).firstUnstored(ctx, unknown)
	c.mu.Lock()
	for p, next := range from {
		ts, ok := first[p.topic][p.partition]
		if !ok {
			continue
		}
		if _, known := c.stored[p]; !known && c.expected[p] == next {
			c.stored[p] = ts
		}
	}
	c.mu.Unlock()
	for i := range out {
		if ts, ok := first[out[i].Topic][out[i].Partition]; ok {
			out[i].Seconds = max(0, now.Sub(ts).Seconds())
		}
	}
	return out, nil
}

// reseek moves partitions back to the positions stored in Postgres; a
// partition with no stored row goes back to the given offset (the first
// record not stored), so nothing polled is ever skipped.
func (c *Consumer) reseek(ctx context.Context, parts map[tp]int64) error {
	stored, err := c.store.OffsetLoad(ctx, c.cfg.Kafka.Group, c.topicNames())
	if err != nil {
		return err
	}
	to := make(map[tp]int64, len(parts))
	c.mu.Lock()
	for p, fallback := range parts {
		next, ok := stored[p.topic][p.partition]
		c.expected[p] = next
		if !ok {
			next, c.expected[p] = fallback, -1
		}
		to[p] = next
	}
	c.mu.Unlock()
	c.seek(to)
	return nil
}

// seek moves partitions' fetch positions to the offsets given; what the
// client buffered of them is dropped.
func (c *Consumer) seek(to map[tp]int64) {
	if len(to) == 0 {
		return
	}
	offsets := map[string]map[int32]kgo.EpochOffset{}
	for p, at := range to {
		if offsets[p.topic] == nil {
			offsets[p.topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[p.topic][p.partition] = kgo.EpochOffset{Epoch: -1, Offset: at}
	}
	c.cl.SetOffsets(offsets)
}

// Ping checks a broker answers, for /readyz.
func (c *Consumer) Ping(ctx context.Context) error {
	if c.cl == nil {
		return errors.New("kafka consumer not started")
	}
	return c.cl.Ping(ctx)
}
