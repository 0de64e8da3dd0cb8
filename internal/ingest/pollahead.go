package ingest

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

// aheadChainMax bounds how long polls are taken ahead without a pause in
// which the rebalances are allowed.
const aheadChainMax = time.Second

// aheadMinRecords is the size of a poll (or a full one, if
// kafka.fetch_max_records is smaller) from which the next is taken
// ahead: a backlog. Below it a poll's decoding is a few microseconds, and
// a poll taken during each small batch's commit made the broker answer
// more, smaller fetches: e2e's p99 at 1,000 records/s went from 6–9 ms to
// 12 ms in half the runs (docs/performance.md).
const aheadMinRecords = 256

// polled is one poll and what build made of it.
type polled struct {
	fetches kgo.Fetches
	// batch has no expected offsets until process stores it.
	batch   pgstore.IngestBatch
	commits map[tp]kgo.EpochOffset
	counts  map[string]*Decoded
	stamps  map[tp]time.Time
	// unknown are partitions this member holds no stored position for,
	// with their first record's offset: not stored, but re-read.
	unknown map[tp]int64
}

// poll takes up to kafka.fetch_max_records records and decodes them.
func (c *Consumer) poll(ctx context.Context) *polled {
	fetches := c.cl.PollRecords(ctx, c.cfg.Kafka.FetchMaxRecords)
	fetches.EachError(func(t string, p int32, err error) {
		if errors.Is(err, context.Canceled) {
			// The poll ahead ends so once the batch before it is stored,
			// and every poll when the consumer stops.
			return
		}
		c.log.Warn("fetch error", zap.String("topic", t), zap.Int32("partition", p), zap.Error(err))
	})
	return c.build(fetches)
}

// mayPollAhead says whether to take the next poll while cur is stored:
// when cur is a backlog's (aheadMinRecords), but not while a rebalance
// waits, nor after a chain of aheadChainMax (begun at chained).
func (c *Consumer) mayPollAhead(cur *polled, chained time.Time) bool {
	return cur.fetches.NumRecords() >= min(c.cfg.Kafka.FetchMaxRecords, aheadMinRecords) &&
		!c.rebalanceWaiting.Load() && time.Since(chained) < aheadChainMax
}

// pollAhead polls and decodes in the background. The function it returns
// ends that poll (records it has already are kept), and returns them, nil
// for none.
func (c *Consumer) pollAhead(ctx context.Context) func() *polled {
	ctx, cancel := context.WithCancel(ctx)
	got := make(chan *polled, 1)
	go func() { got <- c.poll(ctx) }()
	return func() *polled {
		cancel()
		if p := <-got; p.fetches.NumRecords() > 0 {
			return p
		}
		return nil
	}
}

// keepAhead drops from the poll taken ahead the records of the partitions
// that the batch before it re-reads (reread: re-sought from their stored
// positions with it), and those of topics now held. The latter it returns
// in rewind, each with its first dropped record: this member stored up to
// there, so the position goes back there without asking Postgres.
func (c *Consumer) keepAhead(next *polled, reread map[tp]int64) (kept *polled, rewind map[tp]int64) {
	if next == nil {
		return nil, nil
	}
	drop := map[tp]int64{}
	rewind = map[tp]int64{}
	c.holdMu.Lock()
	next.fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		p := tp{fp.Topic, fp.Partition}
		if len(fp.Records) == 0 {
			return
		}
		if _, ok := reread[p]; ok {
			drop[p] = fp.Records[0].Offset
		} else if c.held[fp.Topic] != "" {
			drop[p] = fp.Records[0].Offset
			rewind[p] = fp.Records[0].Offset
		}
	})
	c.holdMu.Unlock()
	if len(drop) == 0 {
		return next, nil
	}
	if kept = c.build(withoutPartitions(next.fetches, drop)); kept.fetches.NumRecords() == 0 {
		kept = nil
	}
	return kept, rewind
}

// withoutPartitions is fetches less the records of the partitions in drop.
func withoutPartitions(fetches kgo.Fetches, drop map[tp]int64) kgo.Fetches {
	out := make(kgo.Fetches, 0, len(fetches))
	for _, f := range fetches {
		kept := kgo.Fetch{Topics: make([]kgo.FetchTopic, 0, len(f.Topics))}
		for _, t := range f.Topics {
			parts := make([]kgo.FetchPartition, 0, len(t.Partitions))
			for _, p := range t.Partitions {
				if _, ok := drop[tp{t.Topic, p.Partition}]; !ok {
					parts = append(parts, p)
				}
			}
			t.Partitions = parts
			kept.Topics = append(kept.Topics, t)
		}
		out = append(out, kept)
	}
	return out
}

// allowRebalance lets a waiting rebalance run: nothing polled is in hand.
func (c *Consumer) allowRebalance() {
	c.rebalanceWaiting.Store(false)
	c.cl.AllowRebalance()
}
