package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// tenantRecords are n records of tenant, with unique ids, spread over 4
// partitions.
func tenantRecords(tenant string, n int) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	for i := range n {
		recs[i] = &kgo.Record{Partition: int32(i % 4), Value: fmt.Appendf(nil, `{"id":"%s%d","tenant":%q}`, tenant, i, tenant)}
	}
	return recs
}

// inFlight counts a target's requests in flight by a label, and the
// highest count each label reached.
type inFlight struct {
	mu       sync.Mutex
	now, top map[string]int
}

func (f *inFlight) enter(label string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.now == nil {
		f.now, f.top = map[string]int{}, map[string]int{}
	}
	f.now[label]++
	f.top[label] = max(f.top[label], f.now[label])
}

func (f *inFlight) leave(label string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now[label]--
}

// holding is a behaviour that answers each request after hold (or once
// it is cancelled), counted in flight under its label meanwhile.
func (f *inFlight) holding(hold time.Duration, label func(call) string) behaviour {
	return func(r *http.Request, c call) int {
		l := label(c)
		f.enter(l)
		defer f.leave(l)
		select {
		case <-time.After(hold):
		case <-r.Context().Done():
		}
		return 0
	}
}

// all labels every call alike.
func all(call) string { return "all" }

func (f *inFlight) peaks() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for k, v := range f.top {
		out[k] = v
	}
	return out
}

// TestGroupCapHoldsAndEveryTenantProgresses: SPEC §2 I9 for a group
// cap, with two processes and a kill -9. Tenant A floods the route with
// 10,000 jobs, produced before the 10 each of tenants B–J; with
// group.max_running 2, no tenant ever has more than 2 requests in flight
// at the target, and B–J finish while A is still draining. Every record ends as exactly one succeeded job.
func TestGroupCapHoldsAndEveryTenantProgresses(t *testing.T) {
	t.Parallel()
	const flood, few, perTenant = 10_000, 10, 2
	tenants := []string{"B", "C", "D", "E", "F", "G", "H", "I", "J"}
	schema := testenv.Schema(t)
	store := testenv.Store(t, schema)
	topic := testenv.Topic(t, 4)
	tg := newTarget(t)
	var flight inFlight
	tg.setBehaviour(func(r *http.Request, c call) int {
		var v struct{ Tenant string }
		_ = json.Unmarshal(c.Body, &v)
		flight.enter(v.Tenant)
		defer flight.leave(v.Tenant)
		if v.Tenant != "A" {
			select {
			case <-time.After(50 * time.Millisecond):
			case <-r.Context().Done():
			}
		}
		return 0
	})
	cfg := writeConfig(t, testConfig{Group: testenv.Name("g"), Schema: schema, Body: fmt.Sprintf(`queues:
  q: {concurrency: 8, lease: 2s, poll_interval: 100ms}
routes:
  - {topic: %q, kind: k, queue: q, group: {field: tenant, max_running: %d}, dedupe: {field: id}, target: {http: {url: %q, timeout: 5s}}}
`, topic, perTenant, tg.URL())})
	a := startRun(t, "run-a", cfg)
	startRun(t, "run-b", cfg)
	testenv.Produce(t, topic, tenantRecords("A", flood)...)
	var rest []*kgo.Record
	for _, tn := range tenants {
		rest = append(rest, tenantRecords(tn, few)...)
	}
	testenv.Produce(t, topic, rest...)

	fewDone := `SELECT count(*) FROM all_jobs WHERE state = 'succeeded' AND grp <> 'A'`
	testenv.Eventually(t, 60*time.Second, "half of tenants B-J's jobs to succeed", func() bool {
		return testenv.Count(t, store, fewDone) >= len(tenants)*few/2
	})
	a.kill()
	testenv.Eventually(t, 60*time.Second, "every job of tenants B-J to succeed", func() bool {
		return testenv.Count(t, store, fewDone) == len(tenants)*few
	})
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'succeeded' AND grp = 'A'`); n >= flood*9/10 {
		t.Fatalf("tenants B-J finished only once tenant A had %d of its %d jobs done: the flood held them back", n, flood)
	} else {
		t.Logf("tenants B-J finished while tenant A had %d of %d done", n, flood)
	}
	testenv.Eventually(t, 240*time.Second, "every job to succeed", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'succeeded'`) == flood+len(tenants)*few
	})
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs`); n != flood+len(tenants)*few {
		t.Fatalf("%d jobs for %d records", n, flood+len(tenants)*few)
	}
	peaks := flight.peaks()
	t.Logf("peak requests in flight per tenant at the target %v", peaks)
	for tn, p := range peaks {
		if p > perTenant {
			t.Fatalf("tenant %s had %d requests in flight at once, over its group's max_running %d", tn, p, perTenant)
		}
	}
	// A's requests return at once and rarely overlap; B-J's take 50 ms.
	if peaks["B"] < perTenant {
		t.Fatalf("tenant B never had more than %d in flight: its cap was never reached, so the test proved nothing", peaks["B"])
	}
}

// TestRateLimitHoldsAcrossProcesses: SPEC §2 I9 for a rate limit, with
// two processes and a kill -9: in any window of `per`, the target sees
// at most limit + burst starts, one more at a window's edge — counted
// over every attempt, the killed process's too — and every record ends
// as one succeeded job.
func TestRateLimitHoldsAcrossProcesses(t *testing.T) {
	t.Parallel()
	const total, limit, burst, per = 150, 20, 4, time.Second
	schema := testenv.Schema(t)
	store := testenv.Store(t, schema)
	topic := testenv.Topic(t, 4)
	tg := newTarget(t)
	var mu sync.Mutex
	var starts []time.Time
	tg.setBehaviour(func(*http.Request, call) int {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		return 0
	})
	cfg := writeConfig(t, testConfig{Group: testenv.Name("g"), Schema: schema, Body: fmt.Sprintf(`queues:
  q: {concurrency: 8, lease: 2s, poll_interval: 100ms}
routes:
  - {topic: %q, kind: k, queue: q, rate_limit: {limit: %d, per: %s, burst: %d}, dedupe: {field: id}, target: {http: {url: %q, timeout: 5s}}}
`, topic, limit, per, burst, tg.URL())})
	a := startRun(t, "run-a", cfg)
	startRun(t, "run-b", cfg)
	testenv.Produce(t, topic, records(0, total)...)
	testenv.Eventually(t, 60*time.Second, "a third of the jobs to run", func() bool { return len(tg.received()) >= total/3 })
	a.kill()
	testenv.Eventually(t, 60*time.Second, "every job to succeed", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'succeeded'`) == total
	})
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs`); n != total {
		t.Fatalf("%d jobs for %d records", n, total)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	most := 0
	for i, s := range starts {
		j, _ := slices.BinarySearchFunc(starts, s.Add(per), func(x, end time.Time) int { return x.Compare(end) })
		most = max(most, j-i)
	}
	perSecond := map[int]int{}
	for _, s := range starts {
		perSecond[int(s.Sub(starts[0])/time.Second)]++
	}
	t.Logf("starts per second %v", perSecond)
	t.Logf("%d starts in %s; at most %d in any window of %s (limit %d, burst %d)",
		len(starts), starts[len(starts)-1].Sub(starts[0]).Round(time.Millisecond), most, per, limit, burst)
	if most > limit+burst+1 {
		t.Fatalf("%d starts in one window of %s, over limit %d + burst %d (+1 at a window's edge)", most, per, limit, burst)
	}
	if most < limit {
		t.Fatalf("never %d starts in a window of %s: the limit was never reached, so the test proved nothing", limit, per)
	}
}

// TestThrottledPoolWaitsForRoom: a pool whose workers are idle while
// every group of its route is at max_running claims again when a worker
// frees or the limit's retry is due, not at once: it once followed each
// throttled claim with another, some 2,000 a second, each under the
// route's lock. Once a group's job ends, its next one still starts, and
// every job succeeds.
func TestThrottledPoolWaitsForRoom(t *testing.T) {
	t.Parallel()
	const perTenant, hold = 3, 2 * time.Second
	schema := testenv.Schema(t)
	store := testenv.Store(t, schema)
	topic := testenv.Topic(t, 4)
	tg := newTarget(t)
	tg.setBehaviour(func(r *http.Request, _ call) int {
		select {
		case <-time.After(hold):
		case <-r.Context().Done():
		}
		return 0
	})
	cfg := writeConfig(t, testConfig{Group: testenv.Name("g"), Schema: schema, Listen: "127.0.0.1:0", Body: fmt.Sprintf(`queues:
  q: {concurrency: 8, lease: 10s, poll_interval: 100ms}
routes:
  - {topic: %q, kind: k, queue: q, group: {field: tenant, max_running: 1}, dedupe: {field: id}, target: {http: {url: %q, timeout: 10s}}}
`, topic, tg.URL())})
	p := startRun(t, "run", cfg)
	addr := adminAddr(t, p)
	testenv.Produce(t, topic, append(tenantRecords("A", perTenant), tenantRecords("B", perTenant)...)...)
	testenv.Eventually(t, 30*time.Second, "one job of each tenant running", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'running'`) == 2
	})
	// Both groups are at their cap and six workers idle for the rest of
	// the first jobs' two seconds: a claim each limit retry (50 ms) is
	// some 20 a second.
	time.Sleep(300 * time.Millisecond)
	before := metricSum(t, addr, "switchyard_flow_throttled_total")
	time.Sleep(time.Second)
	throttled := metricSum(t, addr, "switchyard_flow_throttled_total") - before
	t.Logf("%.0f throttled claims in one second with both groups at their cap", throttled)
	if throttled > 50 {
		t.Fatalf("%.0f throttled claims in one second while no room could free: the pool claims in a busy loop", throttled)
	}
	testenv.Eventually(t, 30*time.Second, "every job to succeed", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'succeeded'`) == 2*perTenant
	})
	if n := len(tg.received()); n != 2*perTenant {
		t.Fatalf("the target received %d calls for %d jobs", n, 2*perTenant)
	}
}

// TestIdleProcessStaysQuiet: a process with a capped route and nothing
// to do leases its route's slots at the pace of its polls and renewals,
// not in a loop: each lease woke every pool, whose claim found the route
// dry and shrank the share (a lease), and the next found no room and
// asked for it again (a lease, a wake-up), some 100 lease writes a
// second. Jobs that arrive then still run, every one, within the cap.
func TestIdleProcessStaysQuiet(t *testing.T) {
	t.Parallel()
	const total, maxRunning = 20, 2
	schema := testenv.Schema(t)
	store := testenv.Store(t, schema)
	topic := testenv.Topic(t, 4)
	tg := newTarget(t)
	var flight inFlight
	tg.setBehaviour(func(*http.Request, call) int {
		flight.enter("all")
		defer flight.leave("all")
		time.Sleep(20 * time.Millisecond)
		return 0
	})
	cfg := writeConfig(t, testConfig{Group: testenv.Name("g"), Schema: schema, Listen: "127.0.0.1:0", Body: fmt.Sprintf(`queues:
  q: {concurrency: 8, lease: 10s}
routes:
  - {topic: %q, kind: k, queue: q, max_running: %d, dedupe: {field: id}, target: {http: {url: %q, timeout: 5s}}}
`, topic, maxRunning, tg.URL())})
	p := startRun(t, "run", cfg)
	adminAddr(t, p) // started
	// Lease writes land in the table's statistics within a second of
	// their commit; the window starts and ends after a settle.
	writes := func() int {
		return testenv.Count(t, store, `SELECT coalesce(sum(n_tup_ins + n_tup_upd), 0)::int FROM pg_stat_user_tables
			WHERE schemaname = current_schema() AND relname = 'flow_slots'`)
	}
	time.Sleep(2 * time.Second)
	before := writes()
	time.Sleep(3 * time.Second)
	n := writes() - before
	t.Logf("%d slot lease writes in three idle seconds", n)
	// A poll a second that finds no room activates the route and leases
	// (the share grows), its claim finds nothing and the share shrinks
	// (a second lease): some 6 in three seconds.
	if n > 20 {
		t.Fatalf("%d slot lease writes in three idle seconds: the process leases in a loop", n)
	}
	testenv.Produce(t, topic, tenantRecords("A", total)...)
	testenv.Eventually(t, 30*time.Second, "every job to succeed", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'succeeded'`) == total
	})
	if peak := flight.peaks()["all"]; peak > maxRunning {
		t.Fatalf("%d requests in flight at once, over max_running %d", peak, maxRunning)
	}
}

// SPEC §7, from the outside and on two processes: a tenant held at its
// group's max_running is waiting behind its group's head. Both processes'
// gauges say its jobs wait (oldest waiting age above 0) and that nothing
// is runnable (oldest runnable age 0) while the tenant's one job runs and
// the rest are held.
func TestATenantAtItsCapIsWaitingNotRunnable(t *testing.T) {
	t.Parallel()
	schema := testenv.Schema(t)
	topic := testenv.Topic(t, 4)
	tg := newTarget(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	tg.setBehaviour(func(r *http.Request, _ call) int {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		return 0
	})
	cfg := writeConfig(t, testConfig{Group: testenv.Name("g"), Schema: schema, Listen: "127.0.0.1:0", Body: fmt.Sprintf(`queues:
  q: {concurrency: 4, poll_interval: 100ms}
routes:
  - {topic: %q, kind: k, queue: q, group: {field: tenant, max_running: 1}, dedupe: {field: id}, target: {http: {url: %q, timeout: 5m}}}
`, topic, tg.URL())})
	procs := []*proc{startRun(t, "run-a", cfg), startRun(t, "run-b", cfg)}
	testenv.Produce(t, topic, tenantRecords("A", 5)...)
	testenv.Eventually(t, 30*time.Second, "tenant A's first job to reach the target", func() bool { return len(tg.received()) == 1 })
	gauge := func(body, name string) float64 {
		m := regexp.MustCompile(`(?m)^` + name + `\{queue="q"\} (\S+)$`).FindStringSubmatch(body)
		if m == nil {
			return -1
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	for _, p := range procs {
		addr := adminAddr(t, p)
		var runnable, waiting float64
		if !testenv.Until(30*time.Second, func() bool {
			body := scrape(t, addr)
			runnable, waiting = gauge(body, "switchyard_queue_oldest_runnable_age_seconds"), gauge(body, "switchyard_queue_oldest_waiting_age_seconds")
			return runnable == 0 && waiting > 0
		}) {
			t.Errorf("%s: oldest runnable age %v, oldest waiting age %v; want 0 and above 0 (tenant A held at its cap)", p.name, runnable, waiting)
		}
		// Each process's API says a queued job of A is held, counting
		// the running job whichever process runs it.
		code, body := api(t, addr, "GET", "/v1/jobs?state=queued&limit=1")
		var queued struct{ Items []pgstore.JobRow }
		if err := json.Unmarshal([]byte(body), &queued); code != http.StatusOK || err != nil || len(queued.Items) != 1 {
			t.Fatalf("%s: GET /v1/jobs?state=queued: %d %s (%v)", p.name, code, body, err)
		}
		code, body = api(t, addr, "GET", fmt.Sprintf("/v1/jobs/%d", queued.Items[0].ID))
		var job pgstore.JobDetail
		if err := json.Unmarshal([]byte(body), &job); code != http.StatusOK || err != nil || job.Group == nil ||
			*job.Group != (pgstore.GroupPosition{Value: "A", MaxRunning: 1, Running: 1, Held: true}) {
			t.Errorf("%s: GET /v1/jobs/%d: %d %s (%v), want A held at its cap of 1", p.name, queued.Items[0].ID, code, body, err)
		}
	}
	if n := len(tg.received()); n != 1 {
		t.Errorf("the target got %d calls, want tenant A's one", n)
	}
}
