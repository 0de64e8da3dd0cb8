package ingest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

// replayIdle is how long Replay waits for a partition that has not
// reached its end offset yet before it stops there: the offsets left are
// transaction markers, which a read-committed consumer never sees.
const replayIdle = 5 * time.Second

// ReplayRange is [From, End) of one partition, and how far Replay got.
type ReplayRange struct {
	Partition int32
	From, End int64
	next      int64 // the next offset not read yet
	stored    int64 // the first offset whose jobs and DLQ entries are not committed yet
	// Stopped is where reading stopped: End, or short of it when only
	// transaction markers were left; -1 while reading.
	Stopped int64
}

// Resume is where a replay that ended before End (interrupted, or
// failed) resumes: the first offset of the range whose jobs and DLQ
// entries it has not committed (and, with rerun, re-run). Those before
// it are done; it is From when nothing is.
func (r *ReplayRange) Resume() int64 { return r.stored }

// ReplayInputError is a replay request that names what does not exist
// (a topic, a partition): the caller's to fix.
type ReplayInputError struct{ Field, Msg string }

func (e *ReplayInputError) Error() string { return e.Field + ": " + e.Msg }

// ReplayRanges resolves a replay request to offset ranges per partition
// (all partitions when partition is -1), from the broker's current start,
// end and time offsets: from fromOffset (≥ 0), or the first record at or
// after from, up to the end, the last record at or before to, or before
// toOffset (≥ 0; -1: no bound), whichever comes first.
func ReplayRanges(ctx context.Context, adm *kadm.Client, topic string, partition int32, fromOffset, toOffset int64, from, to time.Time) ([]*ReplayRange, error) {
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("kafka: listing %s: %w", topic, err)
	}
	// A topic the broker does not have is listed as partition -1 with
	// the topic's error, not as no partitions: the operator's input to
	// fix, where a partition's own error is Kafka's.
	if gone, ok := starts[topic][-1]; len(starts[topic]) == 0 || ok && errors.Is(gone.Err, kerr.UnknownTopicOrPartition) {
		return nil, &ReplayInputError{"--topic", fmt.Sprintf("%q does not exist in Kafka", topic)}
	}
	if err := starts.Error(); err != nil {
		return nil, fmt.Errorf("kafka: listing %s: %w", topic, err)
	}
	if _, ok := starts[topic][partition]; partition >= 0 && !ok {
		return nil, &ReplayInputError{"--partition", fmt.Sprintf("%s has no partition %d (it has %d)", topic, partition, len(starts[topic]))}
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
	var out []*ReplayRange
	for p, start := range starts[topic] {
		if partition >= 0 && p != partition {
			continue
		}
		end := ends[topic][p].Offset
		r := &ReplayRange{Partition: p, From: max(fromOffset, start.Offset), End: end, Stopped: -1}
		// A time past the last record lists offset -1: nothing to read.
		if o, ok := fromAt.Lookup(topic, p); ok {
			r.From = o.Offset
			if r.From < 0 {
				r.From = end
			}
		}
		if o, ok := toAt.Lookup(topic, p); ok && o.Offset >= 0 {
			r.End = min(r.End, o.Offset)
		}
		if toOffset >= 0 {
			r.End = min(r.End, toOffset)
		}
		r.next, r.stored = r.From, r.From
		if r.From < r.End {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *ReplayRange) int { return int(a.Partition - b.Partition) })
	return out, nil
}

// ReplaySummary counts what Replay did.
type ReplaySummary struct {
	Records  int64 // read
	Jobs     int64 // one per record and route that takes it, new or not
	Inserted int64 // new jobs
	Parked   int64 // poison, parked (or found parked already)
	// NewlyParked counts the Parked that were not parked before: the
	// rest were, by the consumer or an earlier replay.
	NewlyParked int64
	Filtered    int64 // records none of the routes takes
	Rerun       int64 // finished jobs put back to run (rerun)
}

// ReplayProgress is how far a replay got: what it did so far, and the
// offsets of the ranges it has gone past, of all of them.
type ReplayProgress struct {
	ReplaySummary
	Done, Total int64
}

// Replay reads the ranges of one topic and stores each poll through the
// same decode-and-commit path as the consumer, for the given routes of
// the topic (all of them, or those an operator named), without offsets:
// job rows deduplicated (I2), poison parked. With rerun, the finished
// jobs of the records read run again. It never touches a consumer group.
// progress, when not nil, is called after each poll, on Replay's own
// goroutine.
func Replay(ctx context.Context, store *pgstore.Store, opts []kgo.Opt, routes []*Route, ranges []*ReplayRange, rerun bool,
	progress func(ReplayProgress)) (ReplaySummary, error) {
	var sum ReplaySummary
	if len(ranges) == 0 || len(routes) == 0 {
		return sum, nil
	}
	topic := routes[0].Topic
	start := map[int32]kgo.Offset{}
	for _, r := range ranges {
		start[r.Partition] = kgo.NewOffset().At(r.From)
	}
	cl, err := kgo.NewClient(append(slices.Clone(opts),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		return sum, fmt.Errorf("kafka: %w", err)
	}
	defer cl.Close()
	byPartition := map[int32]*ReplayRange{}
	for _, r := range ranges {
		byPartition[r.Partition] = r
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
		now := time.Now()
		// What this poll did counts once it is committed: a replay that
		// stops on the way says only what it did.
		var polled ReplaySummary
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			r := byPartition[fp.Partition]
			if r == nil || r.Stopped >= 0 {
				return
			}
			recs := fp.Records
			if i := slices.IndexFunc(recs, func(rec *kgo.Record) bool { return rec.Offset >= r.End }); i >= 0 {
				recs = recs[:i]
			}
			if len(recs) > 0 {
				r.next = recs[len(recs)-1].Offset + 1
				polled.Records += int64(len(recs))
				n := decodeInto(&batch, routes, recs, now)
				polled.Jobs += int64(n.Jobs)
				polled.Filtered += int64(n.Filtered)
			}
			if r.next >= r.End {
				r.Stopped = r.next
				open--
			}
		})
		if err := fetches.Err0(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return sum, fmt.Errorf("kafka: %w", err)
		}
		if polled.Records > 0 {
			lastProgress = time.Now()
		}
		if len(batch.Jobs)+len(batch.Poison) > 0 {
			res, err := store.IngestCommit(ctx, batch)
			if err != nil {
				return sum, fmt.Errorf("storing replayed records: %w", err)
			}
			polled.Inserted = res.Inserted
			polled.Parked = int64(len(batch.Poison))
			polled.NewlyParked = res.Parked
			for _, n := range res.RefusedByRoute {
				polled.Jobs, polled.Parked = polled.Jobs-n, polled.Parked+n // parked instead
			}
			if rerun {
				dedupeKeys := map[string][]string{}
				for _, j := range batch.Jobs {
					dedupeKeys[j.Route] = append(dedupeKeys[j.Route], j.DedupeKey)
				}
				for route, keys := range dedupeKeys {
					n, err := store.JobRerun(ctx, route, keys)
					if err != nil {
						return sum, fmt.Errorf("re-running replayed jobs of route %s: %w", route, err)
					}
					sum.Rerun += n
				}
			}
		}
		// Every record read so far is committed now: a replay stopped
		// from here on resumes after them.
		for _, r := range ranges {
			r.stored = r.next
		}
		sum.Records += polled.Records
		sum.Jobs += polled.Jobs
		sum.Filtered += polled.Filtered
		sum.Inserted += polled.Inserted
		sum.Parked += polled.Parked
		sum.NewlyParked += polled.NewlyParked
		if time.Since(lastProgress) > replayIdle {
			for _, r := range ranges {
				if r.Stopped < 0 {
					r.Stopped = r.next
					open--
				}
			}
		}
		if progress != nil {
			p := ReplayProgress{ReplaySummary: sum}
			for _, r := range ranges {
				p.Total += r.End - r.From
				if r.Stopped >= 0 {
					p.Done += r.End - r.From // markers left unread count as gone past
				} else {
					p.Done += r.next - r.From
				}
			}
			progress(p)
		}
	}
	return sum, nil
}
