package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	switchyard "github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/dispatch"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/workers"
)

// One function per figure group; each starts from an empty schema.

// ingest: records already in Kafka → committed job rows with stored
// offsets, by the engine with role ingest from a fresh group; then the
// same rows by plain COPY into the same (emptied) tables, in the order
// ingest stored them, and once more in record order for the note.
func (e *env) ingest(ctx context.Context) error {
	n := e.cfg.Records
	r, err := e.ingestAndCopy(ctx, "ingest", n, true)
	if err != nil {
		return err
	}
	// The figure includes the group join and first fetch, as work's
	// includes its start; the rate after them is the note's, as the
	// payload curve's figure.
	e.note("ingest: %.0f records/s after the first batch", float64(r.steadyRecords)/r.steady.Seconds())
	e.note("copy: %.0f rows/s in the order ingest stored them; %.0f rows/s in record order (dedupe keys ascending)",
		float64(n)/r.copied.Seconds(), float64(n)/r.copiedInRecordOrder.Seconds())
	e.report("ingest_records_per_s", float64(n)/r.ingest.Seconds(), "records/s")
	e.report("copy_rows_per_s", float64(n)/r.copied.Seconds(), "rows/s")
	return nil
}

// ingestTimes is what ingestAndCopy timed.
type ingestTimes struct {
	// ingest is from the engine's Start until every offset is stored.
	ingest time.Duration
	// steady is the part of it after the first batch committed, and
	// steadyRecords the records it stored: ingest without the group join
	// and first fetch, which a small run would otherwise be mostly.
	steady        time.Duration
	steadyRecords int64
	// copied is the COPY of the same rows in the order ingest stored
	// them; copiedInRecordOrder the COPY of them in record order, when
	// asked for.
	copied, copiedInRecordOrder time.Duration
}

// ingestAndCopy produces n records of the current shape to a new topic
// (route name), then times the engine ingesting them and COPY loading
// the same rows in the order ingest stored them, and also in record
// order if recordOrder.
//
// Why the order matters. Records are spread over the topic's partitions
// and a poll holds a run of each, so ingest stores dedupe keys in several
// interleaved ascending runs; in record order they ascend, and every
// insert into the dedupe index lands on its rightmost leaf, which
// Postgres reaches without descending the tree. That alone made the COPY
// 13-14 % faster (bench --only ingest, two rounds: 105.7k and 107.1k
// rows/s against 93.1k and 92.1k with each poll's worth of rows grouped
// by partition), an order no consumer of a partitioned topic sees. So
// the figure's COPY loads the rows in the order ingest stored them (its
// job ids), and the note gives the record-order COPY beside it.
func (e *env) ingestAndCopy(ctx context.Context, name string, n int, recordOrder bool) (t ingestTimes, err error) {
	route := e.route(name)
	if err := e.createTopic(ctx, route.Topic); err != nil {
		return t, err
	}
	start := time.Now()
	if err := e.produce(ctx, route.Topic, n); err != nil {
		return t, fmt.Errorf("produce: %w", err)
	}
	e.note("%s: produced %d records of %d bytes to %d partitions in %s", name, n,
		len(e.record(route.Topic, 0).Value), partitions, time.Since(start).Round(time.Millisecond))
	if err := e.reset(ctx); err != nil {
		return t, err
	}
	var first time.Duration
	var firstRecords int64
	err = e.withRSS(name, func() error {
		start := time.Now()
		eng, err := e.startEngine(ctx, switchyard.RoleIngest, route, nil)
		if err != nil {
			return err
		}
		err = waitUntil(ctx, eng.Done(), 10*time.Millisecond, "stored offsets", func() (int64, bool, error) {
			offs, err := e.store.OffsetLoad(ctx, route.Topic, []string{route.Topic})
			var sum int64
			for _, next := range offs[route.Topic] {
				sum += next
			}
			if sum > 0 && first == 0 {
				first, firstRecords = time.Since(start), sum
			}
			return sum, sum >= int64(n), err
		})
		t.ingest = time.Since(start)
		return errors.Join(err, stopEngine(eng))
	})
	if err != nil {
		return t, err
	}
	t.steady, t.steadyRecords = t.ingest-first, int64(n)-firstRecords
	if t.steadyRecords == 0 { // one batch took it all
		t.steady, t.steadyRecords = t.ingest, int64(n)
	}
	if err := e.expectQueued(ctx, n); err != nil {
		return t, err
	}
	txs, err := e.statements(ctx)
	if err != nil {
		return t, err
	}
	e.note("%s: %d transactions (%.0f records each); the process used %.1f µs of CPU a record", name, txs.inserts,
		float64(n)/float64(txs.inserts), float64(e.phaseCPU.Microseconds())/float64(n))
	e.note("%s: first batch committed %s after Start (group join, first fetch)", name, first.Round(time.Millisecond))

	jobs, err := e.jobs(route, 0, n)
	if err != nil {
		return t, err
	}
	stored, err := e.ingestOrder(ctx, jobs)
	if err != nil {
		return t, err
	}
	if t.copied, err = e.timeCopy(ctx, stored); err != nil {
		return t, err
	}
	if recordOrder {
		t.copiedInRecordOrder, err = e.timeCopy(ctx, jobs)
	}
	return t, err
}

// ingestOrder returns jobs in the order ingest stored them: by the ids
// the ingested rows of their dedupe keys got.
func (e *env) ingestOrder(ctx context.Context, jobs []pgstore.NewJob) ([]pgstore.NewJob, error) {
	rows, err := e.store.Pool().Query(ctx, `SELECT dedupe_key FROM job_keys ORDER BY job_id`)
	if err != nil {
		return nil, err
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	byKey := make(map[string]*pgstore.NewJob, len(jobs))
	for i := range jobs {
		byKey[jobs[i].DedupeKey] = &jobs[i]
	}
	out := make([]pgstore.NewJob, 0, len(jobs))
	for _, k := range keys {
		j := byKey[k]
		if j == nil {
			return nil, fmt.Errorf("ingest stored dedupe key %q, which no record has", k)
		}
		out = append(out, *j)
	}
	if len(out) != len(jobs) {
		return nil, fmt.Errorf("ingest stored %d jobs of %d records", len(out), len(jobs))
	}
	return out, nil
}

// timeCopy empties the tables and times copyJobs loading jobs.
func (e *env) timeCopy(ctx context.Context, jobs []pgstore.NewJob) (time.Duration, error) {
	jobRows, keyRows := copyRows(jobs)
	if err := e.reset(ctx); err != nil {
		return 0, err
	}
	start := time.Now()
	rows, err := e.copyJobs(ctx, jobRows, keyRows)
	took := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("copy: %w", err)
	}
	if rows != int64(len(jobs)) {
		return 0, fmt.Errorf("copy: %d rows copied, want %d", rows, len(jobs))
	}
	return took, nil
}

// expectQueued checks that the bench queue holds exactly n queued jobs.
func (e *env) expectQueued(ctx context.Context, n int) error {
	stats, err := e.store.QueueStats(ctx, pgstore.Groups{})
	if err != nil {
		return err
	}
	var got int64
	if q := stats[queue]; q != nil {
		got = q.Jobs["queued"]
	}
	if got != int64(n) {
		return fmt.Errorf("%d jobs queued, want %d", got, n)
	}
	return nil
}

// rawClaimBatch is the claim and completion size of raw_claim, the
// batching that DESIGN-NOTES measured at 22–34k jobs/s.
const rawClaimBatch = 100

// rawClaim: the ceiling of the claim path. RawLoops goroutines, each a
// "pool" that claims 100 jobs per statement (pgstore.JobClaim) and
// completes them in one statement (pgstore.JobComplete), with nothing in
// between.
func (e *env) rawClaim(ctx context.Context) error {
	n := e.cfg.Jobs
	route := e.route("raw")
	if err := e.reset(ctx); err != nil {
		return err
	}
	if err := e.enqueue(ctx, route, 0, n); err != nil {
		return err
	}
	var done atomic.Int64
	errs := make([]error, e.cfg.RawLoops)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range e.cfg.RawLoops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				got, _, err := e.claimBatch(ctx, queue, rawClaimBatch)
				if err != nil || got == 0 {
					errs[w] = err
					return
				}
				done.Add(int64(got))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if done.Load() != int64(n) {
		return fmt.Errorf("%d jobs claimed and completed, want %d", done.Load(), n)
	}
	e.note("raw_claim: %d loops, %d jobs per claim and per completion", e.cfg.RawLoops, rawClaimBatch)
	e.report("raw_claim_jobs_per_s", float64(n)/elapsed.Seconds(), "jobs/s")
	return nil
}

// claimBatch claims up to limit jobs of queue q and completes
// them as succeeded. It returns how many it claimed and how long the
// claim alone took.
func (e *env) claimBatch(ctx context.Context, q string, limit int) (int, time.Duration, error) {
	start := time.Now()
	jobs, _, err := e.store.JobClaim(ctx, pgstore.JobClaimParams{Queue: q, Limit: limit,
		Lease: time.Minute, MaxRuntime: time.Minute})
	took := time.Since(start)
	if err != nil || len(jobs) == 0 {
		return 0, took, err
	}
	outs := make([]pgstore.Outcome, len(jobs))
	for i, j := range jobs {
		outs[i] = pgstore.Outcome{ID: j.ID, Token: j.Token, State: "succeeded", Lane: j.LaneRef()}
	}
	done, err := e.store.JobComplete(ctx, outs)
	if err == nil && len(done.Applied) != len(outs) {
		err = fmt.Errorf("%d of %d completions applied", len(done.Applied), len(outs))
	}
	return len(jobs), took, err
}

// work: the dispatcher and an in-process no-op Go handler.
func (e *env) work(ctx context.Context) error {
	return e.burnDown(ctx, "work_jobs_per_s", e.route("work"), e.cfg.Jobs)
}

// http: the same through the HTTP target to a loopback no-op server,
// after the bare loop it is compared with: cfg.Concurrency goroutines
// sending the same requests through the same target code to the same
// server, with no queue in between (http_raw_requests_per_s). Their
// ratio is what the queue costs an HTTP job.
func (e *env) http(ctx context.Context) error {
	url, stop, err := e.httpTarget()
	if err != nil {
		return err
	}
	defer stop()
	route := e.route("http")
	route.Target = config.Target{HTTP: &config.HTTPTarget{URL: url}}
	if err := e.rawHTTP(ctx, route, e.cfg.HTTPJobs); err != nil {
		return err
	}
	return e.burnDown(ctx, "http_jobs_per_s", route, e.cfg.HTTPJobs)
}

// rawHTTP calls route's HTTP target for records 0..n-1 of route from
// cfg.Concurrency goroutines, as workers would, without Postgres.
func (e *env) rawHTTP(ctx context.Context, route config.Route, n int) error {
	jobs, err := e.jobs(route, 0, n)
	if err != nil {
		return err
	}
	target, err := workers.NewHTTPTarget(workers.HTTPTargetConfig{URL: route.Target.HTTP.URL, Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	var next atomic.Int64
	var failed firstError
	start := time.Now()
	var wg sync.WaitGroup
	for range e.cfg.Concurrency {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				j := jobs[i]
				job := &workers.Job{ID: i + 1, Kind: j.Kind, Queue: j.Queue, Route: j.Route, Key: j.Key, Attempt: 1,
					MaxAttempts: j.MaxAttempts, Token: i + 1, Payload: j.Payload, CreatedAt: start,
					Source: workers.Source{Topic: j.Topic, Partition: j.Partition, Offset: j.Offset}}
				if err := target.Handle(ctx, job); err != nil {
					failed.record(nil, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := failed.get(); err != nil {
		return fmt.Errorf("http_raw_requests_per_s: %w", err)
	}
	e.report("http_raw_requests_per_s", float64(n)/time.Since(start).Seconds(), "requests/s")
	return nil
}

// ordered: the same as work over an ordered route with cfg.Keys lanes.
// It needs the store's lanes; until a migration creates them, an ordered
// route's jobs would run unordered and the figure would be a lie.
func (e *env) ordered(ctx context.Context) error {
	ok, err := e.lanesAvailable(ctx)
	if err != nil {
		return err
	}
	if !ok {
		e.note("ordered_jobs_per_s: skipped (lanes not available)")
		return nil
	}
	route := e.route("ordered")
	route.Ordered = true
	return e.burnDown(ctx, "ordered_jobs_per_s", route, e.cfg.Jobs)
}

// capped: the same as work with the route's fleet-wide max_running set
// to the most leases the pool may hold, so that the cap never binds: what
// checking it costs (SPEC §9 capped_jobs_per_s). Prefetched jobs and
// outcomes waiting for the completer hold leases too: at the pool's
// concurrency, the cap held claims to 54 jobs against work's 157.
func (e *env) capped(ctx context.Context) error {
	route := e.route("capped")
	route.MaxRunning = dispatch.MaxLeases(e.cfg.Concurrency, benchPrefetch*e.cfg.Concurrency)
	return e.burnDown(ctx, "capped_jobs_per_s", route, e.cfg.Jobs)
}

// groupedGroups is how many group values the grouped figure's records
// carry (SPEC §9: 1,000 groups).
const groupedGroups = 1000

// grouped: the same as work with every record in one of 1,000 groups and
// a group max_running of 1, which binds no more than the pool does: what
// claiming group by group costs (SPEC §9 grouped_jobs_per_s).
func (e *env) grouped(ctx context.Context) error {
	route := e.route("grouped")
	route.Group = &config.Group{FieldRef: config.FieldRef{Field: "customer"}, MaxRunning: 1}
	defer func(s shape) { e.shape = s }(e.shape)
	e.shape.keys, e.shape.stride = groupedGroups, 1
	return e.burnDown(ctx, "grouped_jobs_per_s", route, e.cfg.Jobs)
}

// sentHeader carries a measured record's produce time (Unix
// nanoseconds), warmHeader a warm-up record's.
const (
	sentHeader = "bench-sent-ns"
	warmHeader = "bench-warm-ns"
)

// e2e: the whole engine (ingest and work) under a steady offered load;
// latency is handler call time minus produce time.
func (e *env) e2e(ctx context.Context) error {
	total := int(float64(e.cfg.Rate) * e.cfg.Duration.Seconds())
	route := e.route("e2e")
	if err := e.createTopic(ctx, route.Topic); err != nil {
		return err
	}
	if err := e.reset(ctx); err != nil {
		return err
	}
	var (
		mu  sync.Mutex
		lat = make([]time.Duration, 0, total)
		// The parts of each latency (latencyParts), in lat's order until
		// lat is sorted.
		parts = make([]latencyParts, 0, total)
		// The latencies of the warm-up load, reported apart.
		warm []time.Duration
		// unseen counts records whose fetch the hook did not see.
		unseen int
	)
	inHand := &buffered{topic: route.Topic, at: map[workers.Source]time.Time{}}
	handler := workers.HandlerFunc(func(_ context.Context, job *workers.Job) error {
		now := time.Now()
		e.calls.Add(1)
		for _, h := range job.Headers {
			if h.Key != sentHeader && h.Key != warmHeader {
				continue
			}
			ns, _ := strconv.ParseInt(string(h.Value), 10, 64)
			sent := time.Unix(0, ns)
			got, ok := inHand.take(job.Source)
			mu.Lock()
			if !ok {
				unseen++
				got = job.CreatedAt // its Kafka part then holds the loop's too
			}
			if h.Key == warmHeader {
				warm = append(warm, now.Sub(sent))
			} else {
				lat = append(lat, now.Sub(sent))
				parts = append(parts, latencyParts{got.Sub(sent), job.CreatedAt.Sub(got), now.Sub(job.CreatedAt)})
			}
			mu.Unlock()
		}
		return nil
	})
	e.calls.Store(0)
	err := e.withRSS("e2e", func() error {
		eng, err := e.startEngine(ctx, switchyard.RoleAll, route, handler, kgo.WithHooks(inHand))
		if err != nil {
			return err
		}
		err = e.offer(ctx, eng, route.Topic, total)
		return errors.Join(err, stopEngine(eng))
	})
	if err != nil {
		return err
	}
	if len(lat) != total {
		return fmt.Errorf("%d latencies recorded for %d records", len(lat), total)
	}
	tail := slowest(lat, parts, 0.01)
	slices.Sort(lat)
	e.note("e2e: offered %d records/s for %s (%d records) after %s of the same load, concurrency %d; max %.1f ms", e.cfg.Rate,
		e.cfg.Duration, total, warmLoad, e.cfg.Concurrency, ms(lat[len(lat)-1]))
	slices.Sort(warm)
	e.note("e2e: the warm-up load (%d records, not in the figures): p50 %.1f ms, p99 %.1f ms, max %.1f ms",
		len(warm), ms(percentile(warm, 0.5)), ms(percentile(warm, 0.99)), ms(warm[len(warm)-1]))
	var each [3][]time.Duration
	for _, p := range parts {
		for i, d := range p {
			each[i] = append(each[i], d)
		}
	}
	for i := range each {
		slices.Sort(each[i])
	}
	e.note("e2e: produce → in the consumer's hands (Kafka) p50 %.1f ms, p99 %.1f ms; → ingest transaction (the loop) "+
		"p50 %.1f ms, p99 %.1f ms; → handler call (the transaction, the claim, the start) p50 %.1f ms, p99 %.1f ms",
		ms(percentile(each[0], 0.5)), ms(percentile(each[0], 0.99)), ms(percentile(each[1], 0.5)),
		ms(percentile(each[1], 0.99)), ms(percentile(each[2], 0.5)), ms(percentile(each[2], 0.99)))
	e.note("e2e: the slowest 1 %% (%d records), on average: Kafka %.1f ms, the loop %.1f ms, the transaction to the call %.1f ms",
		tail.n, ms(tail.mean[0]), ms(tail.mean[1]), ms(tail.mean[2]))
	if unseen > 0 {
		e.note("e2e: %d records were handled without their fetch seen: their Kafka part holds the loop's", unseen)
	}
	if n, sum, err := e.histogram("switchyard_ingest_batch_seconds"); err == nil && n > 0 {
		all := e.cfg.Duration + warmLoad
		e.note("e2e: ingest stored %d batches (%.2f records each) in %.1f s of the load's %s: the loop was %.0f %% busy",
			n, float64(total+len(warm)+warmups)/float64(n), sum, all, 100*sum/all.Seconds())
	}
	e.report("e2e_latency_p50_ms", ms(percentile(lat, 0.50)), "ms")
	e.report("e2e_latency_p99_ms", ms(percentile(lat, 0.99)), "ms")
	return nil
}

// latencyParts splits a record's e2e latency at two instants: when the
// engine's Kafka client had the record in hand (fetched and buffered,
// ready to be polled), and the job's created_at (its ingest
// transaction's start). The parts are the Kafka path (the producer, the
// broker, the fetch), the wait for the ingest loop (a poll and a batch
// are stored one at a time), and the transaction, the claim and the
// handler's start.
type latencyParts [3]time.Duration

// buffered is a franz-go hook that records when the engine's consumer
// had each record of topic in hand, by its source.
type buffered struct {
	topic string
	mu    sync.Mutex
	at    map[workers.Source]time.Time
}

func (b *buffered) OnFetchRecordBuffered(r *kgo.Record) {
	if r.Topic != b.topic {
		return
	}
	now := time.Now()
	b.mu.Lock()
	b.at[workers.Source{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}] = now
	b.mu.Unlock()
}

// take is when the record at src was in hand, the last time it was
// fetched (a rebalance fetches again).
func (b *buffered) take(src workers.Source) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	at, ok := b.at[src]
	delete(b.at, src)
	return at, ok
}

// tailParts is what the slowest records' latencies were made of.
type tailParts struct {
	n    int
	mean latencyParts
}

// slowest averages the parts of the slowest share of the latencies (at
// least one record); parts[i] are lat[i]'s.
func slowest(lat []time.Duration, parts []latencyParts, share float64) tailParts {
	order := make([]int, len(lat))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(lat[b], lat[a]) })
	t := tailParts{n: max(1, int(float64(len(lat))*share))}
	for _, i := range order[:t.n] {
		for k, d := range parts[i] {
			t.mean[k] += d / time.Duration(t.n)
		}
	}
	return t
}

// warmups are records consumed before the load starts: until the first
// is handled the consumer is still joining its group.
const warmups = 10

// warmLoad is how long the offered load runs before it is measured. A
// process that just started opens its Postgres connections, prepares
// its statements and grows its stacks and buffers under the first
// second of load (a p99 of 13-27 ms over the warm-up, 7-10 ms after
// it): the figures are of a steady load, the warm-up's are noted.
const warmLoad = 2 * time.Second

// offer warms the engine up, then produces records at cfg.Rate, each
// stamped with its produce time: for warmLoad under warmHeader, then
// total under sentHeader; it waits until all are handled.
func (e *env) offer(ctx context.Context, eng *switchyard.Engine, topic string, total int) error {
	var fe firstError
	for i := range warmups {
		r := e.record(topic, total+i)
		r.Offset = 0
		e.kafka.Produce(ctx, r, fe.record)
	}
	err := waitUntil(ctx, eng.Done(), 10*time.Millisecond, "warm-up records", func() (int64, bool, error) {
		c := e.calls.Load()
		return c, c >= warmups, fe.get()
	})
	if err != nil {
		return err
	}
	e.calls.Store(0)
	warm := int(float64(e.cfg.Rate) * warmLoad.Seconds())
	// A 1ms tick keeps the load steady: at most rate/1000 records (one,
	// at the default) go out per tick, never a burst to catch up a second.
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	start, sent := time.Now(), 0
	for sent < warm+total {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		due := min(warm+total, int(time.Since(start).Seconds()*float64(e.cfg.Rate)))
		for ; sent < due; sent++ {
			// Warm-up records take keys of their own, after the
			// measured ones' and the first warm-ups'.
			r, header := e.record(topic, sent-warm), sentHeader
			if sent < warm {
				r, header = e.record(topic, total+warmups+sent), warmHeader
			}
			r.Offset = 0
			r.Headers = []kgo.RecordHeader{{Key: header, Value: strconv.AppendInt(nil, time.Now().UnixNano(), 10)}}
			e.kafka.Produce(ctx, r, fe.record)
		}
	}
	return waitUntil(ctx, eng.Done(), 10*time.Millisecond, "e2e records handled", func() (int64, bool, error) {
		c := e.calls.Load()
		return c, c >= int64(warm+total), fe.get()
	})
}

// claimPer is the claim size of the claim latency figures.
const claimPer = 10

// claim: latency of one claim of 10 jobs (then completed, untimed) with
// no finished jobs retained, with cfg.History succeeded jobs in the
// table, and with cfg.Future jobs scheduled a day ahead in the same queue
// (a run_at or delay far off). The three tables are in three schemas and
// the claims take turns between them, so every figure sees the same
// machine: on a shared box, noise that drifts over minutes would
// otherwise decide the ratios.
func (e *env) claim(ctx context.Context) error {
	route := e.route("claim")
	if err := e.reset(ctx); err != nil {
		return err
	}
	hist, err := e.sibling(ctx, "hist")
	if err != nil {
		return err
	}
	start, last := time.Now(), time.Now()
	err = hist.insertHistory(ctx, route.Topic, e.cfg.History, e.record(route.Topic, 0).Value, func(done int) {
		if time.Since(last) > 20*time.Second {
			last = time.Now()
			e.note("history: %d rows so far (%s)", done, time.Since(start).Round(time.Second))
		}
	})
	if err != nil {
		return err
	}
	took := time.Since(start)
	e.note("history: %d succeeded rows inserted in %s (%.0f rows/s)", e.cfg.History,
		took.Round(time.Second), float64(e.cfg.History)/took.Seconds())

	fut, err := e.sibling(ctx, "fut")
	if err != nil {
		return err
	}
	start = time.Now()
	if err := fut.insertFuture(ctx, route.Topic+"_later", e.cfg.Future, e.record(route.Topic, 0).Value); err != nil {
		return err
	}
	e.note("future: %d jobs a day ahead inserted in %s", e.cfg.Future, time.Since(start).Round(time.Second))

	const warm = 50
	n := (e.cfg.Samples + warm) * claimPer
	tables := []*env{e, hist, fut}
	for _, t := range tables {
		if err := t.enqueue(ctx, route, 0, n); err != nil {
			return err
		}
		// The state a deployment keeps a table in: visibility map and
		// statistics current, no dead index entries or unflushed pages
		// from the load.
		start := time.Now()
		if err := t.settle(ctx); err != nil {
			return err
		}
		e.note("claim: settling %s took %s", t.schema, time.Since(start).Round(time.Millisecond))
	}
	lat := make([][]time.Duration, len(tables))
	for i := range e.cfg.Samples + warm {
		for o := range tables {
			k := (i + o) % len(tables) // no table always goes first
			got, took, err := tables[k].claimBatch(ctx, queue, claimPer)
			if err != nil {
				return err
			}
			if got != claimPer {
				return fmt.Errorf("claim %d got %d jobs, want %d", i, got, claimPer)
			}
			if i >= warm {
				lat[k] = append(lat[k], took)
			}
		}
	}
	names := []string{"claim_ms_p99_at_0", historyFigure(e.cfg.History), futureFigure(e.cfg.Future)}
	for k, l := range lat {
		slices.Sort(l)
		e.note("%s: %d claims of %d: p50 %.2f ms, p99 %.2f ms, max %.2f ms", names[k], len(l), claimPer,
			ms(percentile(l, 0.5)), ms(percentile(l, 0.99)), ms(l[len(l)-1]))
	}
	for k, l := range lat {
		e.report(names[k], ms(percentile(l, 0.99)), "ms")
	}
	return nil
}

// percentile of sorted durations, nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// printContext describes the machine, the servers and the sizes.
func (e *env) printContext(ctx context.Context) error {
	e.note("switchyard bench: %s %s/%s, %d CPUs (%s), load average %s", runtime.Version(), runtime.GOOS,
		runtime.GOARCH, runtime.NumCPU(), cpuModel(), loadAverage())
	if e.cfg.GC != "" {
		e.note("gc: %s", e.cfg.GC)
	}
	info, err := e.serverInfo(ctx)
	if err != nil {
		return err
	}
	e.note("%s", info)
	e.note("kafka %s; schema %s (topics and groups %s_*)", strings.Join(e.cfg.Brokers, ","), e.schema, e.schema)
	c := e.cfg
	e.note("sizes: records=%d jobs=%d http-jobs=%d keys=%d history=%d concurrency=%d raw-loops=%d "+
		"rate=%d/s duration=%s samples=%d point-jobs=%d max-conns=%d poll=%s", c.Records, c.Jobs, c.HTTPJobs, c.Keys,
		c.History, c.Concurrency, c.RawLoops, c.Rate, c.Duration, c.Samples, c.PointJobs, c.MaxConns, pollInterval)
	return nil
}

// loadAverage is the 1-minute load average: the machine is shared with
// Kafka and Postgres (and whatever else runs), so it says how noisy a
// figure is.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	first, _, _ := strings.Cut(string(b), " ")
	return first
}

// cpuModel is the first "model name" of /proc/cpuinfo, or "unknown CPU".
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}
