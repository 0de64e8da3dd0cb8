package metrics

import (
	"maps"
	"sync"
)

// QueueFlow counts, per queue, the jobs this process made (arrived: from
// Kafka or the enqueue API) and the attempts it ended for good (finished:
// succeeded or dead), since it started. Every process publishes its
// counts (pgstore.QueueFlowPut, by the sampler) and GET /v1/queues sums
// them fleet-wide, so that the dashboard can tell a queue's arrival and
// completion rates from two readings. Safe for concurrent use.
type QueueFlow struct {
	mu                sync.Mutex
	arrived, finished map[string]int64
}

// Arrived counts n jobs made in queue.
func (f *QueueFlow) Arrived(queue string, n int64) { f.add(&f.arrived, queue, n) }

// Finished counts n jobs of queue ended for good.
func (f *QueueFlow) Finished(queue string, n int64) { f.add(&f.finished, queue, n) }

func (f *QueueFlow) add(m *map[string]int64, queue string, n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if *m == nil {
		*m = map[string]int64{}
	}
	(*m)[queue] += n
}

// Snapshot returns copies of the counts.
func (f *QueueFlow) Snapshot() (arrived, finished map[string]int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.arrived), maps.Clone(f.finished)
}
