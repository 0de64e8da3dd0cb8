package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/ingest"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

// replayIdle is how long replay waits for a partition that has not
// reached its end offset yet before it stops there: the offsets left are
// transaction markers, which a read-committed consumer never sees.
const replayIdle = 5 * time.Second

// runReplay re-reads a range of a topic through its route into jobs. The
// consumer group and its stored positions are not touched: replay reads
// the partitions directly, up to their end offsets as they were when it
// started, so it always ends. Dedupe keys make it idempotent (I2); with
// --rerun, finished jobs of the replayed records run again.
func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cfgPath := newFlags("replay",
		"replay [--config FILE] --topic T (--from-time RFC3339 | --from-offset N) [--to-time RFC3339] [--partition P] [--rerun]", stderr)
	topic := fs.String("topic", "", "topic to re-read (required; a route must consume it)")
	fromTime := fs.String("from-time", "", "start at the first record at or after this time (RFC3339)")
	fromOffset := fs.Int64("from-offset", -1, "start at this offset of every partition replayed")
	toTime := fs.String("to-time", "", "stop before the first record after this time (RFC3339); default: the end when replay starts")
	partition := fs.Int("partition", -1, "replay only this partition")
	rerun := fs.Bool("rerun", false, "run the replayed records' finished jobs again (default: existing jobs stay as they are)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if *topic == "" {
		return usagef("--topic: required")
	}
	if (*fromTime == "") == (*fromOffset < 0) {
		return usagef("exactly one of --from-time and --from-offset (≥ 0) is required")
	}
	var from, to time.Time
	var err error
	if *fromTime != "" {
		if from, err = time.Parse(time.RFC3339, *fromTime); err != nil {
			return usagef("--from-time: %q is not an RFC3339 time (e.g. 2026-11-30T08:00:00Z)", *fromTime)
		}
	}
	if *toTime != "" {
		if to, err = time.Parse(time.RFC3339, *toTime); err != nil {
			return usagef("--to-time: %q is not an RFC3339 time (e.g. 2026-11-30T09:00:00Z)", *toTime)
		}
		if !from.IsZero() && !to.After(from) {
			return usagef("--to-time: %s is not after --from-time %s", *toTime, *fromTime)
		}
	}
	if *partition < -1 {
		return usagef("--partition: %d is not a partition number", *partition)
	}
	cfg, err := loadConfig(fs, *cfgPath, false)
	if err != nil {
		return err
	}
	rc, ok := cfg.RouteForTopic(*topic)
	if !ok {
		return usagef("--topic: no route consumes %q", *topic)
	}
	route, err := ingest.CompileRoute(*rc)
	if err != nil {
		return err
	}
	opts, err := ingest.ClientOpts(cfg.Kafka, nil)
	if err != nil {
		return usageError{err.Error()}
	}
	admin, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	defer admin.Close()
	ranges, err := replayRanges(ctx, kadm.NewClient(admin), *topic, int32(*partition), *fromOffset, from, to)
	if err != nil {
		return err
	}
	store, err := pgstore.Open(ctx, pgstore.Config{URL: cfg.Postgres.URL, Schema: cfg.Postgres.Schema, MaxConns: 2})
	if err != nil {
		return err
	}
	defer store.Close()
	sum, err := replay(ctx, store, opts, route, ranges, *rerun)
	fmt.Fprintf(stdout, "replayed %d records of %s: %d new jobs, %d already there, %d re-run, %d parked\n",
		sum.records, *topic, sum.inserted, sum.records-sum.poison-sum.inserted, sum.rerun, sum.poison)
	for _, r := range ranges {
		if r.stopped >= 0 && r.stopped < r.end {
			fmt.Fprintf(stdout, "partition %d: stopped at offset %d of %d (nothing more to read: transaction markers)\n",
				r.partition, r.stopped, r.end)
		}
	}
	return err
}

// replayRange is [from, end) of one partition.
type replayRange struct {
	partition int32
	from, end int64
	next      int64 // the next offset not read yet
	stopped   int64 // where reading stopped, -1 while reading
}

// replayRanges resolves the flags to offset ranges per partition, from the
// broker's current start, end and time offsets.
func replayRanges(ctx context.Context, adm *kadm.Client, topic string, partition int32, fromOffset int64, from, to time.Time) ([]*replayRange, error) {
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: listing %s: %w", topic, err)
	}
	if len(starts[topic]) == 0 {
		return nil, usagef("--topic: %q does not exist", topic)
	}
	if _, ok := starts[topic][partition]; partition >= 0 && !ok {
		return nil, usagef("--partition: %s has no partition %d (it has %d)", topic, partition, len(starts[topic]))
	}
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("kafka: listing %s: %w", topic, err)
	}
	atTime := func(t time.Time) (kadm.ListedOffsets, error) {
		o, err := adm.ListOffsetsAfterMilli(ctx, t.UnixMilli(), topic)
		if err == nil {
			err = o.Error()
		}
		return o, err
	}
	var fromAt, toAt kadm.ListedOffsets
	if !from.IsZero() {
		if fromAt, err = atTime(from); err != nil {
			return nil, fmt.Errorf("kafka: offsets at %s: %w", from.Format(time.RFC3339), err)
		}
	}
	if !to.IsZero() {
		if toAt, err = atTime(to.Add(time.Millisecond)); err != nil {
			return nil, fmt.Errorf("kafka: offsets at %s: %w", to.Format(time.RFC3339), err)
		}
	}
	var out []*replayRange
	for p, start := range starts[topic] {
		if partition >= 0 && p != partition {
			continue
		}
		end := ends[topic][p].Offset
		r := &replayRange{partition: p, from: max(fromOffset, start.Offset), end: end, stopped: -1}
		// A time past the last record lists offset -1: nothing to read.
		if o, ok := fromAt.Lookup(topic, p); ok {
			r.from = o.Offset
			if r.from < 0 {
				r.from = end
			}
		}
		if o, ok := toAt.Lookup(topic, p); ok && o.Offset >= 0 {
			r.end = min(r.end, o.Offset)
		}
		r.next = r.from
		if r.from < r.end {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *replayRange) int { return int(a.partition - b.partition) })
	return out, nil
}

type replaySummary struct{ records, inserted, poison, rerun int64 }

// replay reads the ranges and stores each poll as ingest would, without
// offsets: job rows deduplicated, poison parked.
func replay(ctx context.Context, store *pgstore.Store, opts []kgo.Opt, route *ingest.Route, ranges []*replayRange, rerun bool) (replaySummary, error) {
	var sum replaySummary
	if len(ranges) == 0 {
		return sum, nil
	}
	topic := route.Topic
	start := map[int32]kgo.Offset{}
	for _, r := range ranges {
		start[r.partition] = kgo.NewOffset().At(r.from)
	}
	cl, err := kgo.NewClient(append(slices.Clone(opts),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		return sum, fmt.Errorf("kafka: %w", err)
	}
	defer cl.Close()
	byPartition := map[int32]*replayRange{}
	for _, r := range ranges {
		byPartition[r.partition] = r
	}
	open := len(ranges)
	lastProgress := time.Now()
	for open > 0 {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fetches := cl.PollRecords(pctx, 10_000)
		cancel()
		if err := ctx.Err(); err != nil {
			return sum, err
		}
		var batch pgstore.IngestBatch
		var dedupeKeys []string
		now := time.Now()
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			r := byPartition[fp.Partition]
			if r == nil || r.stopped >= 0 {
				return
			}
			for _, rec := range fp.Records {
				if rec.Offset >= r.end {
					break
				}
				r.next = rec.Offset + 1
				sum.records++
				if job, poison := route.Decode(rec, now); job != nil {
					batch.Jobs = append(batch.Jobs, *job)
					dedupeKeys = append(dedupeKeys, job.DedupeKey)
				} else {
					batch.Poison = append(batch.Poison, *poison)
				}
			}
			if r.next >= r.end {
				r.stopped = r.next
				open--
			}
		})
		if err := fetches.Err0(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return sum, fmt.Errorf("kafka: %w", err)
		}
		if len(batch.Jobs)+len(batch.Poison) > 0 {
			lastProgress = time.Now()
			res, err := store.IngestCommit(ctx, batch)
			if err != nil {
				return sum, fmt.Errorf("storing replayed records: %w", err)
			}
			sum.inserted += res.Inserted
			sum.poison += int64(len(batch.Poison))
			if rerun {
				n, err := store.JobRerun(ctx, route.Topic, dedupeKeys)
				if err != nil {
					return sum, fmt.Errorf("re-running replayed jobs: %w", err)
				}
				sum.rerun += n
			}
			continue
		}
		if time.Since(lastProgress) > replayIdle {
			for _, r := range ranges {
				if r.stopped < 0 {
					r.stopped = r.next
					open--
				}
			}
		}
	}
	return sum, nil
}
