package main

// Helpers of the service-fault tests (fault_services_test.go): a
// continuous producer, a target behaviour that watches per-key order, and
// the final check of the invariants with its FAULT-SUMMARY line. A
// scenario that restarts a service runs on a private instance of it
// (testenv.StartPostgres, testenv.StartKafka): the shared ones serve
// every test package at once and are never stopped or restarted.

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// ---------------------------------------------------------------------
// Producer.

// producer writes records {"id":"<prefix><i>","k":"k<i mod keys>"} until
// stopped, burst records per tick. All records of a key go to one
// partition, so a key's offsets are its production order.
type producer struct {
	prefix string
	burst  int

	stopC   chan struct{}
	stopped sync.Once
	abort   context.CancelFunc // fails the burst in flight
	done    chan struct{}

	mu   sync.Mutex
	recs []producedRec
	err  error
	// sending is when the burst in flight was sent (zero: none is): a
	// wait for a record that the broker never took is the producer's.
	sending time.Time
}

// startProducer begins producing to topic on brokers; the test's end
// stops it.
func startProducer(t *testing.T, brokers []string, topic, prefix string, partitions, keys, burst int,
	tick time.Duration) *producer {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatalf("kafka client: %v", err)
	}
	base, abort := context.WithCancel(context.Background())
	pr := &producer{prefix: prefix, burst: burst, stopC: make(chan struct{}), abort: abort, done: make(chan struct{})}
	go func() {
		defer close(pr.done)
		defer cl.Close()
		ticker := time.NewTicker(tick)
		defer ticker.Stop()
		for i := 0; ; {
			var recs []*kgo.Record
			for range burst {
				k := i % keys
				recs = append(recs, &kgo.Record{Partition: int32(k % partitions),
					Value: fmt.Appendf(nil, `{"id":"%s%d","k":"k%d"}`, prefix, i, k)})
				i++
			}
			// Long enough to ride out a broker restart: the client
			// retries until the broker is back.
			ctx, cancel := context.WithTimeout(base, 3*time.Minute)
			pr.mu.Lock()
			pr.sending = time.Now()
			pr.mu.Unlock()
			res := cl.ProduceSync(ctx, recs...)
			cancel()
			pr.mu.Lock()
			pr.sending = time.Time{}
			for _, r := range res {
				if r.Err != nil {
					pr.err = fmt.Errorf("produce %s: %w", r.Record.Value, r.Err)
					continue
				}
				pr.recs = append(pr.recs, producedRec{id: recordID(r.Record.Value), value: r.Record.Value,
					partition: r.Record.Partition, offset: r.Record.Offset})
			}
			failed := pr.err != nil
			pr.mu.Unlock()
			if failed {
				return
			}
			select {
			case <-pr.stopC:
				return
			case <-ticker.C:
			}
		}
	}()
	// A test that ends early must not wait for a burst to a broker that
	// is down.
	t.Cleanup(func() { pr.abort(); pr.stopOnce() })
	return pr
}

func (pr *producer) stopOnce() {
	pr.stopped.Do(func() { close(pr.stopC) })
	<-pr.done
}

// stop ends production and returns every record written.
func (pr *producer) stop(t *testing.T) []producedRec {
	t.Helper()
	pr.stopOnce()
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.err != nil {
		t.Fatalf("producer: %v", pr.err)
	}
	return slices.Clone(pr.recs)
}

// state says how far the producer got, for a wait that timed out.
func (pr *producer) state() string {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	s := fmt.Sprintf("the producer wrote %d records", len(pr.recs))
	if !pr.sending.IsZero() {
		s += fmt.Sprintf("; a burst of %d has waited %s for the broker", pr.burst, time.Since(pr.sending).Round(time.Millisecond))
	}
	if pr.err != nil {
		s += fmt.Sprintf("; it stopped on %v", pr.err)
	}
	return s
}

// count is how many records were written so far.
func (pr *producer) count() int {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return len(pr.recs)
}

// waitProduced waits until n more records than mark were written.
func (pr *producer) waitProduced(t *testing.T, mark, n int, within time.Duration) {
	t.Helper()
	testenv.Eventually(t, within, fmt.Sprintf("%d more records to be produced", n), func() bool {
		pr.mu.Lock()
		defer pr.mu.Unlock()
		if pr.err != nil {
			t.Fatalf("producer: %v", pr.err)
		}
		return len(pr.recs) >= mark+n
	})
}

// recordID is the "id" of a record value {"id":"…",…} the tests wrote.
func recordID(v []byte) string {
	_, rest, _ := strings.Cut(string(v), `"id":"`)
	id, _, _ := strings.Cut(rest, `"`)
	return id
}

// ---------------------------------------------------------------------
// Target behaviour watching deliveries.

// deliveryWatch is a target behaviour: it holds each request a little
// (so that faults find jobs in flight; a retry for a second), answers
// 200, and records when each attempt was answered and whether a job
// started while another job of its key was still being handled (I3, for
// ordered routes).
type deliveryWatch struct {
	maxDelay time.Duration

	mu       sync.Mutex
	inFlight map[string]map[int64]int // key → job → requests in progress
	overlaps []string
	answered map[[2]int64]time.Time // (job, token) → when its 200 was sent
}

func newDeliveryWatch(maxDelay time.Duration) *deliveryWatch {
	return &deliveryWatch{maxDelay: maxDelay, inFlight: map[string]map[int64]int{}, answered: map[[2]int64]time.Time{}}
}

func (w *deliveryWatch) behaviour(r *http.Request, c call) int {
	w.mu.Lock()
	jobs := w.inFlight[c.Key]
	if jobs == nil {
		jobs = map[int64]int{}
		w.inFlight[c.Key] = jobs
	}
	for other, n := range jobs {
		if other != c.JobID && n > 0 {
			w.overlaps = append(w.overlaps, fmt.Sprintf("key %s: job %d (token %d) started while job %d was running",
				c.Key, c.JobID, c.Token, other))
		}
	}
	jobs[c.JobID]++
	w.mu.Unlock()
	hold := rand.N(w.maxDelay)
	if c.Attempt > 1 {
		// A retry usually follows a lease lost to the fault, whose
		// attempt's outcome may still be on its way to the database:
		// holding the retry open gives that stale outcome a window to
		// land while a newer lease runs, where only the fencing token
		// can reject it (I4).
		hold = time.Second
	}
	select {
	case <-time.After(hold):
	case <-r.Context().Done():
	}
	w.mu.Lock()
	jobs[c.JobID]--
	if r.Context().Err() == nil {
		// Taken before the answer is written: the process can only
		// record this attempt's success after this instant.
		w.answered[[2]int64{c.JobID, c.Token}] = time.Now()
	}
	w.mu.Unlock()
	return 0
}

func (w *deliveryWatch) violations() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.overlaps)
}

// answeredAt is when the attempt (job, token) was answered 200.
func (w *deliveryWatch) answeredAt(job, token int64) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.answered[[2]int64{job, token}]
	return at, ok
}

// ---------------------------------------------------------------------
// Final check.

// tryCount is count without failing: while a service comes back, a
// pooled connection may still be a dead one.
func tryCount(s *pgstore.Store, query string, args ...any) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	err := s.Pool().QueryRow(ctx, query, args...).Scan(&n)
	return n, err
}

// waitThrough waits until a record produced from now on has gone all
// the way through (its job succeeded), and returns how long that took:
// the process works again, for new records as well as old ones.
func waitThrough(t *testing.T, p *proc, pr *producer, s *pgstore.Store, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	// At most one burst is in flight: this one is produced after now.
	id := fmt.Sprintf("%s%d", pr.prefix, pr.count()+pr.burst)
	through := testenv.Until(within, func() bool {
		if p.exited() {
			t.Fatalf("%s exited (code %d); it should recover by itself", p.name, p.code)
		}
		n, err := tryCount(s, `SELECT count(*) FROM all_jobs WHERE dedupe_key = $1 AND state = 'succeeded'`, id)
		return err == nil && n == 1
	})
	if !through {
		// The record is produced after the wait began: if the producer
		// never wrote it, nothing was there to go through.
		t.Logf("waiting for record %s: %s", id, pr.state())
		diagnose(t, s, id)
		// What the process said while stuck: the log printed at cleanup
		// is its tail, which the dump below fills.
		t.Logf("log of %s while it was stuck (its last 16 KiB):\n%s", p.name, tail(p.log.String(), 16<<10))
		// A goroutine dump of the stuck process says where it waits.
		p.signal(syscall.SIGQUIT)
		p.wait(30 * time.Second)
		if i := strings.Index(p.log.String(), "goroutine "); i >= 0 {
			t.Logf("goroutines of %s:\n%s", p.name, p.log.String()[i:])
		}
		t.Fatalf("timed out after %s waiting for the job of record %s to succeed", within, id)
	}
	return time.Since(start)
}

// diagnose logs what the database says about a job that did not get
// through: its row, its lane, the queue by state, the stored offsets and
// what the server is busy with.
func diagnose(t *testing.T, s *pgstore.Store, id string) {
	t.Helper()
	for _, q := range []string{
		`SELECT row_to_json(j)::text FROM (SELECT id, state, key, attempts, token, lease_expires_at, scheduled_at, src_partition, src_offset FROM jobs WHERE dedupe_key = $1) j`,
		`SELECT row_to_json(l)::text FROM lanes l JOIN all_jobs j ON j.lane AND l.route = j.route AND l.key = j.key WHERE j.dedupe_key = $1`,
		`SELECT json_object_agg(state, n)::text FROM (SELECT state, count(*) n FROM all_jobs GROUP BY state) x`,
		`SELECT json_agg(o)::text FROM (SELECT topic, partition, next_offset, updated_at FROM kafka_offsets) o`,
		`SELECT json_agg(a)::text FROM (SELECT pid, state, wait_event_type, wait_event, now() - xact_start AS xact_age, left(query, 120) AS query FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()) a`,
	} {
		var out *string
		var args []any
		if strings.Contains(q, "$1") {
			args = []any{id}
		}
		err := s.Pool().QueryRow(context.Background(), q, args...).Scan(&out)
		if out == nil {
			none := "(none)"
			out = &none
		}
		t.Logf("diagnose: %s\n  -> %s %v", q[:min(len(q), 60)], *out, err)
	}
}

// finalCheck is what the final check looks at.
type finalCheck struct {
	p            *proc
	store        *pgstore.Store
	adm          *kadm.Client
	group, topic string
	tg           *target
	watch        *deliveryWatch // the target's behaviour
	ordered      bool           // the route is ordered: check I3
}

// verify waits until the process has ingested every record of the topic
// (stored offsets at the end offsets) and finished every job, then checks
// the invariants against recs, the records this run is owed jobs for:
//
//   - lost (I1): a record with neither a job (by its dedupe key) nor a DLQ
//     entry (by its source);
//   - duplicate_jobs (I2): a record with more than one job, or a job row
//     whose source holds another job too;
//   - order_violations (I3, ordered routes only): a job that started
//     while another job of its key was being handled, or whose first
//     delivery came before that of a lower offset of its key (all of a
//     key's records are in one partition). 0 for an unordered route, which
//     promises no order;
//   - stale_completions_accepted (I4): a succeeded job whose recorded
//     fencing token is not the newest one the target was called with, was
//     never answered 200 under that token, or was recorded finished
//     before that answer was sent: the outcome then came from a superseded
//     lease (or from no delivery at all);
//   - redeliveries: target calls beyond one per job (allowed: a lease
//     lost to a fault is retried).
//
// Every job must have succeeded, and no job may exist that recs does not
// account for.
func (c finalCheck) verify(t *testing.T, recs []producedRec, within time.Duration) faultSummary {
	t.Helper()
	end := endOffsets(t, c.adm, c.topic)
	var stored map[int32]int64
	testenv.Eventually(t, within, "stored offsets at the end offsets and every job finished", func() bool {
		if c.p != nil && c.p.exited() {
			t.Fatalf("%s exited (code %d); it should recover by itself", c.p.name, c.p.code)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		got, err := c.store.OffsetLoad(ctx, c.group, []string{c.topic})
		if err != nil {
			return false
		}
		stored = got[c.topic]
		if !offsetsCovered(stored, end) {
			return false
		}
		n, err := tryCount(c.store, `SELECT count(*) FROM all_jobs WHERE state IN ('waiting','queued','running','retrying')`)
		return err == nil && n == 0
	})
	for p, e := range end {
		if e > 0 && stored[p] != e {
			t.Errorf("I1: partition %d: stored next offset %d, end offset %d", p, stored[p], e)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows := jobs(t, c.store)
	parked := map[[2]int64]bool{}
	dlq, err := c.store.Pool().Query(ctx, `SELECT src_partition, src_offset FROM dlq_entries WHERE src_topic = $1`, c.topic)
	if err != nil {
		t.Fatalf("read DLQ: %v", err)
	}
	var dp, do int64
	if _, err := pgx.ForEachRow(dlq, []any{&dp, &do}, func() error { parked[[2]int64{dp, do}] = true; return nil }); err != nil {
		t.Fatalf("read DLQ: %v", err)
	}
	if len(parked) > 0 {
		// Every record is well-formed and every answer 200: nothing
		// should be parked. (A parked record still counts as not lost.)
		t.Errorf("%d DLQ entries, want none", len(parked))
	}

	sum := faultSummary{produced: len(recs), jobs: len(rows)}
	byDedupe := map[string][]jobRow{}
	type src struct {
		partition int32
		offset    int64
	}
	bySource := map[src][]jobRow{}
	for _, j := range rows {
		byDedupe[j.DedupeKey] = append(byDedupe[j.DedupeKey], j)
		bySource[src{j.Partition, j.Offset}] = append(bySource[src{j.Partition, j.Offset}], j)
		if j.State != "succeeded" {
			t.Errorf("job %d (%s) is %s, want succeeded; last error %q", j.ID, j.DedupeKey, j.State, j.LastError)
		}
	}
	owed := map[string]bool{}
	for _, r := range recs {
		owed[r.id] = true
		js := byDedupe[r.id]
		switch {
		case len(js) == 0 && !parked[[2]int64{int64(r.partition), r.offset}]:
			sum.lost++
			if sum.lost <= 10 {
				t.Errorf("I1: record %s at %d/%d has no job and no DLQ entry", r.id, r.partition, r.offset)
			}
		case len(js) > 1:
			sum.duplicateJobs++
			t.Errorf("I2: record %s has %d jobs", r.id, len(js))
		case len(js) == 1 && !bytes.Equal(js[0].Payload, r.value):
			t.Errorf("job %d: payload %q, want %q", js[0].ID, js[0].Payload, r.value)
		}
	}
	for s, js := range bySource {
		if len(js) > 1 {
			sum.duplicateJobs++
			t.Errorf("I2: %d jobs come from %d/%d", len(js), s.partition, s.offset)
		}
	}
	unexpected := 0
	for _, j := range rows {
		if !owed[j.DedupeKey] {
			unexpected++
			if unexpected <= 10 {
				t.Errorf("job %d (%s, from %d/%d) is not owed to any record of this run", j.ID, j.DedupeKey, j.Partition, j.Offset)
			}
		}
	}

	// Deliveries, as the target saw them.
	calls := map[int64][]call{}
	var order []call // first delivery of each job, in arrival order
	for _, cl := range c.tg.received() {
		if len(calls[cl.JobID]) == 0 {
			order = append(order, cl)
		}
		calls[cl.JobID] = append(calls[cl.JobID], cl)
	}
	for _, j := range rows {
		cs := calls[j.ID]
		if len(cs) > 1 {
			sum.redeliveries += len(cs) - 1
		}
		if j.State != "succeeded" {
			continue
		}
		newest := int64(0)
		for _, cl := range cs {
			newest = max(newest, cl.Token)
		}
		answered, ok := c.watch.answeredAt(j.ID, j.Token)
		var why string
		switch {
		case j.Token != newest:
			why = fmt.Sprintf("job %d succeeded with token %d; the target was called with tokens %v", j.ID, j.Token, tokensOf(cs))
		case !ok:
			why = fmt.Sprintf("job %d succeeded with token %d, which the target never answered 200", j.ID, j.Token)
		case j.FinishedAt == nil || j.FinishedAt.Before(answered):
			why = fmt.Sprintf("job %d was recorded finished at %v, before its attempt with token %d was answered at %v: "+
				"the outcome recorded is not that attempt's", j.ID, j.FinishedAt, j.Token, answered)
		}
		if why != "" {
			sum.staleCompletionsAccepted++
			if sum.staleCompletionsAccepted <= 10 {
				t.Errorf("I4: %s", why)
			}
		}
	}
	if c.ordered {
		for _, v := range c.watch.violations() {
			sum.orderViolations++
			if sum.orderViolations <= 10 {
				t.Errorf("I3: %s", v)
			}
		}
		offsetOf := map[int64]int64{}
		for _, j := range rows {
			offsetOf[j.ID] = j.Offset
		}
		started := map[string]int64{} // key → highest offset started
		for _, cl := range order {
			off, ok := offsetOf[cl.JobID]
			if !ok {
				continue
			}
			if prev, ok := started[cl.Key]; ok && off < prev {
				sum.orderViolations++
				if sum.orderViolations <= 10 {
					t.Errorf("I3: key %s: job %d (offset %d) started after offset %d of its key", cl.Key, cl.JobID, off, prev)
				}
			}
			started[cl.Key] = max(started[cl.Key], off)
		}
	}
	return sum
}

func tokensOf(cs []call) []int64 {
	out := make([]int64, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Token)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// backendPorts returns the local TCP ports of pid's connections to
// 127.0.0.1:port, established. They are the client_port of the process's
// backends in pg_stat_activity.
func backendPorts(pid, port int) ([]int, error) {
	conns, err := tcpConns(pid)
	if err != nil {
		return nil, err
	}
	var ports []int
	for _, c := range conns {
		if c.remoteAddr == "0100007F" && c.remotePort == port && c.state == "01" {
			ports = append(ports, c.localPort)
		}
	}
	return ports, nil
}

// urlPort is the port of a libpq URL whose host is 127.0.0.1 (the
// only address backendPorts looks for).
func urlPort(t *testing.T, raw string) int {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("parse database URL: %v", err)
	}
	if u.Hostname() != "127.0.0.1" {
		t.Fatalf("database URL %s: this test finds the process's connections to 127.0.0.1 only", u.Redacted())
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatalf("database URL %s has no port", u.Redacted())
	}
	return p
}
