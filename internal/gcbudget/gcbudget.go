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
// peak RSS during ingest rose from 96–102 to 156–175 MiB.
//
// How: after every collection the percent is set from the live heap it
// left, so that the next one starts at Floor, within 100..300: a live heap
// under a quarter of Floor is collected at four times its size (GOGC=300),
// one between a quarter and a half of it at Floor, and one over half of it
// at twice its size, as at Go's default. The collector never runs more
// often than the default, and the heap never grows past Floor or twice the
// live heap, whichever is larger, by more than one cycle's growth. (A soft
// memory limit following the live heap was measured first: the limit
// counts the heap's free spans too, so it bound before the default's pace
// would have, and large records' ingest was collected more often than at
// the default: peak RSS 124–140 MiB against the default's 166–199 in
// `bench --scale --only payload`.)
package gcbudget

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
)

const (
	// Floor is the heap a small live heap may grow to before a
	// collection.
	Floor = 100 << 20
	// MinPercent and MaxPercent bound the percent: never below Go's
	// default, never above three times the heap's live bytes of growth.
	MinPercent, MaxPercent = 100, 300
)

// Start paces the collector until ctx ends. It reports whether it does:
// not when GOGC or GOMEMLIMIT is set.
func Start(ctx context.Context) bool {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return false
	}
	p := &pacer{ctx: ctx, percent: MaxPercent}
	debug.SetGCPercent(MaxPercent)
	p.arm()
	return true
}

// Percent is the GOGC for a heap that a collection left with live bytes
// live: the next collection then starts at Floor, within MinPercent and
// MaxPercent. Unknown (0: no collection yet) is MaxPercent.
func Percent(live uint64) int {
	if live == 0 {
		return MaxPercent
	}
	// In float: Floor*100/live - 100 is negative for a live heap over
	// Floor, which unsigned arithmetic would wrap.
	return int(min(MaxPercent, max(MinPercent, float64(Floor)*100/float64(live)-100)))
}

// pacer sets the percent after each collection. Its state is touched
// only by the runtime's cleanup goroutine, one call at a time.
type pacer struct {
	ctx     context.Context
	percent int
}

// sentinel is allocated to become garbage: its cleanup runs after the
// collection that found it unreachable. The pointer keeps it off the tiny
// allocator, whose objects' cleanups may never run.
type sentinel struct {
	_ *sentinel
	_ [8]byte
}

// arm schedules cycle to run after the next collection.
func (p *pacer) arm() {
	runtime.AddCleanup(new(sentinel), (*pacer).cycle, p)
}

// cycle sets the percent from the live heap the last collection left and
// arms itself for the next one, until ctx ends.
func (p *pacer) cycle() {
	if p.ctx.Err() != nil {
		return
	}
	if next := Percent(live()); next != p.percent {
		p.percent = next
		debug.SetGCPercent(next)
	}
	p.arm()
}

// live is the heap's live bytes as the last collection measured them (0
// before the first, or where this Go does not have the metric).
func live() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
