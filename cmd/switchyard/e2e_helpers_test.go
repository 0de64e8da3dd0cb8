package main

// Helpers of the end-to-end tests: the switchyard binary built once, a
// recording HTTP target, one process per exec.Cmd with its log captured,
// and checks read from the outside (rows, stored offsets, calls received).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// binPath is the switchyard binary built by TestMain.
var binPath string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "switchyard-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binPath = filepath.Join(dir, "switchyard")
	args := []string{"build", "-o", binPath}
	if os.Getenv("SWITCHYARD_E2E_RACE") != "" {
		// The processes under test then report their own data races
		// ("WARNING: DATA RACE" in their log fails the test). Off by
		// default: a race-built process is several times slower.
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, ".")...)
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go build: %v\n%s", err, out)
		return 1
	}
	before := goleak.IgnoreCurrent()
	code := m.Run()
	if code == 0 {
		// Only in-process work (the CLI table test, test clients, the
		// recording targets) runs in this process; all of it must be gone.
		if err := goleak.Find(before); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: leaked goroutines:", err)
			return 1
		}
	}
	return code
}

// ---------------------------------------------------------------------
// Recording HTTP target.

// call is one request the target received.
type call struct {
	JobID   int64
	Attempt int
	Token   int64
	Key     string
	Source  string // topic/partition/offset
	Body    []byte
}

func (c call) String() string {
	return fmt.Sprintf("{job %d attempt %d token %d key %q source %s body %q}",
		c.JobID, c.Attempt, c.Token, c.Key, c.Source, c.Body)
}

// behaviour decides the answer to one request. It may block (on a test's
// channel or on r.Context()); it returns the status to answer, 0 for 200.
type behaviour func(r *http.Request, c call) int

// target is a recording HTTP target (SPEC §5): it records every request,
// answers 200 unless a behaviour says otherwise.
type target struct {
	srv *httptest.Server

	mu     sync.Mutex
	calls  []call
	behave behaviour
}

func newTarget(t *testing.T) *target {
	t.Helper()
	tg := &target{}
	tg.srv = httptest.NewServer(http.HandlerFunc(tg.serve))
	t.Cleanup(func() {
		// A behaviour may still hold a request from a process that was
		// killed; dropping the connections cancels their contexts.
		tg.srv.CloseClientConnections()
		tg.srv.Close()
	})
	return tg
}

func (tg *target) URL() string { return tg.srv.URL + "/hook" }

// setBehaviour plugs in how later requests are answered (nil: 200).
func (tg *target) setBehaviour(b behaviour) {
	tg.mu.Lock()
	tg.behave = b
	tg.mu.Unlock()
}

// readCall reads the call a request carries (SPEC §5's headers, the body).
func readCall(r *http.Request) call {
	body, _ := io.ReadAll(r.Body)
	c := call{Key: r.Header.Get("Switchyard-Key"), Source: r.Header.Get("Switchyard-Source"), Body: body}
	c.JobID, _ = strconv.ParseInt(r.Header.Get("Switchyard-Job-Id"), 10, 64)
	c.Attempt, _ = strconv.Atoi(r.Header.Get("Switchyard-Attempt"))
	c.Token, _ = strconv.ParseInt(r.Header.Get("Switchyard-Token"), 10, 64)
	return c
}

func (tg *target) serve(w http.ResponseWriter, r *http.Request) {
	c := readCall(r)
	tg.mu.Lock()
	tg.calls = append(tg.calls, c)
	b := tg.behave
	tg.mu.Unlock()
	status := 0
	if b != nil {
		status = b(r, c)
	}
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
}

// received returns a copy of the calls so far.
func (tg *target) received() []call {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return append([]call(nil), tg.calls...)
}

// callsFor returns the calls of one job, in arrival order.
func (tg *target) callsFor(jobID int64) []call {
	var out []call
	for _, c := range tg.received() {
		if c.JobID == jobID {
			out = append(out, c)
		}
	}
	return out
}

// ---------------------------------------------------------------------
// Config.

// testConfig is what varies between the tests' config files; writeConfig
// fills in the rest. Without Body the file has one queue q and one route
// of kind k from Topic to TargetURL, set by the fields below Body.
type testConfig struct {
	testenv.Services // zero: the shared services
	// DatabaseURLFromEnv leaves postgres.url out of the file, for a
	// process given it in SWITCHYARD_DATABASE_URL only.
	DatabaseURLFromEnv bool
	Group, Schema      string
	GroupProtocol      string        // kafka.group_protocol; "": the default (classic)
	KafkaExtra         string        // more of the kafka block, e.g. `, session_timeout: 10s`
	MaxConns           int           // postgres.max_conns; 0: the default
	Listen             string        // http.listen; default "off"
	Grace              time.Duration // shutdown_grace; default 3s

	// Body is the queues, routes and schedules part of the file, for a
	// test that needs its own; the fields below are then unused.
	Body string

	Topic, TargetURL string
	Lease            time.Duration // default 2s
	Concurrency      int           // default 8
	MaxAttempts      int           // default 3
	BackoffMax       time.Duration // default 200ms; backoff starts at 50ms
	TargetTimeout    time.Duration // the HTTP target's timeout; default 5s
	Dedupe           bool          // dedupe on the payload's "id"
	Ordered          bool          // an ordered route, keyed on the payload's "k"
}

// writeConfig writes a config file for one test and returns its path.
func writeConfig(t *testing.T, c testConfig) string {
	t.Helper()
	if c.Services.DatabaseURL == "" && c.Services.Brokers == nil {
		c.Services = testenv.Shared(t)
	}
	if c.Listen == "" {
		c.Listen = "off"
	}
	if c.Grace == 0 {
		c.Grace = 3 * time.Second
	}
	var b strings.Builder
	brokers := make([]string, len(c.Brokers))
	for i, br := range c.Brokers {
		brokers[i] = strconv.Quote(br)
	}
	fmt.Fprintf(&b, "kafka: {brokers: [%s], group: %q", strings.Join(brokers, ", "), c.Group)
	if c.GroupProtocol != "" {
		fmt.Fprintf(&b, ", group_protocol: %s", c.GroupProtocol)
	}
	fmt.Fprintf(&b, "%s}\npostgres: {", c.KafkaExtra)
	if !c.DatabaseURLFromEnv {
		fmt.Fprintf(&b, "url: %q, ", c.DatabaseURL)
	}
	fmt.Fprintf(&b, "schema: %q", c.Schema)
	if c.MaxConns != 0 {
		fmt.Fprintf(&b, ", max_conns: %d", c.MaxConns)
	}
	fmt.Fprintf(&b, "}\nhttp: {listen: %q}\nshutdown_grace: %s\n", c.Listen, c.Grace)
	if c.Body != "" {
		b.WriteString(c.Body)
		return writeFile(t, b.String())
	}
	if c.Lease == 0 {
		c.Lease = 2 * time.Second
	}
	if c.Concurrency == 0 {
		c.Concurrency = 8
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 3
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = 200 * time.Millisecond
	}
	if c.TargetTimeout == 0 {
		c.TargetTimeout = 5 * time.Second
	}
	route := ""
	if c.Dedupe {
		route += "\n    dedupe: {field: id}"
	}
	if c.Ordered {
		route += "\n    key: {field: k}\n    ordered: true"
	}
	fmt.Fprintf(&b, `queues:
  q: {concurrency: %d, lease: %s, max_runtime: 1m, poll_interval: 100ms}
routes:
  - topic: %q
    kind: k
    queue: q%s
    max_attempts: %d
    backoff: {initial: 50ms, max: %s}
    target: {http: {url: %q, timeout: %s}}
`, c.Concurrency, c.Lease, c.Topic, route, c.MaxAttempts, c.BackoffMax, c.TargetURL, c.TargetTimeout)
	return writeFile(t, b.String())
}

// writeFile writes a config file of the given text for one test and
// returns its path: for a file writeConfig would not write, such as a
// deliberately bad one.
func writeFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "switchyard.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// ---------------------------------------------------------------------
// Processes.

// syncBuffer is a log buffer written by exec's copier and read by tests.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proc is one running switchyard process.
type proc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	log  *syncBuffer
	out  *syncBuffer
	done chan struct{} // closed once Wait returned
	code int           // exit code, -1 when killed by a signal
}

// start runs the binary with args; the process is killed (if still
// running) when the test ends, and its log is shown if the test failed.
// env is added to the test's own environment and wins over it (os/exec
// keeps the last value of a repeated key): e.g. the Env of services other
// than the shared ones, which the test's environment names.
func start(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, log: &syncBuffer{}, out: &syncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(binPath, args...)
	p.cmd.Stdout = p.out
	p.cmd.Stderr = p.log
	p.cmd.Env = append(append(os.Environ(), "SWITCHYARD_LOG_LEVEL=info"), env...)
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("--- log of %s (exit %d) ---\n%s", p.name, p.code, tail(p.log.String(), 16<<10))
		}
		if strings.Contains(p.log.String(), "WARNING: DATA RACE") {
			t.Errorf("%s reported a data race:\n%s", p.name, p.log.String())
		}
	})
	return p
}

// startRun starts `switchyard run --config cfg`.
func startRun(t *testing.T, name, cfg string, args ...string) *proc {
	t.Helper()
	return start(t, name, nil, append([]string{"run", "--config", cfg}, args...)...)
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// kill sends SIGKILL (if still running) and waits for the process.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (p *proc) signal(s os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(s); err != nil {
		p.t.Fatalf("signal %s to %s: %v", s, p.name, err)
	}
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits up to within for the process to exit and returns its code.
func (p *proc) wait(within time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(within):
		p.t.Fatalf("%s did not exit within %s", p.name, within)
		return 0
	}
}

// waitLog waits until the process logged a line containing s.
func (p *proc) waitLog(within time.Duration, s string) {
	p.t.Helper()
	testenv.Eventually(p.t, within, fmt.Sprintf("%s to log %q", p.name, s), func() bool {
		if p.exited() && !strings.Contains(p.log.String(), s) {
			p.t.Fatalf("%s exited (code %d) before logging %q", p.name, p.code, s)
		}
		return strings.Contains(p.log.String(), s)
	})
}

// logMark is a position in the process's log, for waitLogCount.
func (p *proc) logMark() int { return len(p.log.String()) }

// waitLogCount waits until the log written after mark holds sub n times;
// the process must stay up meanwhile.
func (p *proc) waitLogCount(mark int, within time.Duration, sub string, n int) {
	p.t.Helper()
	testenv.Eventually(p.t, within, fmt.Sprintf("%s to log %q %d times", p.name, sub, n), func() bool {
		if p.exited() {
			p.t.Fatalf("%s exited (code %d) while waiting for it to log %q", p.name, p.code, sub)
		}
		return strings.Count(p.log.String()[mark:], sub) >= n
	})
}

// ---------------------------------------------------------------------
// Checks from the outside.

// jobRow is what the tests read of a job.
type jobRow struct {
	ID         int64
	Route      string
	State      string
	Attempts   int
	Token      int64 // 0 before the first claim
	Key        string
	Version    int64 // -1 when none
	DedupeKey  string
	Partition  int32 // -1 when not from a record
	Offset     int64 // -1 when not from a record
	Payload    []byte
	LastError  string
	StartedAt  *time.Time // nil while no attempt runs
	FinishedAt *time.Time // nil while unfinished
}

func (j jobRow) String() string {
	at := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.Format("15:04:05.000")
	}
	return fmt.Sprintf("{job %d route %s %s attempts %d token %d key %q version %d dedupe %q from %d/%d payload %q error %q started %s finished %s}",
		j.ID, j.Route, j.State, j.Attempts, j.Token, j.Key, j.Version, j.DedupeKey, j.Partition, j.Offset, j.Payload,
		j.LastError, at(j.StartedAt), at(j.FinishedAt))
}

// jobs reads every job of the store's schema, by id.
func jobs(t *testing.T, s *pgstore.Store) []jobRow {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := s.Pool().Query(ctx, `SELECT id, route, state, attempts, coalesce(token, 0), key,
		coalesce(version, -1), dedupe_key, coalesce(src_partition, -1), coalesce(src_offset, -1), payload,
		coalesce(last_error, ''), started_at, finished_at FROM all_jobs ORDER BY id`)
	if err != nil {
		t.Fatalf("read jobs: %v", err)
	}
	defer rows.Close()
	var out []jobRow
	for rows.Next() {
		var j jobRow
		if err := rows.Scan(&j.ID, &j.Route, &j.State, &j.Attempts, &j.Token, &j.Key, &j.Version, &j.DedupeKey,
			&j.Partition, &j.Offset, &j.Payload, &j.LastError, &j.StartedAt, &j.FinishedAt); err != nil {
			t.Fatalf("scan job: %v", err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read jobs: %v", err)
	}
	return out
}

// jobByID reads one job, which must exist.
func jobByID(t *testing.T, s *pgstore.Store, id int64) jobRow {
	t.Helper()
	for _, j := range jobs(t, s) {
		if j.ID == id {
			return j
		}
	}
	t.Fatalf("job %d does not exist", id)
	return jobRow{}
}

// jobByDedupe returns the job whose dedupe key is key, or nil.
func jobByDedupe(t *testing.T, s *pgstore.Store, key string) *jobRow {
	t.Helper()
	for _, j := range jobs(t, s) {
		if j.DedupeKey == key {
			return &j
		}
	}
	return nil
}

// storedOffsets returns kafka_offsets.next_offset by partition.
func storedOffsets(t *testing.T, s *pgstore.Store, group, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, err := s.OffsetLoad(ctx, group, []string{topic})
	if err != nil {
		t.Fatalf("load offsets: %v", err)
	}
	out := map[int32]int64{}
	for p, o := range got[topic] {
		out[p] = o
	}
	return out
}

// endOffsets returns the topic's end (high watermark) offset by partition.
func endOffsets(t *testing.T, adm *kadm.Client, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	los, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("list end offsets: %v", err)
	}
	out := map[int32]int64{}
	los.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset of %s/%d: %v", o.Topic, o.Partition, o.Err)
		}
		out[o.Partition] = o.Offset
	})
	return out
}

// offsetsCovered reports whether every partition with records has its
// stored next offset at the end offset.
func offsetsCovered(stored, end map[int32]int64) bool {
	for p, e := range end {
		if e == 0 {
			continue
		}
		if stored[p] != e {
			return false
		}
	}
	return true
}

// ---------------------------------------------------------------------
// Consumer group.

var reMemberID = regexp.MustCompile(`"member_id":"([^"]+)"`)

// evictMembers removes a killed process's members from its consumer group,
// as the broker would once their sessions expired. It exists for speed
// only: until kafka.session_timeout (10s by default) passes, the group
// cannot rebalance to the restarted process. A dead member evicted is exactly a dead member
// expired; nothing a live process does is skipped.
//
// The ids come from the dead process's own log (franz-go logs the id the
// broker hands it before it ever joins) and from DescribeGroups; with one
// process at a time, every member listed is dead.
func evictMembers(t *testing.T, group string, dead *proc) {
	t.Helper()
	ids := map[string]bool{}
	for _, m := range reMemberID.FindAllStringSubmatch(dead.log.String(), -1) {
		ids[m[1]] = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	described, err := testenv.Admin(t).DescribeGroups(ctx, group)
	if err != nil {
		t.Fatalf("describe group %s: %v", group, err)
	}
	for _, g := range described {
		for _, m := range g.Members {
			ids[m.MemberID] = true
		}
	}
	leaveGroup(t, group, dead.name, ids)
}

// leaveGroup sends LeaveGroup for the given member ids of a dead process.
// Failing to evict only costs time (the sessions then expire), so it is
// logged, not fatal. UNKNOWN_MEMBER_ID and GROUP_ID_NOT_FOUND mean the
// members are gone already, as wanted.
func leaveGroup(t *testing.T, group, who string, ids map[string]bool) {
	t.Helper()
	if len(ids) == 0 {
		return
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(testenv.Brokers(t)...))
	if err != nil {
		t.Fatalf("kafka client: %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = group
	for id := range ids {
		m := kmsg.NewLeaveGroupRequestMember()
		m.MemberID = id
		reason := "test: evicting a member whose process was killed"
		m.Reason = &reason
		req.Members = append(req.Members, m)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil && !errors.Is(err, kerr.UnknownMemberID) && !errors.Is(err, kerr.GroupIDNotFound) {
		t.Logf("evicting the members of %s from group %s failed (their sessions will expire instead): %v",
			who, group, err)
	}
}
