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
// now starts past it (retention) or ends before it (the topic was
// recreated), or the topic is gone.
var ErrRecordGone = errors.New("the record is no longer in Kafka")

// rereadTimeout bounds one RereadMany: an operator is waiting on it.
const rereadTimeout = 15 * time.Second

// rereadSkip is how far (in offsets) past a fetch's last record the next
// offset asked for may lie for the read to go on through the records
// between, dropping them; farther, it jumps there (a new fetch position),
// which costs more than reading a few records.
const rereadSkip = 64

// Rereader reads records back from Kafka, for re-driving DLQ entries that
// keep only part of their record (too_large ones). Each call uses a
// client of its own: re-drives are rare, and a client held open would
// hold broker connections for nothing.
type Rereader struct {
	opts []kgo.Opt
}

// NewRereader reads with the given client options (ClientOpts and an
// embedder's own).
func NewRereader(opts []kgo.Opt) *Rereader { return &Rereader{opts: slices.Clone(opts)} }

// At is where a record is in Kafka.
type At struct {
	Topic     string
	Partition int32
	Offset    int64
}

// RereadMany returns the committed records at ats, each or the error why
// it could not be read (wrapping ErrRecordGone when Kafka no longer has
// it), by the index of ats. One client reads them all, each partition in
// one pass from the first offset asked for to the last, so a chunk of
// records costs about one fetch, not one a record.
func (r *Rereader) RereadMany(ctx context.Context, ats []At) ([]*kgo.Record, []error) {
	read := rereading{ats: ats, recs: make([]*kgo.Record, len(ats)), errs: make([]error, len(ats)), parts: map[topicPartition]*wanted{}}
	for i := range ats {
		read.want(i)
	}
	if len(ats) == 0 {
		return read.recs, read.errs
	}
	ctx, cancel := context.WithTimeout(ctx, rereadTimeout)
	defer cancel()
	cl, err := kgo.NewClient(append(slices.Clone(r.opts), kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		read.failRest(fmt.Errorf("kafka: %w", err))
		return read.recs, read.errs
	}
	defer cl.Close()
	if err := read.bound(ctx, kadm.NewClient(cl)); err != nil {
		read.failRest(err)
		return read.recs, read.errs
	}
	from := map[string]map[int32]kgo.Offset{}
	for tp, w := range read.parts {
		if !w.done() {
			if from[tp.topic] == nil {
				from[tp.topic] = map[int32]kgo.Offset{}
			}
			from[tp.topic][tp.partition] = kgo.NewOffset().At(w.offsets[w.next])
		}
	}
	cl.AddConsumePartitions(from)
	for read.left > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			read.failRest(fmt.Errorf("kafka: reading: %w", err))
			break
		}
		if err := fetches.Err(); err != nil {
			read.failRest(fmt.Errorf("kafka: reading: %w", err))
			break
		}
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			w := read.parts[topicPartition{p.Topic, p.Partition}]
			if w == nil || w.done() || len(p.Records) == 0 {
				return
			}
			for _, rec := range p.Records {
				read.take(w, rec)
			}
			switch last := p.Records[len(p.Records)-1].Offset; {
			case w.done():
				cl.PauseFetchPartitions(map[string][]int32{p.Topic: {p.Partition}})
			case w.offsets[w.next] > last+rereadSkip:
				cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{p.Topic: {p.Partition: {Epoch: -1, Offset: w.offsets[w.next]}}})
			}
		})
	}
	return read.recs, read.errs
}

type topicPartition struct {
	topic     string
	partition int32
}

// rereading is one RereadMany's progress.
type rereading struct {
	ats   []At
	recs  []*kgo.Record
	errs  []error
	parts map[topicPartition]*wanted
	left  int // partitions with offsets not answered yet
}

// wanted is what a partition is read for: its offsets asked for, in
// order, each with the indexes of ats that ask for it (two routes of a
// topic park a record twice), and the next one not answered yet.
type wanted struct {
	offsets []int64
	askers  map[int64][]int
	next    int
}

func (w *wanted) done() bool { return w.next == len(w.offsets) }

// want adds ats[i] to its partition's offsets, kept in order.
func (read *rereading) want(i int) {
	at := read.ats[i]
	tp := topicPartition{at.Topic, at.Partition}
	w := read.parts[tp]
	if w == nil {
		w = &wanted{askers: map[int64][]int{}}
		read.parts[tp] = w
		read.left++
	}
	if _, ok := w.askers[at.Offset]; !ok {
		n, _ := slices.BinarySearch(w.offsets, at.Offset)
		w.offsets = slices.Insert(w.offsets, n, at.Offset)
	}
	w.askers[at.Offset] = append(w.askers[at.Offset], i)
}

// answer gives the askers of w's next offset rec or err, and moves on.
func (read *rereading) answer(w *wanted, rec *kgo.Record, err error) {
	for _, i := range w.askers[w.offsets[w.next]] {
		read.recs[i], read.errs[i] = rec, err
	}
	w.next++
	if w.done() {
		read.left--
	}
}

// take is a record read from w's partition: an offset asked for that it
// passed has no committed record (compacted away, or an aborted
// transaction's); the one it is gets it.
func (read *rereading) take(w *wanted, rec *kgo.Record) {
	for !w.done() && w.offsets[w.next] < rec.Offset {
		read.answer(w, nil, fmt.Errorf("%w: %s/%d has no committed record at offset %d", ErrRecordGone, rec.Topic, rec.Partition, w.offsets[w.next]))
	}
	if !w.done() && w.offsets[w.next] == rec.Offset {
		read.answer(w, rec, nil)
	}
}

// bound answers, before any fetch, the offsets that the partitions' logs
// no longer hold: below a log's start a fetch does not fail (the client
// resets to the start and reads later records), and past its end it
// would wait for records that never come.
func (read *rereading) bound(ctx context.Context, adm *kadm.Client) error {
	var topics []string
	for tp := range read.parts {
		if !slices.Contains(topics, tp.topic) {
			topics = append(topics, tp.topic)
		}
	}
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return fmt.Errorf("kafka: listing the start of %v: %w", topics, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return fmt.Errorf("kafka: listing the end of %v: %w", topics, err)
	}
	for tp, w := range read.parts {
		start, ok := starts.Lookup(tp.topic, tp.partition)
		end, _ := ends.Lookup(tp.topic, tp.partition)
		w.offsets = slices.DeleteFunc(w.offsets, func(at int64) bool {
			var err error
			switch {
			case !ok:
				err = fmt.Errorf("%w: partition %s/%d does not exist", ErrRecordGone, tp.topic, tp.partition)
			case start.Err != nil:
				err = fmt.Errorf("kafka: listing the start of %s/%d: %w", tp.topic, tp.partition, start.Err)
			case at < start.Offset:
				err = fmt.Errorf("%w: %s/%d now starts at offset %d, past %d (retention removed it)",
					ErrRecordGone, tp.topic, tp.partition, start.Offset, at)
			case end.Err == nil && at >= end.Offset:
				err = fmt.Errorf("%w: %s/%d now ends at offset %d, before %d (the topic was deleted and created again?)",
					ErrRecordGone, tp.topic, tp.partition, end.Offset, at)
			}
			for _, i := range w.askers[at] {
				read.errs[i] = err
			}
			return err != nil
		})
		if w.done() {
			read.left--
		}
	}
	return nil
}

// failRest gives every offset not answered yet err.
func (read *rereading) failRest(err error) {
	for _, w := range read.parts {
		for !w.done() {
			read.answer(w, nil, err)
		}
	}
}
