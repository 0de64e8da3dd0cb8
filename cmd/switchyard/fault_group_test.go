package main

// Fault tests of several processes sharing one group and one queue:
// members joining, leaving cleanly and dying mid-stream (I1, I2, I4, I7),
// and a process frozen by SIGSTOP past its lease (I4).

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// TestFaultGroupChurn: three processes share a 6-partition topic in one
// consumer group while records arrive; members leave cleanly (SIGTERM)
// and join, and one dies mid-stream (kill -9, with a request of it open
// at the target; one more every 5 cycles in the long run). In the end
// every record is exactly one succeeded job, the stored offsets are the
// end offsets, and no job was ever in two processes' hands at once.
func TestFaultGroupChurn(t *testing.T) {
	t.Parallel()
	// The classic protocol, and KIP-848's broker-side assignment, which
	// Kafka 4.x serves.
	for _, protocol := range []string{"classic", "consumer"} {
		t.Run(protocol, func(t *testing.T) {
			t.Parallel()
			groupChurn(t, protocol)
		})
	}
}

func groupChurn(t *testing.T, protocol string) {
	const (
		partitions = 6
		burst      = 20
	)
	// What franz-go logs once a member is in the group.
	joined := `"msg":"joined`
	if protocol == "consumer" {
		joined = `"msg":"new group session begun`
	}
	cycles := faultCycles(t, 5)
	records := 240 * cycles
	schema := testenv.Schema(t)
	store := testenv.Store(t, schema)
	topic := testenv.Topic(t, partitions)
	group := testenv.Name("g")
	tg := newTarget(t)
	var spans spanLog
	var gate holdGate
	// A little work per job, so that leaving members have jobs in flight.
	tg.setBehaviour(spans.wrap(func(r *http.Request, _ call) int {
		select {
		case <-time.After(rand.N(60 * time.Millisecond)):
		case <-r.Context().Done():
		}
		gate.wait(r)
		return 0
	}))
	// Cycles 2, 7, 12, … kill a member (one in the short run), while
	// records still arrive; a kill may cost a job an attempt, nothing else
	// may.
	isKill := func(i int) bool { return i%5 == 2 || cycles < 2 && i == cycles }
	kills := 0
	for i := 1; i <= cycles; i++ {
		if isKill(i) {
			kills++
		}
	}
	cfg := writeConfig(t, testConfig{Topic: topic, Group: group, Schema: schema, TargetURL: tg.URL(),
		Dedupe: true, MaxAttempts: 2 + kills, Lease: 2 * time.Second, GroupProtocol: protocol})

	// Records arrive for about 3s per churn cycle, longer than a cycle
	// takes, so that every cycle meets work in flight.
	tick := time.Duration(cycles) * 3 * time.Second / time.Duration(records/burst)
	stop := make(chan struct{})
	var stopOnce sync.Once
	done := make(chan struct{})
	var recs []producedRec
	var produceErr error
	brokers := testenv.Brokers(t)
	go func() {
		defer close(done)
		recs, produceErr = produceInBursts(topic, brokers, partitions, records, burst, tick, stop)
	}()
	t.Cleanup(func() { stopOnce.Do(func() { close(stop) }); <-done })

	started := 0
	startMember := func() *proc {
		started++
		return startRun(t, fmt.Sprintf("run-%d", started-1), cfg)
	}
	live := []*proc{startMember(), startMember(), startMember()}
	pick := func(except *proc) int {
		for {
			if i := rand.N(len(live)); live[i] != except {
				return i
			}
		}
	}
	remove := func(i int) { live = append(live[:i], live[i+1:]...) }

	var leaves, joins, consumingLeaves int
	// leave stops a member with SIGTERM (I7: it exits 0).
	leave := func(j int) {
		if strings.Contains(live[j].log.String(), `"added":"topic`) {
			consumingLeaves++
		}
		term(t, live[j], 30*time.Second)
		remove(j)
		leaves++
	}
	var killed []kill9
	for i := 1; i <= cycles; i++ {
		select {
		case <-time.After(500*time.Millisecond + rand.N(time.Second)):
		case <-done:
		}
		for _, p := range live {
			if p.exited() {
				t.Fatalf("%s exited by itself with code %d", p.name, p.code)
			}
		}
		switch {
		case isKill(i):
			// A member dies: its partitions move once its session ends
			// (evicted here for speed), its leases expire and the jobs
			// it held run again elsewhere.
			j, k := gate.killBusy(t, &spans, live)
			victim := live[j]
			killed = append(killed, k)
			if protocol == "classic" {
				// KIP-848 members are fenced by the broker once their
				// session times out (kafka.session_timeout, 10s); there is
				// no LeaveGroup to send on a dead member's behalf.
				evictDead(t, group, victim)
			}
			remove(j)
			live = append(live, startMember())
			joins++
		case i%2 == 1:
			// A member leaves cleanly, then another joins.
			leave(pick(nil))
			live = append(live, startMember())
			joins++
		default:
			// A member joins (four for a while), then another leaves.
			p := startMember()
			joins++
			live = append(live, p)
			p.waitLog(30*time.Second, joined)
			leave(pick(p))
		}
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the producer did not finish within 2m")
	}
	if produceErr != nil {
		t.Fatalf("produce: %v", produceErr)
	}
	if len(recs) != records {
		t.Fatalf("produced %d records, want %d", len(recs), records)
	}

	end := endOffsets(t, testenv.Admin(t), topic)
	testenv.Eventually(t, 2*time.Minute, "stored offsets at the end offsets and no job left to run", func() bool {
		return offsetsCovered(storedOffsets(t, store, group, topic), end) &&
			testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state IN ('waiting', 'queued', 'running', 'retrying')`) == 0
	})
	stored := storedOffsets(t, store, group, topic)
	for part := int32(0); part < partitions; part++ {
		if stored[part] != end[part] {
			t.Errorf("partition %d: stored next offset %d, end offset %d", part, stored[part], end[part])
		}
	}
	for _, p := range live {
		term(t, p, 30*time.Second)
	}

	rows := jobs(t, store)
	produced := map[[2]int64]bool{}
	bySource := map[[2]int64]producedRec{}
	for _, r := range recs {
		produced[[2]int64{int64(r.partition), r.offset}] = true
		bySource[[2]int64{int64(r.partition), r.offset}] = r
	}
	lost, dups := sourceCheck(t, store, topic, rows, produced)
	all := spans.all()
	callsOf := map[int64][]span{}
	for _, s := range all {
		callsOf[s.JobID] = append(callsOf[s.JobID], s)
	}
	for _, j := range rows {
		if j.State != "succeeded" {
			t.Errorf("job %d (%s) is %s after %d attempts, want succeeded; last error %q",
				j.ID, j.DedupeKey, j.State, j.Attempts, j.LastError)
		}
		r := bySource[[2]int64{int64(j.Partition), j.Offset}]
		if len(callsOf[j.ID]) == 0 {
			t.Errorf("job %d (%s) never reached the target", j.ID, j.DedupeKey)
		}
		for _, c := range callsOf[j.ID] {
			if want := fmt.Sprintf("%s/%d/%d", topic, j.Partition, j.Offset); c.Source != want || !bytes.Equal(c.Body, r.value) {
				t.Errorf("job %d: call with source %q body %q, want %q and %q", j.ID, c.Source, c.Body, want, r.value)
			}
		}
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM dlq_entries`); n != 0 {
		t.Errorf("%d DLQ entries, want none", n)
	}
	// The job the kill cut off ran again, under a new lease.
	killedMidCall(t, &spans, killed)
	// Strictly: no job ever had two requests open at once, not even one
	// from a holder whose lease was lost (nothing here stalls a process
	// past its lease).
	stale, violations := overlapCheck(byJob(all))
	for _, v := range violations {
		t.Errorf("I4: two holders of one job at once: %s", v)
	}
	if stale > 0 {
		t.Errorf("I4: %d times a job was re-claimed while its holder still had it at the target", stale)
	}
	accepted, why := staleAccepted(rows, all)
	for _, w := range why {
		t.Errorf("I4: %s", w)
	}
	t.Logf("%d cycles: %d clean leaves (%d of members that had been assigned partitions), %d joins, %d kill -9; %d processes in all",
		cycles, leaves, consumingLeaves, joins, len(killed), started)
	faultSummary{produced: len(recs), jobs: len(rows), lost: lost, duplicateJobs: dups,
		orderViolations: len(violations) + stale, staleCompletionsAccepted: accepted, redeliveries: redeliveries(all)}.report(t, "group_churn_"+protocol)
}

// TestFaultSIGSTOPPastLease: a process frozen (SIGSTOP) while the target
// holds its requests loses its leases; a second process re-claims the
// jobs with higher tokens. Job J1's new attempt succeeds before the
// frozen process wakes, as in a GC pause; job J2's new attempt is still
// running when the woken process's stale completion arrives, so only the
// fencing token stands between it and the row. Both stale completions
// must be rejected and each job end succeeded once, after 2 attempts.
func TestFaultSIGSTOPPastLease(t *testing.T) {
	t.Parallel()
	schema := testenv.Schema(t)
	store := testenv.Store(t, schema)
	topic := testenv.Topic(t, 1)
	group := testenv.Name("g")
	tg := newTarget(t)
	var spans spanLog
	type held struct {
		c       call
		release chan struct{}
	}
	holds := make(chan held, 8)
	tg.setBehaviour(spans.wrap(func(r *http.Request, c call) int {
		// J1's second attempt succeeds at once; every other first or
		// second attempt is held until the test releases it.
		if c.Attempt > 2 || c.Attempt == 2 && bytes.Contains(c.Body, []byte(`"J1"`)) {
			return 0
		}
		h := held{c: c, release: make(chan struct{})}
		holds <- h
		select {
		case <-h.release:
		case <-r.Context().Done():
		}
		return 0
	}))
	cfg := writeConfig(t, testConfig{Group: group, Schema: schema, Listen: "127.0.0.1:0", Body: fmt.Sprintf(`queues:
  q: {concurrency: 4, lease: 2s, max_runtime: 1m, poll_interval: 100ms}
routes:
  - topic: %q
    kind: k
    queue: q
    dedupe: {field: id}
    max_attempts: 3
    backoff: {initial: 50ms, max: 200ms}
    target: {http: {url: %q, timeout: 1m}}
`, topic, tg.URL())})
	nextHold := func(what string) held {
		t.Helper()
		select {
		case h := <-holds:
			return h
		case <-time.After(30 * time.Second):
			t.Fatalf("%s never reached the target", what)
			return held{}
		}
	}

	p1 := startRun(t, "run-1", cfg)
	addr1 := adminAddr(t, p1)
	produced := testenv.Produce(t, topic,
		&kgo.Record{Partition: 0, Value: []byte(`{"id":"J1"}`)},
		&kgo.Record{Partition: 0, Value: []byte(`{"id":"J2"}`)})
	first := map[string]held{}
	for range 2 {
		h := nextHold("the first attempts of J1 and J2")
		first[string(h.c.Body)] = h
	}
	a1, a2 := first[`{"id":"J1"}`], first[`{"id":"J2"}`]
	if a1.c.JobID == 0 || a2.c.JobID == 0 || a1.c.Attempt != 1 || a2.c.Attempt != 1 {
		t.Fatalf("first attempts: %v and %v", a1.c, a2.c)
	}
	j1, j2 := a1.c.JobID, a2.c.JobID

	// Freeze run-1 with both requests in hand; a work-only process (it
	// needs no partitions) takes over once the leases expire.
	stopProc(t, p1, syscall.SIGSTOP)
	frozen := time.Now()
	p2 := startRun(t, "run-2", cfg, "--role", "work")

	// J1: the row is re-claimed (a new token), and the target receives a
	// second call carrying that higher token, which succeeds.
	testenv.Eventually(t, 30*time.Second, "J1 to be re-claimed with a new token", func() bool {
		return jobByID(t, store, j1).Token != a1.c.Token
	})
	testenv.Eventually(t, 30*time.Second, "J1 to succeed on run-2", func() bool {
		return jobByID(t, store, j1).State == "succeeded"
	})
	after1 := jobByID(t, store, j1)
	calls1 := spans.ofJob(j1)
	if len(calls1) != 2 || calls1[1].Attempt != 2 || calls1[1].Token != after1.Token || calls1[1].Token <= a1.c.Token {
		t.Fatalf("J1: calls %v, row token %d; want a second call with attempt 2 and the row's new token above %d",
			calls1, after1.Token, a1.c.Token)
	}
	if after1.Attempts != 2 {
		t.Errorf("J1: attempts %d after the re-claim, want 2", after1.Attempts)
	}
	// J2: re-claimed too, and its new holder's request is held.
	b2 := nextHold("J2's second attempt")
	if b2.c.JobID != j2 || b2.c.Attempt != 2 || b2.c.Token <= a2.c.Token {
		t.Fatalf("J2's second call %v; want attempt 2 with a token above %d", b2.c, a2.c.Token)
	}
	running2 := jobByID(t, store, j2)
	if running2.State != "running" || running2.Token != b2.c.Token {
		t.Fatalf("J2: state %s token %d; want running under run-2's token %d", running2.State, running2.Token, b2.c.Token)
	}

	// Answer run-1's stale requests with 200 while it is frozen (the
	// answers wait in its sockets), then wake it. Its heartbeat and its
	// completions race on waking; the jobs table is locked meanwhile, so
	// that the heartbeat (which would cancel the requests) cannot finish
	// before the answers are read and the completions submitted: then the
	// stale completions reach the database for certain, J2's while run-2
	// still holds J2, where only the fencing token can reject it.
	close(a1.release)
	close(a2.release)
	testenv.Eventually(t, 10*time.Second, "the stale requests to be answered", func() bool {
		for _, s := range append(spans.ofJob(j1)[:1], spans.ofJob(j2)[:1]...) {
			if s.Close.IsZero() {
				return false
			}
		}
		return true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lock, err := store.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(ctx, `LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	stopProc(t, p1, syscall.SIGCONT)
	t.Logf("run-1 was frozen for %s", time.Since(frozen).Round(time.Millisecond))
	// A completion is counted as its handler's outcome (succeeded) when it
	// is submitted, and as lease_lost once rejected. The lock is held until
	// both are submitted or for 1s, well under run-2's lease, whose
	// heartbeat it also holds up; fewer is no failure (see below).
	submitted := 0.0
	testenv.Until(time.Second, func() bool {
		submitted = metricSum(t, addr1, "switchyard_job_attempts_total", `outcome="succeeded"`)
		return submitted >= 2
	})
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// Settled: both stale attempts' handler times observed as lease_lost —
	// or a row changed, which the checks below report. The attempts are
	// counted by run-2, which rescued their leases, and not again by run-1.
	testenv.Eventually(t, 30*time.Second, `run-1 to settle both stale attempts as outcome="lease_lost"`, func() bool {
		return metricSum(t, addr1, "switchyard_job_duration_seconds_count", `outcome="lease_lost"`) >= 2 ||
			!sameRow(jobByID(t, store, j1), after1) || !sameRow(jobByID(t, store, j2), running2)
	})
	if n1, n2 := metricSum(t, addr1, "switchyard_job_attempts_total", `outcome="lease_lost"`),
		metricSum(t, adminAddr(t, p2), "switchyard_job_attempts_total", `outcome="lease_lost"`); n1 != 0 || n2 != 2 {
		t.Errorf("lease_lost attempts counted by run-1 %v, by run-2 %v; want 0 and 2 (once, by the rescuer)", n1, n2)
	}
	t.Logf("run-1 submitted %v of its 2 stale completions (a heartbeat that won the race cancels instead); log says lease lost: %v",
		submitted, strings.Contains(p1.log.String(), "lease lost"))

	stale := 0
	if got := jobByID(t, store, j1); !sameRow(got, after1) {
		stale++
		t.Errorf("I4: J1 changed after run-1 woke: %+v, was %+v", got, after1)
	}
	if got := jobByID(t, store, j2); !sameRow(got, running2) {
		stale++
		t.Errorf("I4: J2 changed by run-1's stale completion: %+v, was %+v (still run-2's)", got, running2)
	}

	close(b2.release)
	testenv.Eventually(t, 30*time.Second, "J2 to succeed on run-2", func() bool {
		return jobByID(t, store, j2).State == "succeeded"
	})
	term(t, p2, 30*time.Second)
	term(t, p1, 30*time.Second)

	rows := jobs(t, store)
	for _, j := range rows {
		if j.State != "succeeded" || j.Attempts != 2 {
			t.Errorf("job %d (%s): state %s attempts %d, want succeeded after 2 attempts", j.ID, j.DedupeKey, j.State, j.Attempts)
		}
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM dlq_entries`); n != 0 {
		t.Errorf("%d DLQ entries, want none", n)
	}
	end := endOffsets(t, testenv.Admin(t), topic)
	if got := storedOffsets(t, store, group, topic); !offsetsCovered(got, end) {
		t.Errorf("stored offsets %v, end offsets %v", got, end)
	}
	src := map[[2]int64]bool{}
	for _, r := range produced {
		src[[2]int64{int64(r.Partition), r.Offset}] = true
	}
	lost, dups := sourceCheck(t, store, topic, rows, src)
	all := spans.all()
	superseded, violations := overlapCheck(byJob(all))
	for _, v := range violations {
		t.Errorf("I4: %s", v)
	}
	if superseded != 2 {
		t.Errorf("%d superseded stale holders, want 2 (J1's and J2's first attempts): %v", superseded, all)
	}
	accepted, why := staleAccepted(rows, all)
	for _, w := range why {
		t.Errorf("I4: %s", w)
	}
	faultSummary{produced: len(produced), jobs: len(rows), lost: lost, duplicateJobs: dups,
		orderViolations: len(violations), staleCompletionsAccepted: stale + accepted, redeliveries: redeliveries(all)}.report(t, "sigstop_past_lease")
}
