package bench

import (
	"bufio"
	"bytes"
	"os"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"
)

// withRSS runs fn while sampling the process's resident set size every
// 50ms, notes the phase's peak and keeps the highest for
// dispatcher_rss_mib_max. The engine runs inside this process, so this is
// the dispatcher's RSS plus the little the bench holds meanwhile; memory
// the bench freed beforehand (records it built) is handed back to the OS
// first so that it does not count. It also keeps the CPU time the
// process spent in fn (e.phaseCPU): on two shared cores, what the
// process spends is what Postgres does not get.
func (e *env) withRSS(phase string, fn func() error) error {
	debug.FreeOSMemory()
	stop, done := make(chan struct{}), make(chan int64)
	go func() {
		var peak int64
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			peak = max(peak, readRSS())
			select {
			case <-stop:
				done <- peak
				return
			case <-t.C:
			}
		}
	}()
	cpu := processCPU()
	err := fn()
	e.phaseCPU = processCPU() - cpu
	close(stop)
	peak := <-done
	e.rssKiB = max(e.rssKiB, peak)
	e.note("rss max during %s: %d MiB", phase, peak/1024)
	return err
}

// readRSS reads VmRSS from /proc/self/status in KiB; 0 where there is no
// /proc.
func readRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("VmRSS:")); ok {
			n, _ := strconv.ParseInt(string(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(rest), []byte("kB")))), 10, 64)
			return n
		}
	}
	return 0
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
