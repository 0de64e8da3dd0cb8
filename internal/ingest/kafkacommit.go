package ingest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
)

// kafkaCommitEvery paces the commits of Kafka's offsets. Postgres holds
// the position; Kafka's committed offset is for lag tools, which read it
// every few seconds at most (Kafka's own auto-commit default is 5 s).
// Committing after every transaction instead cost a Kafka round trip and
// an append to __consumer_offsets for each one: at 1,000 records/s,
// about 700 a second and a fifth of the broker's CPU, which the
// end-to-end latency paid for on a shared machine.
const kafkaCommitEvery = time.Second

// commitTimeout bounds one paced commit.
const commitTimeout = 10 * time.Second

// kafkaCommits keeps Kafka's committed offsets following the stored
// ones: the first store after a quiet spell is committed at once, the
// ones after it at most once per kafkaCommitEvery, each commit carrying
// the newest stored offset of every partition since the last. One
// goroutine sends them; a revoked partition's offset is committed
// before the revoke returns, a lost one's dropped, so no commit is ever
// sent for a partition this member no longer owns.
type kafkaCommits struct {
	cl    *kgo.Client
	log   *zap.Logger
	every time.Duration

	// sending is held while a commit is in flight: taking it waits for
	// that commit, and keeps the next from starting.
	sending sync.Mutex
	mu      sync.Mutex
	pending map[tp]kgo.EpochOffset
	kick    chan struct{} // buffered 1: something is pending
	cancel  context.CancelFunc
	done    chan struct{}
}

func startKafkaCommits(cl *kgo.Client, log *zap.Logger, every time.Duration) *kafkaCommits {
	ctx, cancel := context.WithCancel(context.Background())
	k := &kafkaCommits{cl: cl, log: log, every: every, pending: map[tp]kgo.EpochOffset{},
		kick: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	go k.run(ctx)
	return k
}

// add records the next offsets of a stored batch.
func (k *kafkaCommits) add(offs map[tp]kgo.EpochOffset) {
	k.mu.Lock()
	for p, o := range offs {
		k.pending[p] = o
	}
	k.mu.Unlock()
	select {
	case k.kick <- struct{}{}:
	default:
	}
}

func (k *kafkaCommits) run(ctx context.Context) {
	defer close(k.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-k.kick:
		}
		// Not ctx: stop cancels it, and a commit cut short would lose
		// the offsets it carried for good.
		commitCtx, cancel := context.WithTimeout(context.Background(), commitTimeout)
		k.sending.Lock()
		k.commit(commitCtx, k.take(nil))
		k.sending.Unlock()
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-time.After(k.every):
		}
	}
}

// take removes and returns the pending offsets of parts, or all of them
// when parts is nil.
func (k *kafkaCommits) take(parts map[string][]int32) map[string]map[int32]kgo.EpochOffset {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string]map[int32]kgo.EpochOffset{}
	put := func(p tp, o kgo.EpochOffset) {
		if out[p.topic] == nil {
			out[p.topic] = map[int32]kgo.EpochOffset{}
		}
		out[p.topic][p.partition] = o
		delete(k.pending, p)
	}
	if parts == nil {
		for p, o := range k.pending {
			put(p, o)
		}
		return out
	}
	for topic, ps := range parts {
		for _, partition := range ps {
			if o, ok := k.pending[tp{topic, partition}]; ok {
				put(tp{topic, partition}, o)
			}
		}
	}
	return out
}

// commit sends offs and waits for the answer; a failure is logged and
// otherwise ignored (Postgres holds the position).
func (k *kafkaCommits) commit(ctx context.Context, offs map[string]map[int32]kgo.EpochOffset) {
	if len(offs) == 0 {
		return
	}
	answered := make(chan struct{})
	k.cl.CommitOffsets(ctx, offs, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		defer close(answered)
		if err == nil && resp != nil {
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil {
						err = errors.Join(err, perr)
					}
				}
			}
		}
		if err != nil {
			k.log.Warn("kafka commit failed (Postgres holds the position)", zap.Error(err))
		}
	})
	<-answered
}

// revoked commits the pending offsets of parts, which this member still
// owns while the revoke callback runs.
func (k *kafkaCommits) revoked(ctx context.Context, parts map[string][]int32) {
	k.sending.Lock()
	defer k.sending.Unlock()
	k.commit(ctx, k.take(parts))
}

// lost drops the pending offsets of parts, which another member may
// own already, once no commit that might carry them is in flight.
func (k *kafkaCommits) lost(parts map[string][]int32) {
	k.sending.Lock()
	defer k.sending.Unlock()
	k.take(parts)
}

// stop ends the pacing goroutine, then commits whatever is pending,
// both within ctx.
func (k *kafkaCommits) stop(ctx context.Context) {
	k.cancel()
	select {
	case <-k.done:
	case <-ctx.Done():
		return
	}
	k.sending.Lock()
	defer k.sending.Unlock()
	k.commit(ctx, k.take(nil))
}
