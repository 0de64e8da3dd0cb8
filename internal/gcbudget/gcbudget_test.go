package gcbudget

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercentStartsTheNextCollectionAtFloor(t *testing.T) {
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, MaxPercent},            // no collection yet
		{10 << 20, MaxPercent},     // 4 × 10 MiB is under Floor
		{25 << 20, 300},            // 4 × 25 MiB is Floor
		{40 << 20, 150},            // 2.5 × 40 MiB is Floor
		{50 << 20, MinPercent},     // 2 × 50 MiB is Floor
		{1 << 30, MinPercent},      // a large heap: Go's default
		{Floor * 10, MinPercent},   // never below the default
		{Floor / 1000, MaxPercent}, // never above MaxPercent
	} {
		if got := Percent(c.live); got != c.want {
			t.Errorf("Percent(%d MiB) = %d, want %d", c.live>>20, got, c.want)
		}
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
				t.Errorf("Start paced the collector with %s=%s", env, value)
			}
			if after := debug.SetGCPercent(before); after != before {
				t.Errorf("GOGC moved from %d to %d", before, after)
			}
		})
	}
}

// After a collection the percent follows the heap it left: a live heap
// of more than half of Floor is collected at Go's default pace.
func TestTheCollectorFollowsTheLiveHeap(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	old := gcPercent()
	t.Cleanup(func() { debug.SetGCPercent(old) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if !Start(ctx) {
		t.Fatal("Start did nothing with neither GOGC nor GOMEMLIMIT set")
	}
	if got := gcPercent(); got != MaxPercent {
		t.Fatalf("GOGC = %d at start, want %d", got, MaxPercent)
	}
	held := make([]byte, 3*Floor/4) // a live heap of three quarters of Floor
	deadline := time.Now().Add(10 * time.Second)
	for gcPercent() != MinPercent && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond) // the cleanup runs on its own goroutine
	}
	if got := gcPercent(); got != MinPercent {
		t.Errorf("GOGC = %d with %d MiB live, want %d", got, len(held)>>20, MinPercent)
	}
	runtime.KeepAlive(held)
	held = nil
	for gcPercent() != MaxPercent && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if got := gcPercent(); got != MaxPercent {
		t.Errorf("GOGC = %d once the heap is small again, want %d", got, MaxPercent)
	}
}

// gcPercent reads GOGC without setting it: reading it through
// debug.SetGCPercent(-1) and back raced with the pacer's own
// SetGCPercent on the cleanup goroutine, and restored the value the pacer
// had just replaced (CI saw GOGC = 300 with 75 MiB live).
func gcPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}
