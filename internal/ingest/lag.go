package ingest

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

// lagTimeout bounds one lag reading: an operator (or a dashboard) waits.
const lagTimeout = 10 * time.Second

// TopicLag is a topic's lag for the whole fleet: the positions stored in
// Postgres (the truth of what was consumed, I1) against the partitions'
// last stable offsets.
type TopicLag struct {
	// Records is the sum of the partitions' lags.
	Records int64 `json:"records"`
	// Seconds is the greatest of the partitions' Seconds: how long the
	// oldest record not stored yet has waited.
	Seconds    float64        `json:"seconds"`
	Partitions []PartitionPos `json:"partitions"`
}

// PartitionPos is one partition's stored position, end and lag.
type PartitionPos struct {
	Partition int32 `json:"partition"`
	// Stored is the next offset to consume, as stored; nil before the
	// partition's first batch (it then starts at kafka.reset).
	Stored *int64 `json:"stored"`
	// End is the last stable offset: what a read-committed consumer can
	// read up to.
	End int64 `json:"end"`
	Lag int64 `json:"lag"`
	// Seconds is the age of the first record not stored yet (by its
	// timestamp) while the partition lags; 0 when it does not, or when
	// that record could not be read within the reading's time.
	Seconds float64 `json:"seconds"`
}

// LagReader reads the fleet's lag per topic. Unlike the lag metrics,
// which each process reports for the partitions it owns, it covers every
// partition, owned or not, from any process — one that only works or
// serves the API included. Each call uses a client of its own, as the
// Rereader does: readings are occasional.
type LagReader struct {
	opts   []kgo.Opt
	store  *pgstore.Store
	group  string
	oldest bool // kafka.reset earliest: an unstored partition is behind by its whole log
}

// NewLagReader reads with the given client options (ClientOpts and an
// embedder's own) for the consumer group, whose reset policy is reset.
func NewLagReader(opts []kgo.Opt, store *pgstore.Store, group, reset string) *LagReader {
	return &LagReader{opts: slices.Clone(opts), store: store, group: group, oldest: reset != "latest"}
}

// Lag returns each topic's lag. A topic Kafka does not know is left out.
func (l *LagReader) Lag(ctx context.Context, topics []string) (map[string]TopicLag, error) {
	ctx, cancel := context.WithTimeout(ctx, lagTimeout)
	defer cancel()
	cl, err := kgo.NewClient(l.opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListCommittedOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("kafka: listing end offsets: %w", err)
	}
	var starts kadm.ListedOffsets
	if l.oldest {
		if starts, err = adm.ListStartOffsets(ctx, topics...); err != nil {
			return nil, fmt.Errorf("kafka: listing start offsets: %w", err)
		}
	}
	stored, err := l.store.OffsetLoad(ctx, l.group, topics)
	if err != nil {
		return nil, err
	}
	out := map[string]TopicLag{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			return
		}
		p := PartitionPos{Partition: o.Partition, End: o.Offset}
		if next, ok := stored[o.Topic][o.Partition]; ok {
			p.Stored = &next
			p.Lag = max(0, o.Offset-next)
		} else if s, ok := starts.Lookup(o.Topic, o.Partition); ok && s.Err == nil {
			p.Lag = max(0, o.Offset-s.Offset)
		}
		t := out[o.Topic]
		t.Records += p.Lag
		t.Partitions = append(t.Partitions, p)
		out[o.Topic] = t
	})
	behind := map[string]map[int32]kgo.Offset{}
	for topic, t := range out {
		for _, p := range t.Partitions {
			if p.Lag > 0 && p.Stored != nil {
				if behind[topic] == nil {
					behind[topic] = map[int32]kgo.Offset{}
				}
				behind[topic][p.Partition] = kgo.NewOffset().At(*p.Stored)
			}
		}
	}
	first := l.firstUnstored(ctx, behind)
	now := time.Now()
	for topic, t := range out {
		for i := range t.Partitions {
			p := &t.Partitions[i]
			if ts, ok := first[topic][p.Partition]; ok {
				p.Seconds = max(0, now.Sub(ts).Seconds())
				t.Seconds = max(t.Seconds, p.Seconds)
			}
		}
		sort.Slice(t.Partitions, func(i, j int) bool { return t.Partitions[i].Partition < t.Partitions[j].Partition })
		out[topic] = t
	}
	return out, nil
}

// firstUnstoredWait bounds the reading of the first unstored records: a
// lag in seconds is worth a moment, not the whole reading's time.
const firstUnstoredWait = 2 * time.Second

// firstUnstored reads the timestamp of the first record at or after each
// position (read committed, as the consumer reads), with one client for
// them all. A partition not answered in time is left out.
func (l *LagReader) firstUnstored(ctx context.Context, at map[string]map[int32]kgo.Offset) map[string]map[int32]time.Time {
	out := map[string]map[int32]time.Time{}
	if len(at) == 0 {
		return out
	}
	cl, err := kgo.NewClient(append(slices.Clone(l.opts), kgo.ConsumePartitions(at),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxBytes(1<<20))...)
	if err != nil {
		return out
	}
	defer cl.Close()
	want := 0
	for _, ps := range at {
		want += len(ps)
	}
	ctx, cancel := context.WithTimeout(ctx, firstUnstoredWait)
	defer cancel()
	for got := 0; got < want && ctx.Err() == nil; {
		cl.PollRecords(ctx, 1000).EachPartition(func(fp kgo.FetchTopicPartition) {
			if len(fp.Records) == 0 || out[fp.Topic] != nil && !out[fp.Topic][fp.Partition].IsZero() {
				return
			}
			if out[fp.Topic] == nil {
				out[fp.Topic] = map[int32]time.Time{}
			}
			out[fp.Topic][fp.Partition] = fp.Records[0].Timestamp
			got++
			cl.PauseFetchPartitions(map[string][]int32{fp.Topic: {fp.Partition}})
		})
	}
	return out
}
