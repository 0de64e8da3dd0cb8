package main

// End-to-end tests of the SPEC §2 invariants against the real binary, the
// real Kafka broker and the real Postgres: processes are killed with
// SIGKILL or stopped with SIGTERM, and the invariants are checked from the
// outside, from rows, stored offsets and the calls the target received.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// producedRec is one record the test wrote, with where it landed.
type producedRec struct {
	id        string
	value     []byte
	partition int32
	offset    int64
}

// produceInBursts writes n records {"id":"r<i>"} round-robin over the
// partitions, burst records at a time, one burst per tick, until done or
// stop closes. It runs on its own goroutine, so it reports rather than
// fails.
func produceInBursts(topic string, brokers []string, partitions, n, burst int, tick time.Duration,
	stop <-chan struct{}) ([]producedRec, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	var out []producedRec
	for i := 0; i < n; {
		var recs []*kgo.Record
		for ; i < n && len(recs) < burst; i++ {
			recs = append(recs, &kgo.Record{Partition: int32(i % partitions),
				Value: fmt.Appendf(nil, `{"id":"r%d"}`, i)})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := cl.ProduceSync(ctx, recs...).FirstErr()
		cancel()
		if err != nil {
			return out, err
		}
		for _, r := range recs {
			out = append(out, producedRec{id: recordID(r.Value), value: r.Value,
				partition: r.Partition, offset: r.Offset})
		}
		select {
		case <-stop:
			return out, errors.New("stopped before the end")
		case <-ticker.C:
		}
	}
	return out, nil
}

// checkStoredPrefix is I1 checked while no process runs: below each
// partition's stored next offset, every record has its job row (offsets of
// a non-transactional topic are dense, and every record here is a
// distinct job), and nothing is parked.
func checkStoredPrefix(t *testing.T, s *pgstore.Store, group, topic string) {
	t.Helper()
	for p, next := range storedOffsets(t, s, group, topic) {
		n := testenv.Count(t, s, `SELECT count(*) FROM all_jobs WHERE src_topic = $1 AND src_partition = $2 AND src_offset < $3`,
			topic, p, next)
		if int64(n) != next {
			t.Fatalf("I1: partition %d has stored next offset %d but only %d job rows below it", p, next, n)
		}
	}
	if n := testenv.Count(t, s, `SELECT count(*) FROM dlq_entries`); n != 0 {
		t.Fatalf("%d DLQ entries, want none", n)
	}
}

// TestFaultKill9WhileProducing checks I1 (nothing lost) and I2 (no
// duplicate jobs) while records arrive and the process is killed with
// SIGKILL at random moments and restarted at once.
func TestFaultKill9WhileProducing(t *testing.T) {
	t.Parallel()
	const (
		partitions = 3
		records    = 600
		burst      = 20
	)
	cycles := faultCycles(t, 5)
	schema := testenv.Schema(t)
	store := testenv.Store(t, schema)
	topic := testenv.Topic(t, partitions)
	group := testenv.Name("g")
	tg := newTarget(t)
	// A little work per job, so that kills find jobs in flight.
	tg.setBehaviour(func(r *http.Request, _ call) int {
		select {
		case <-time.After(rand.N(60 * time.Millisecond)):
		case <-r.Context().Done():
		}
		return 0
	})
	// Kills alone must never exhaust a job's attempts: this test is about
	// ingest, and every job must end succeeded.
	cfg := writeConfig(t, testConfig{Topic: topic, Group: group, Schema: schema, TargetURL: tg.URL(),
		Dedupe: true, MaxAttempts: cycles + 2, Lease: 2 * time.Second})

	// Spread the records over about the time the kill cycles take.
	tick := time.Duration(cycles) * time.Second / (records / burst)
	stop := make(chan struct{})
	var stopOnce sync.Once
	stopProducer := func() { stopOnce.Do(func() { close(stop) }) }
	done := make(chan struct{})
	var recs []producedRec
	var produceErr error
	brokers := testenv.Brokers(t)
	go func() {
		defer close(done)
		recs, produceErr = produceInBursts(topic, brokers, partitions, records, burst, tick, stop)
	}()
	t.Cleanup(func() { stopProducer(); <-done })

	p := startRun(t, "run-0", cfg)
	consuming := 0 // kills of a process that had been assigned partitions
	for i := 1; i <= cycles; i++ {
		select {
		case <-time.After(300*time.Millisecond + rand.N(1200*time.Millisecond)):
		case <-p.done:
			t.Fatalf("%s exited by itself with code %d", p.name, p.code)
		}
		p.kill()
		if strings.Contains(p.log.String(), "new group session begun") {
			consuming++
		}
		checkStoredPrefix(t, store, group, topic)
		evictMembers(t, group, p)
		p = startRun(t, fmt.Sprintf("run-%d", i), cfg)
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the producer did not finish within 2m")
	}
	if produceErr != nil {
		t.Fatalf("produce: %v", produceErr)
	}

	// The last process drains everything.
	adm := testenv.Admin(t)
	end := endOffsets(t, adm, topic)
	testenv.Eventually(t, 2*time.Minute, "stored offsets at the end offsets and every job succeeded", func() bool {
		return offsetsCovered(storedOffsets(t, store, group, topic), end) &&
			testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'succeeded'`) == records
	})

	stored := storedOffsets(t, store, group, topic)
	for part := int32(0); part < partitions; part++ {
		if stored[part] != end[part] {
			t.Errorf("partition %d: stored next offset %d, end offset %d", part, stored[part], end[part])
		}
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM dlq_entries`); n != 0 {
		t.Errorf("%d DLQ entries, want none", n)
	}
	rows := jobs(t, store)
	if len(rows) != records {
		t.Errorf("%d job rows for %d records", len(rows), records)
	}
	type src struct {
		partition int32
		offset    int64
	}
	bySource := map[src]jobRow{}
	byDedupe := map[string]jobRow{}
	for _, j := range rows {
		if prev, dup := bySource[src{j.Partition, j.Offset}]; dup {
			t.Errorf("I2: jobs %d and %d both come from %d/%d", prev.ID, j.ID, j.Partition, j.Offset)
		}
		bySource[src{j.Partition, j.Offset}] = j
		if prev, dup := byDedupe[j.DedupeKey]; dup {
			t.Errorf("I2: jobs %d and %d both have dedupe key %q", prev.ID, j.ID, j.DedupeKey)
		}
		byDedupe[j.DedupeKey] = j
		if j.State != "succeeded" {
			t.Errorf("job %d (%s) is %s, want succeeded; last error %q", j.ID, j.DedupeKey, j.State, j.LastError)
		}
	}
	callsByJob := map[int64][]call{}
	for _, c := range tg.received() {
		callsByJob[c.JobID] = append(callsByJob[c.JobID], c)
	}
	redelivered, extra := 0, 0
	for _, r := range recs {
		j, ok := bySource[src{r.partition, r.offset}]
		if !ok {
			t.Errorf("I1: record %s at %d/%d has no job row", r.id, r.partition, r.offset)
			continue
		}
		if j.DedupeKey != r.id || !bytes.Equal(j.Payload, r.value) {
			t.Errorf("job %d at %d/%d has dedupe key %q and payload %q; want %q and %q",
				j.ID, r.partition, r.offset, j.DedupeKey, j.Payload, r.id, r.value)
		}
		if _, ok := byDedupe[r.id]; !ok {
			t.Errorf("no job with dedupe key %q", r.id)
		}
		calls := callsByJob[j.ID]
		if len(calls) == 0 {
			t.Errorf("job %d (%s) succeeded but the target never received it", j.ID, r.id)
			continue
		}
		for _, c := range calls {
			if want := fmt.Sprintf("%s/%d/%d", topic, r.partition, r.offset); c.Source != want || !bytes.Equal(c.Body, r.value) {
				t.Errorf("job %d: call with source %q body %q; want %q and %q", j.ID, c.Source, c.Body, want, r.value)
			}
		}
		if len(calls) > 1 {
			redelivered++
			extra += len(calls) - 1
		}
	}
	if len(recs) != records {
		t.Errorf("produced %d records, want %d", len(recs), records)
	}
	t.Logf("%d kill cycles (%d of a consuming process): %d records, %d jobs; %d jobs delivered more than once (%d extra deliveries)",
		cycles, consuming, len(recs), len(rows), redelivered, extra)
}

// TestFaultKill9DuringIngestBacklog checks I1 and I2 where ingest stores
// large polls, each in two transactions at once (pgstore.IngestSplit):
// the process is killed with SIGKILL at random moments while it works
// through a backlog, and after each kill every record below each
// partition's stored offset has its job row, so that a second half never
// committed without its first. The last process drains the rest; every
// record ends as exactly one job.
func TestFaultKill9DuringIngestBacklog(t *testing.T) {
	t.Parallel()
	const (
		partitions = 2
		poll       = 4000
	)
	cycles := faultCycles(t, 5)
	// A backlog that lasts through the kills: a process stores a few
	// thousand records between its start and its kill.
	records := 12000 * cycles
	schema := testenv.Schema(t)
	store := testenv.Store(t, schema)
	topic := testenv.Topic(t, partitions)
	group := testenv.Name("g")
	tg := newTarget(t)
	cfg := writeConfig(t, testConfig{Topic: topic, Group: group, Schema: schema, TargetURL: tg.URL(), Dedupe: true,
		KafkaExtra: fmt.Sprintf(", fetch_max_records: %d", poll)})
	recs, err := produceInBursts(topic, testenv.Brokers(t), partitions, records, 2000, time.Millisecond, nil)
	if err != nil {
		t.Fatalf("produce: %v", err)
	}

	kills, consuming := 0, 0 // consuming: of a process that had not stored the whole backlog
	for i := 0; i < cycles; i++ {
		before := testenv.Count(t, store, `SELECT count(*) FROM job_keys`)
		if before == records {
			break // the backlog is gone: the kills to come would prove nothing
		}
		p := startRun(t, fmt.Sprintf("run-%d", i), cfg)
		testenv.Eventually(t, time.Minute, "records stored", func() bool {
			return testenv.Count(t, store, `SELECT count(*) FROM job_keys`) > before
		})
		time.Sleep(rand.N(400 * time.Millisecond))
		p.kill()
		kills++
		if testenv.Count(t, store, `SELECT count(*) FROM job_keys`) < records {
			consuming++
		}
		checkStoredPrefix(t, store, group, topic)
		evictMembers(t, group, p)
	}
	if consuming < 2 {
		t.Fatalf("only %d of %d kills came while the backlog was stored: the test proves little", consuming, kills)
	}
	startRun(t, "run-last", cfg)
	end := endOffsets(t, testenv.Admin(t), topic)
	testenv.Eventually(t, 2*time.Minute, "stored offsets at the end offsets", func() bool {
		return offsetsCovered(storedOffsets(t, store, group, topic), end)
	})
	checkStoredPrefix(t, store, group, topic)
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs`); n != records {
		t.Errorf("%d jobs for %d records", n, records)
	}
	if n := testenv.Count(t, store, `SELECT count(DISTINCT (src_partition, src_offset)) FROM all_jobs`); n != len(recs) {
		t.Errorf("I2: %d records with jobs, %d produced", n, len(recs))
	}
	// The polls were split: an ingest transaction (a job_keys row's
	// xmin) stored about half a poll of the backlog (cut where the
	// payloads' bytes are halved: ids of more digits weigh more), and a
	// whole one only where its partition had no stored offset yet, which
	// a split needs.
	sizes := `SELECT count(*) AS n FROM job_keys GROUP BY xmin::text`
	halves := testenv.Count(t, store, `SELECT count(*) FROM (`+sizes+`) t WHERE n BETWEEN $1 AND $2`, poll/4, 3*poll/4)
	wholes := testenv.Count(t, store, `SELECT count(*) FROM (`+sizes+`) t WHERE n > $1`, 3*poll/4)
	if halves < 10 || wholes > 2*partitions {
		t.Errorf("%d ingest transactions of about half a poll (%d–%d jobs), %d larger: the polls of %d were not stored in halves",
			halves, poll/4, 3*poll/4, wholes, poll)
	}
	t.Logf("%d kills (%d while the backlog was stored) of %d records; %d ingest transactions of half a poll, %d of a whole one",
		kills, consuming, records, halves, wholes)
}

// TestFaultJobKillsWorker checks I5: a job whose every attempt kills its
// process still uses up its attempts, and after max_attempts ends dead in
// the DLQ instead of being retried forever.
func TestFaultJobKillsWorker(t *testing.T) {
	t.Parallel()
	schema := testenv.Schema(t)
	store := testenv.Store(t, schema)
	topic := testenv.Topic(t, 1)
	group := testenv.Name("g")
	tg := newTarget(t)
	poisonHit := make(chan call, 10)
	tg.setBehaviour(func(r *http.Request, c call) int {
		if !bytes.Contains(c.Body, []byte(`"poison"`)) {
			return 0
		}
		poisonHit <- c
		<-r.Context().Done() // the test kills the process meanwhile
		return http.StatusInternalServerError
	})
	cfg := writeConfig(t, testConfig{Topic: topic, Group: group, Schema: schema, TargetURL: tg.URL(),
		Dedupe: true, MaxAttempts: 3, Lease: time.Second, Listen: "127.0.0.1:0"})

	p := startRun(t, "run-0", cfg)
	testenv.Produce(t, topic, &kgo.Record{Partition: 0, Value: []byte(`{"id":"ok-1"}`)})
	testenv.Eventually(t, 30*time.Second, "ok-1 to succeed", func() bool {
		j := jobByDedupe(t, store, "ok-1")
		return j != nil && j.State == "succeeded"
	})
	testenv.Produce(t, topic, &kgo.Record{Partition: 0, Value: []byte(`{"id":"poison"}`)})
	for attempt := 1; attempt <= 3; attempt++ {
		select {
		case c := <-poisonHit:
			if c.Attempt != attempt {
				t.Errorf("poison request %d carries Switchyard-Attempt %d", attempt, c.Attempt)
			}
		case <-p.done:
			t.Fatalf("%s exited by itself with code %d", p.name, p.code)
		case <-time.After(60 * time.Second):
			t.Fatalf("attempt %d of the poison job never reached the target", attempt)
		}
		p.kill()
		evictMembers(t, group, p)
		p = startRun(t, fmt.Sprintf("run-%d", attempt), cfg)
	}

	// The third attempt died with its process; once its lease expires the
	// rescuer of the running process must park the job.
	var poison *jobRow
	testenv.Eventually(t, 30*time.Second, "the poison job to end dead", func() bool {
		poison = jobByDedupe(t, store, "poison")
		return poison != nil && poison.State == "dead"
	})
	if poison.Attempts != 3 {
		t.Errorf("poison job has attempts %d, want 3", poison.Attempts)
	}
	var reason string
	var attempts int
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := store.Pool().QueryRow(ctx, `SELECT reason, attempts FROM dlq_entries WHERE job_id = $1`, poison.ID).
		Scan(&reason, &attempts)
	if err != nil {
		t.Fatalf("DLQ entry of job %d: %v", poison.ID, err)
	}
	if reason != "max_attempts" || attempts != 3 {
		t.Errorf("DLQ entry: reason %q attempts %d, want max_attempts and 3", reason, attempts)
	}
	// The third attempt died with run-2; run-3, which rescued its lease,
	// counts it, once, though it never ran it: dead, as the job's last
	// attempt, and not lease_lost; and logs the job's end.
	if n := metricSum(t, adminAddr(t, p), "switchyard_job_attempts_total", `outcome="dead"`); n != 1 {
		t.Errorf("%s counts %v attempts as dead, want 1 (the last attempt, whose lease it rescued)", p.name, n)
	}
	if n := metricSum(t, adminAddr(t, p), "switchyard_job_attempts_total", `outcome="lease_lost"`); n != 0 {
		t.Errorf("%s counts %v attempts as lease_lost, want 0 (the one it rescued ended the job)", p.name, n)
	}
	dead := false
	for _, line := range strings.Split(p.log.String(), "\n") {
		dead = dead || strings.Contains(line, `"msg":"job dead"`) && strings.Contains(line, fmt.Sprintf(`"job_id":%d,`, poison.ID)) &&
			strings.Contains(line, `"reason":"max_attempts"`)
	}
	if !dead {
		t.Errorf("%s did not log the poison job %d dead (max_attempts)", p.name, poison.ID)
	}

	// The route still flows.
	testenv.Produce(t, topic, &kgo.Record{Partition: 0, Value: []byte(`{"id":"ok-2"}`)})
	testenv.Eventually(t, 30*time.Second, "ok-2 to succeed", func() bool {
		j := jobByDedupe(t, store, "ok-2")
		return j != nil && j.State == "succeeded"
	})

	calls := tg.callsFor(poison.ID)
	if len(calls) != 3 {
		t.Fatalf("the target received the poison job %d times, want 3: %+v", len(calls), calls)
	}
	tokens := map[int64]bool{}
	for i, c := range calls {
		if c.Attempt != i+1 {
			t.Errorf("request %d carries Switchyard-Attempt %d, want %d", i+1, c.Attempt, i+1)
		}
		if c.Token == 0 || tokens[c.Token] {
			t.Errorf("request %d carries token %d, want a fresh one (seen %v)", i+1, c.Token, tokens)
		}
		if i > 0 && c.Token <= calls[i-1].Token {
			t.Errorf("token %d of request %d is not above %d", c.Token, i+1, calls[i-1].Token)
		}
		tokens[c.Token] = true
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM dlq_entries`); n != 1 {
		t.Errorf("%d DLQ entries, want 1", n)
	}
}

// TestSIGTERMWithJobsInFlight checks I7: on SIGTERM a job that finishes
// within the grace period succeeds, one that does not is aborted when it
// ends and released to its queue with its attempt handed back, the
// offsets are stored, and the process exits 0.
func TestSIGTERMWithJobsInFlight(t *testing.T) {
	t.Parallel()
	const grace = 2 * time.Second
	schema := testenv.Schema(t)
	store := testenv.Store(t, schema)
	topic := testenv.Topic(t, 2)
	group := testenv.Name("g")
	tg := newTarget(t)
	arrived := make(chan string, 10)
	releaseA := make(chan struct{})
	bAborted := make(chan time.Time, 1)
	tg.setBehaviour(func(r *http.Request, c call) int {
		switch {
		case bytes.Contains(c.Body, []byte(`"A"`)):
			arrived <- "A"
			select {
			case <-releaseA:
			case <-r.Context().Done():
			}
		case bytes.Contains(c.Body, []byte(`"B"`)):
			arrived <- "B"
			<-r.Context().Done()
			bAborted <- time.Now()
		}
		return 0
	})
	// B's request must end only with the grace period, not its own
	// timeout: under a loaded CI machine one partition's record reached
	// the target 4.9 s after the other's (a fetch held for its max wait),
	// and a 5 s timeout then aborted B 72 ms after SIGTERM.
	cfg := writeConfig(t, testConfig{Topic: topic, Group: group, Schema: schema, TargetURL: tg.URL(),
		Dedupe: true, Grace: grace, TargetTimeout: time.Minute})

	p := startRun(t, "run-0", cfg)
	testenv.Produce(t, topic,
		&kgo.Record{Partition: 0, Value: []byte(`{"id":"A"}`)},
		&kgo.Record{Partition: 1, Value: []byte(`{"id":"B"}`)})
	seen := map[string]time.Time{}
	for len(seen) < 2 {
		select {
		case name := <-arrived:
			seen[name] = time.Now()
		case <-time.After(30 * time.Second):
			t.Fatalf("only %v reached the target", seen)
		}
	}

	t.Logf("A and B reached the target %s apart", seen["B"].Sub(seen["A"]).Abs().Round(time.Millisecond))
	sent := time.Now()
	p.signal(syscall.SIGTERM)
	p.waitLog(10*time.Second, "signal received")
	close(releaseA) // A finishes within the grace period

	var abortedAt time.Time
	select {
	case abortedAt = <-bAborted:
	case <-time.After(grace + 10*time.Second):
		t.Fatalf("B's request was not aborted within %s of SIGTERM", grace+10*time.Second)
	}
	if d := abortedAt.Sub(sent); d < grace-250*time.Millisecond {
		t.Errorf("B's request was aborted %s after SIGTERM, before the %s grace period ended", d, grace)
	}
	if code := p.wait(grace + 10*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	t.Logf("SIGTERM → B aborted %s, process exited %s", abortedAt.Sub(sent).Round(time.Millisecond),
		time.Since(sent).Round(time.Millisecond))

	a, b := jobByDedupe(t, store, "A"), jobByDedupe(t, store, "B")
	if a == nil || b == nil {
		t.Fatalf("job rows: A %v, B %v", a, b)
	}
	if a.State != "succeeded" || a.Attempts != 1 {
		t.Errorf("A: state %s attempts %d, want succeeded after 1 attempt (last error %q)", a.State, a.Attempts, a.LastError)
	}
	if b.State != "queued" || b.Attempts != 0 {
		t.Errorf("B: state %s attempts %d, want queued with attempts 0 (released)", b.State, b.Attempts)
	}
	end := endOffsets(t, testenv.Admin(t), topic)
	if stored := storedOffsets(t, store, group, topic); stored[0] != end[0] || stored[1] != end[1] {
		t.Errorf("stored offsets %v, end offsets %v", stored, end)
	}

	// A new process runs B to success, as its first attempt again.
	tg.setBehaviour(nil)
	startRun(t, "run-1", cfg)
	testenv.Eventually(t, 30*time.Second, "B to succeed on the next process", func() bool {
		b = jobByDedupe(t, store, "B")
		return b != nil && b.State == "succeeded"
	})
	calls := tg.callsFor(b.ID)
	if len(calls) != 2 || calls[1].Attempt != 1 || calls[1].Token == calls[0].Token {
		t.Errorf("calls of B: %+v; want a second call with attempt 1 and a new token", calls)
	}
	if n := len(tg.callsFor(a.ID)); n != 1 {
		t.Errorf("A was received %d times, want once", n)
	}
}

// TestSecondSignalExitsAtOnce: a second SIGTERM during the grace period
// exits at once, with a non-zero code.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	t.Parallel()
	schema := testenv.Schema(t)
	topic := testenv.Topic(t, 1)
	tg := newTarget(t)
	arrived := make(chan struct{}, 1)
	tg.setBehaviour(func(r *http.Request, _ call) int {
		arrived <- struct{}{}
		<-r.Context().Done()
		return 0
	})
	cfg := writeConfig(t, testConfig{Topic: topic, Group: testenv.Name("g"), Schema: schema, TargetURL: tg.URL(),
		Grace: time.Minute})
	p := startRun(t, "run-0", cfg)
	testenv.Produce(t, topic, &kgo.Record{Partition: 0, Value: []byte(`{"id":"hang"}`)})
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the job never reached the target")
	}
	p.signal(syscall.SIGTERM)
	p.waitLog(10*time.Second, "signal received")
	sent := time.Now()
	p.signal(syscall.SIGTERM)
	code := p.wait(5 * time.Second)
	if code == 0 {
		t.Errorf("exit code 0 after a second signal, want non-zero")
	}
	t.Logf("exited %s after the second signal with code %d", time.Since(sent).Round(time.Millisecond), code)
}
