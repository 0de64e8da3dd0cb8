package gcbudget

import (
	"context"
	"runtime"
	"runtime/debug"
	"testing"
)

func TestLimitIsFloorUntilTheHeapNeedsMore(t *testing.T) {
	for _, c := range []struct {
		u    Usage
		want int64
	}{
		{Usage{}, Floor},
		{Usage{Live: 20 << 20, NotHeap: 8 << 20}, Floor},
		// Twice the live heap and what is not heap, with slack: the room
		// the default pace gives a large heap.
		{Usage{Live: 1 << 30, NotHeap: 80 << 20}, 2<<30 + 80<<20 + slack},
	} {
		if got := Limit(c.u); got != c.want {
			t.Errorf("Limit(%+v) = %d, want %d", c.u, got, c.want)
		}
	}
}

// The runtime's figures are readable on this Go: a live heap (known
// after a collection) and some memory that is not heap (every goroutine
// has a stack).
func TestReadSeesTheRuntime(t *testing.T) {
	runtime.GC()
	u := read()
	if u.Live == 0 || u.NotHeap == 0 {
		t.Errorf("read() = %+v: a metric is missing", u)
	}
}

// An operator's GOGC or GOMEMLIMIT is left alone.
func TestStartLeavesAChosenSettingAlone(t *testing.T) {
	for _, env := range []string{"GOGC", "GOMEMLIMIT"} {
		t.Run(env, func(t *testing.T) {
			value := map[string]string{"GOGC": "150", "GOMEMLIMIT": "1GiB"}[env]
			t.Setenv(env, value)
			before := debug.SetGCPercent(-1)
			debug.SetGCPercent(before)
			if Start(context.Background()) {
				t.Errorf("Start applied the budget with %s=%s", env, value)
			}
			if after := debug.SetGCPercent(before); after != before {
				t.Errorf("GOGC moved from %d to %d", before, after)
			}
		})
	}
}

func TestStartAppliesTheBudget(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	oldPercent, oldLimit := debug.SetGCPercent(-1), debug.SetMemoryLimit(-1)
	debug.SetGCPercent(oldPercent)
	t.Cleanup(func() {
		debug.SetGCPercent(oldPercent)
		debug.SetMemoryLimit(oldLimit)
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if !Start(ctx) {
		t.Fatal("Start did nothing with neither GOGC nor GOMEMLIMIT set")
	}
	if got := debug.SetGCPercent(Percent); got != Percent {
		t.Errorf("GOGC = %d, want %d", got, Percent)
	}
	if got := debug.SetMemoryLimit(-1); got < Floor {
		t.Errorf("memory limit = %d, want at least Floor (%d)", got, Floor)
	}
}
