package ingest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrRecordGone means a record is no longer in Kafka: its partition's log
// now starts past it (retention), or the topic is gone.
var ErrRecordGone = errors.New("record is no longer in Kafka")

// rereadTimeout bounds one Reread: an operator is waiting on it.
const rereadTimeout = 15 * time.Second

// Rereader reads single records back from Kafka, for re-driving DLQ
// entries that keep only part of their record (too_large ones). Each
// call uses a client of its own: re-drives are rare, and a client held
// open would hold broker connections for nothing.
type Rereader struct {
	opts []kgo.Opt
}

// NewRereader reads with the given client options (ClientOpts and an
// embedder's own).
func NewRereader(opts []kgo.Opt) *Rereader { return &Rereader{opts: slices.Clone(opts)} }

// Reread returns the committed record at topic/partition/offset, or an
// error wrapping ErrRecordGone when Kafka no longer has it.
func (r *Rereader) Reread(ctx context.Context, topic string, partition int32, offset int64) (*kgo.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, rereadTimeout)
	defer cancel()
	cl, err := kgo.NewClient(append(slices.Clone(r.opts),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(offset)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	defer cl.Close()
	// Below the log start a fetch does not fail: the client resets to the
	// start and reads later records. Ask first, so the answer says why.
	starts, err := kadm.NewClient(cl).ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("kafka: listing the start of %s: %w", topic, err)
	}
	start, ok := starts.Lookup(topic, partition)
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: partition %s/%d does not exist", ErrRecordGone, topic, partition)
	case start.Err != nil:
		return nil, fmt.Errorf("kafka: listing the start of %s/%d: %w", topic, partition, start.Err)
	case offset < start.Offset:
		return nil, fmt.Errorf("%w: %s/%d now starts at offset %d, past %d (retention removed it)",
			ErrRecordGone, topic, partition, start.Offset, offset)
	}
	for {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("kafka: reading %s/%d/%d: %w", topic, partition, offset, err)
		}
		if err := fetches.Err(); err != nil {
			return nil, fmt.Errorf("kafka: reading %s/%d/%d: %w", topic, partition, offset, err)
		}
		for it := fetches.RecordIter(); !it.Done(); {
			rec := it.Next()
			switch {
			case rec.Offset == offset:
				return rec, nil
			case rec.Offset > offset:
				// Compacted away, or an aborted transaction's record.
				return nil, fmt.Errorf("%w: %s/%d has no committed record at offset %d", ErrRecordGone, topic, partition, offset)
			}
		}
	}
}
