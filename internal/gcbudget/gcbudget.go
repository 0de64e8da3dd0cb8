// Package gcbudget paces the process's garbage collector: a third as
// often as Go's default while the live heap is small, and at the
// default's pace once it is large. It does nothing when the operator has
// chosen (GOGC or GOMEMLIMIT set): Go's own rules then apply.
//
// Why: a dispatcher's live heap is small (the jobs in flight, a poll's
// records: tens of MiB) and it allocates steadily per job, so at Go's
// default (collect when the heap has doubled) one `switchyard bench
// --only work` ran 418 collections, 1.2 s of CPU for 200,000 jobs, on a
// machine whose Postgres needed that CPU. GOGC=300 alone: 115 collections
// and 0.33 s, work +15 % on the medians of eight runs mirrored, but the
// peak RSS during ingest rose from 96–102 to 156–175 MiB. So the percent
// is raised, and a soft memory limit follows the live heap every second:
// Floor, or twice the live heap plus what is not heap (stacks, the
// runtime's own), whichever is larger. Under Floor the collector runs at
// GOGC=300; a heap that would pass it is collected at Floor; a live heap
// of more than about 40 MiB gets the room the default gives it, and never
// less, so a large deployment (thousands of leases, large payloads) is
// paced as it would be without this package.
package gcbudget

import (
	"context"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

const (
	// Percent is the GOGC the process runs at under Floor.
	Percent = 300
	// Floor is the memory limit while the live heap is small.
	Floor = 100 << 20
	// slack is room for a heap's free and fragmented spans above twice
	// its live bytes, so that a large heap's limit never binds before
	// the default's pace would have.
	slack = 16 << 20
	// every is how often the limit follows the live heap.
	every = time.Second
)

// Start applies the budget and follows the live heap until ctx ends. It
// reports whether it did: not when GOGC or GOMEMLIMIT is set.
func Start(ctx context.Context) bool {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return false
	}
	debug.SetGCPercent(Percent)
	follow := func() { debug.SetMemoryLimit(Limit(read())) }
	follow()
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				follow()
			}
		}
	}()
	return true
}

// Usage is what the limit is computed from: the live heap after the last
// collection, and the memory the limit counts that is not heap (stacks,
// the runtime's metadata, ...).
type Usage struct {
	Live, NotHeap uint64
}

// Limit is the soft memory limit for u: Floor, or twice the live heap
// plus what is not heap plus slack, whichever is larger.
func Limit(u Usage) int64 {
	return int64(max(Floor, 2*u.Live+u.NotHeap+slack))
}

// read samples the runtime. A metric this Go does not have reads as 0,
// which leaves the limit at Floor or above. The samples are its own, as
// two commands run in one process (tests) may read at once.
func read() Usage {
	samples := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
	}
	metrics.Read(samples)
	v := make([]uint64, len(samples))
	for i, s := range samples {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = s.Value.Uint64()
		}
	}
	live, total, released, objects, unused, free := v[0], v[1], v[2], v[3], v[4], v[5]
	// What the limit counts (total - released) that the heap's spans do
	// not hold; never negative.
	var notHeap uint64
	if counted, heap := total-min(released, total), objects+unused+free; counted > heap {
		notHeap = counted - heap
	}
	return Usage{Live: live, NotHeap: notHeap}
}
