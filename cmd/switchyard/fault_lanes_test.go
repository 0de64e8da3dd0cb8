package main

// Fault test of per-key lanes (I3) across crashes: two processes run an
// ordered route while one of them is killed with SIGKILL mid-job, again
// and again, and the order is checked from the calls the target received.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// versionRound is one record of every key at version v, keyed by the
// record key (so that a key's records share a partition, in order).
func versionRound(keys, v int) []*kgo.Record {
	recs := make([]*kgo.Record, 0, keys)
	for k := range keys {
		key := fmt.Sprintf("k%02d", k)
		recs = append(recs, &kgo.Record{Key: []byte(key), Value: fmt.Appendf(nil, `{"k":%q,"v":%d}`, key, v)})
	}
	return recs
}

// TestFaultKillMidLane checks I3 across crashes: an ordered route with
// newer-wins versions, 50 keys × 10 increasing versions on 3 partitions,
// two processes, one of them killed with SIGKILL while it has a job at
// the target, several times, and restarted. From the target's calls: no
// two calls of one key are ever open at once (unless the earlier is a
// stale holder superseded by a higher token), each key's calls start at
// non-decreasing versions, every version is delivered; from the rows:
// every job succeeded (none skipped: versions only increase), once.
func TestFaultKillMidLane(t *testing.T) {
	t.Parallel()
	const (
		partitions = 3
		keys       = 50
		versions   = 10
	)
	cycles := faultCycles(t, 5)
	schema := testenv.Schema(t)
	store := testenv.Store(t, schema)
	topic := testenv.Topic(t, partitions)
	group := testenv.Name("g")
	tg := newTarget(t)
	var spans spanLog
	var gate holdGate
	tg.setBehaviour(spans.wrap(func(r *http.Request, _ call) int {
		select {
		case <-time.After(5*time.Millisecond + rand.N(15*time.Millisecond)):
		case <-r.Context().Done():
		}
		gate.wait(r)
		return 0
	}))
	// Kills alone must never exhaust a job's attempts.
	cfg := writeConfig(t, testConfig{Group: group, Schema: schema, Body: fmt.Sprintf(`queues:
  q: {concurrency: 8, lease: 2s, max_runtime: 1m, poll_interval: 100ms}
routes:
  - topic: %q
    kind: k
    queue: q
    ordered: true
    version: {field: v, policy: newer}
    max_attempts: %d
    backoff: {initial: 50ms, max: 200ms}
    target: {http: {url: %q, timeout: 5s}}
`, topic, cycles+3, tg.URL())})

	cl, err := kgo.NewClient(kgo.SeedBrokers(testenv.Brokers(t)...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	started := 0
	startMember := func() *proc {
		started++
		return startRun(t, fmt.Sprintf("run-%d", started-1), cfg)
	}
	live := []*proc{startMember(), startMember()}
	// Round v brings version v of every key. The kills are spread over the
	// rounds but the last (so that work is left to cut off), each right
	// after a round, on a process that has a job at the target.
	var recs []*kgo.Record
	var killed []kill9
	for v := 1; v <= versions; v++ {
		round := versionRound(keys, v)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := cl.ProduceSync(ctx, round...).FirstErr()
		cancel()
		if err != nil {
			t.Fatalf("produce version %d: %v", v, err)
		}
		recs = append(recs, round...)
		for v < versions && len(killed) < cycles*v/(versions-1) {
			i, k := gate.killBusy(t, &spans, live)
			killed = append(killed, k)
			evictDead(t, group, live[i])
			live[i] = startMember()
		}
		select {
		case <-time.After(100*time.Millisecond + rand.N(300*time.Millisecond)):
		case <-t.Context().Done():
		}
	}

	end := endOffsets(t, testenv.Admin(t), topic)
	testenv.Eventually(t, 2*time.Minute, "stored offsets at the end offsets and no job left to run", func() bool {
		return offsetsCovered(storedOffsets(t, store, group, topic), end) &&
			testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state IN ('waiting', 'queued', 'running', 'retrying')`) == 0
	})
	for _, p := range live {
		term(t, p, 30*time.Second)
	}

	rows := jobs(t, store)
	produced := map[[2]int64]bool{}
	bySource := map[[2]int64]*kgo.Record{}
	for _, r := range recs {
		produced[[2]int64{int64(r.Partition), r.Offset}] = true
		bySource[[2]int64{int64(r.Partition), r.Offset}] = r
	}
	lost, dups := sourceCheck(t, store, topic, rows, produced)
	states := map[string]int{}
	versionOf := map[int64]int64{}
	for _, j := range rows {
		states[j.State]++
		versionOf[j.ID] = j.Version
		if j.State != "succeeded" {
			t.Errorf("job %d (key %s version %d) is %s, want succeeded; last error %q", j.ID, j.Key, j.Version, j.State, j.LastError)
		}
		r := bySource[[2]int64{int64(j.Partition), j.Offset}]
		if r == nil {
			continue
		}
		var v struct {
			K string `json:"k"`
			V int64  `json:"v"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil || j.Key != string(r.Key) || j.Version != v.V {
			t.Errorf("job %d has key %q version %d; its record has key %q value %s", j.ID, j.Key, j.Version, r.Key, r.Value)
		}
	}

	all := spans.all()
	byKey := map[string][]span{}
	for _, s := range all {
		byKey[s.Key] = append(byKey[s.Key], s)
		if s.Version != versionOf[s.JobID] {
			t.Errorf("call %v carries Switchyard-Version %d, its job has version %d", s, s.Version, versionOf[s.JobID])
		}
	}
	// No two calls of a key open at once, unless the first lost its lease
	// and a higher token superseded it.
	stale, violations := overlapCheck(byKey)
	for _, v := range violations {
		t.Errorf("I3: %s", v)
	}
	// Calls of a key start at non-decreasing versions, and every version
	// reached the target.
	backwards := 0
	for key, ss := range byKey {
		sort.Slice(ss, func(i, j int) bool { return ss[i].Open.Before(ss[j].Open) })
		seen := map[int64]bool{}
		high := int64(0)
		for _, s := range ss {
			if s.Version < high {
				backwards++
				t.Errorf("I3: key %s: call %v started after a call at version %d", key, s, high)
			}
			high = max(high, s.Version)
			seen[s.Version] = true
		}
		for v := int64(1); v <= versions; v++ {
			if !seen[v] {
				t.Errorf("key %s: version %d never reached the target", key, v)
			}
		}
	}
	if len(byKey) != keys {
		t.Errorf("calls for %d keys, want %d", len(byKey), keys)
	}
	// Each job cut off at the target by a kill ran again under a new lease.
	cut := killedMidCall(t, &spans, killed)
	accepted, why := staleAccepted(rows, all)
	for _, w := range why {
		t.Errorf("I4: %s", w)
	}
	t.Logf("%d kills, cutting off %d calls in flight; %d processes in all; states %v; %d superseded stale holders",
		len(killed), cut, started, states, stale)
	faultSummary{produced: len(recs), jobs: len(rows), lost: lost, duplicateJobs: dups,
		orderViolations: len(violations) + backwards, staleCompletionsAccepted: accepted,
		redeliveries: redeliveries(all)}.report(t, "kill_mid_lane")
}
