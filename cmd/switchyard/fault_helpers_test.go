package main

// Helpers of the fault tests (fault_*_test.go, secrets_test.go): how many
// cycles to run, a span log that records when each target request opened
// and closed, a raw target for tests that need headers or a hijacked
// connection, one-shot commands, /metrics scraping, eviction of one killed
// member of a multi-process group, and the FAULT-SUMMARY line.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// faultCycles is how many times a scenario injects its fault: def, or
// SWITCHYARD_FAULT_CYCLES when set (`make test-faults` sets 20).
func faultCycles(t *testing.T, def int) int {
	t.Helper()
	s := os.Getenv("SWITCHYARD_FAULT_CYCLES")
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("SWITCHYARD_FAULT_CYCLES: %q is not a positive number", s)
	}
	return n
}

// ---------------------------------------------------------------------
// Spans: every request with the time it opened and closed.

// span is one request as the target saw it.
type span struct {
	call
	Path    string
	Method  string
	Remote  string // the client's address: which process called
	Server  string // the target's address the request came in on
	Version int64  // Switchyard-Version, -1 when absent
	Open    time.Time
	Close   time.Time // zero while the request is open
	Aborted bool      // the client went away before the answer
	Status  int       // what the target answered (0 when aborted or hijacked)
}

func (s span) String() string {
	return fmt.Sprintf("{job %d attempt %d token %d key %q version %d %s %s open %s dur %s aborted %v status %d}",
		s.JobID, s.Attempt, s.Token, s.Key, s.Version, s.Method, s.Path, s.Open.Format("15:04:05.000"),
		s.Close.Sub(s.Open).Round(time.Millisecond), s.Aborted, s.Status)
}

func (s span) closeOrNow() time.Time {
	if s.Close.IsZero() {
		return time.Now()
	}
	return s.Close
}

// spanLog records spans; it is safe for concurrent use.
type spanLog struct {
	mu    sync.Mutex
	spans []span
}

// opened records a request as it arrives and returns its index.
func (l *spanLog) opened(r *http.Request, c call) int {
	s := span{call: c, Path: r.URL.Path, Method: r.Method, Remote: r.RemoteAddr, Version: -1, Open: time.Now()}
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		s.Server = a.String()
	}
	if v, err := strconv.ParseInt(r.Header.Get("Switchyard-Version"), 10, 64); err == nil {
		s.Version = v
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.spans = append(l.spans, s)
	return len(l.spans) - 1
}

// closed records the end of request i.
func (l *spanLog) closed(i int, r *http.Request, status int) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.spans[i].Close = now
	l.spans[i].Aborted = r.Context().Err() != nil
	if !l.spans[i].Aborted {
		l.spans[i].Status = status
	}
}

// wrap makes a behaviour of the recording target record spans around b
// (nil: answer 200 at once).
func (l *spanLog) wrap(b behaviour) behaviour {
	return func(r *http.Request, c call) int {
		i := l.opened(r, c)
		status := 0
		if b != nil {
			status = b(r, c)
		}
		if status == 0 {
			status = http.StatusOK
		}
		l.closed(i, r, status)
		return status
	}
}

// all returns a copy of the spans so far, in arrival order.
func (l *spanLog) all() []span {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]span(nil), l.spans...)
}

// ofJob returns the spans of one job, in arrival order.
func (l *spanLog) ofJob(id int64) []span {
	var out []span
	for _, s := range l.all() {
		if s.JobID == id {
			out = append(out, s)
		}
	}
	return out
}

// overlapCheck walks groups of spans (per job, or per key of a lane) and
// sorts every pair that was open at once into allowed ones — the earlier
// holder was superseded by a later call of the same job with a higher
// token, i.e. it was a stale holder whose lease had been lost — and
// violations (anything else: two holders of one job, or two jobs of one
// lane at once).
func overlapCheck(groups map[string][]span) (stale int, violations []string) {
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ss := append([]span(nil), groups[k]...)
		sort.Slice(ss, func(i, j int) bool { return ss[i].Open.Before(ss[j].Open) })
		for i := range ss {
			for j := i + 1; j < len(ss) && ss[j].Open.Before(ss[i].closeOrNow()); j++ {
				a, b := ss[i], ss[j]
				if a.JobID == b.JobID && a.Token == b.Token {
					// One holder: a redirect followed or a request
					// re-sent by net/http, answered a moment apart.
					continue
				}
				if a.JobID == b.JobID && b.Token > a.Token {
					stale++
					continue
				}
				violations = append(violations, fmt.Sprintf("%s: %v and %v were open at once", k, a, b))
			}
		}
	}
	return stale, violations
}

// byJob groups spans by job id.
func byJob(ss []span) map[string][]span {
	out := map[string][]span{}
	for _, s := range ss {
		k := fmt.Sprintf("job %d", s.JobID)
		out[k] = append(out[k], s)
	}
	return out
}

// openOf returns a request of process p that is open at the target, if
// any: the process owns the socket the request came from (Linux /proc).
func (l *spanLog) openOf(p *proc) (span, bool) {
	ports := localPorts(p.cmd.Process.Pid)
	for _, s := range l.all() {
		if !s.Close.IsZero() {
			continue
		}
		if ports[connKey(s)] {
			return s, true
		}
	}
	return span{}, false
}

// waitBusy waits until one of the processes has a request open at the
// target and returns its index and that request, so that a kill lands
// with a job in flight.
func (l *spanLog) waitBusy(t *testing.T, procs []*proc, within time.Duration) (int, span) {
	t.Helper()
	var s span
	i := -1
	testenv.Eventually(t, within, "a process to have a request open at the target", func() bool {
		for j, p := range procs {
			if p.exited() {
				t.Fatalf("%s exited (code %d) by itself", p.name, p.code)
			}
			var ok bool
			if s, ok = l.openOf(p); ok {
				i = j
				return true
			}
		}
		return false
	})
	return i, s
}

// holdGate, while closed for business, holds every request at the
// target that has done its work, so that a process picked for a kill is
// sure to be killed with a request open (its work is a few milliseconds,
// less than it takes to find it and kill it).
type holdGate struct {
	mu sync.Mutex
	ch chan struct{} // nil: open
}

// wait blocks while the gate holds requests, or until r is cancelled.
func (g *holdGate) wait(r *http.Request) {
	g.mu.Lock()
	ch := g.ch
	g.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-r.Context().Done():
		}
	}
}

// killBusy holds requests, waits until one of the processes has one open,
// kills that process with SIGKILL, lets the requests go, and returns the
// killed process's index and when and how it was killed.
func (g *holdGate) killBusy(t *testing.T, l *spanLog, procs []*proc) (int, kill9) {
	t.Helper()
	g.mu.Lock()
	g.ch = make(chan struct{})
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		close(g.ch)
		g.ch = nil
		g.mu.Unlock()
	}()
	i, _ := l.waitBusy(t, procs, 30*time.Second)
	return i, killNow(procs[i])
}

// kill9 is one SIGKILL: when it landed, and the local ports the process
// had open then (which tell its requests at the target).
type kill9 struct {
	name  string
	at    time.Time
	ports map[string]bool
}

// killNow kills p with SIGKILL and says when, with its ports.
func killNow(p *proc) kill9 {
	k := kill9{name: p.name, ports: localPorts(p.cmd.Process.Pid)}
	k.at = time.Now()
	p.kill()
	return k
}

// killedMidCall checks that every call a kill cut off (open at the
// target when its process was killed: whatever the target answered went
// to a dead process) was followed by a call of the same job with a higher
// token: the job ran again under a new lease. It returns how many calls the kills
// cut off, and fails the test when none did: then no kill hit a job.
func killedMidCall(t *testing.T, l *spanLog, kills []kill9) int {
	t.Helper()
	all := l.all()
	cut := 0
	for _, k := range kills {
		for _, s := range all {
			if !k.ports[connKey(s)] || !s.Open.Before(k.at) || !s.Close.IsZero() && s.Close.Before(k.at) {
				continue
			}
			cut++
			later := false
			for _, o := range all {
				later = later || o.JobID == s.JobID && o.Token > s.Token
			}
			if !later {
				t.Errorf("job %d was cut off at the target (token %d) by the kill of %s and never ran again: %v",
					s.JobID, s.Token, k.name, l.ofJob(s.JobID))
			}
		}
	}
	if cut == 0 {
		t.Errorf("none of the %d kills cut off a call in flight", len(kills))
	}
	return cut
}

// connKey names the connection a request came in on as
// "clientport>serverport", the form localPorts returns. Both ends are
// needed: Linux reuses a local port for connections to different
// destinations, so a client port alone can belong to two processes.
func connKey(s span) string {
	_, client, _ := net.SplitHostPort(s.Remote)
	_, server, _ := net.SplitHostPort(s.Server)
	return client + ">" + server
}

// localPorts returns the connections process pid has open, as
// "localport>remoteport".
func localPorts(pid int) map[string]bool {
	ports := map[string]bool{}
	conns, _ := tcpConns(pid) // what was read, if not all
	for _, c := range conns {
		ports[strconv.Itoa(c.localPort)+">"+strconv.Itoa(c.remotePort)] = true
	}
	return ports
}

// tcpConn is one TCP connection of a process, as /proc/net/tcp{,6}
// shows it: the remote address in the kernel's hex and byte order
// (127.0.0.1 is 0100007F), the state in hex (01: ESTABLISHED).
type tcpConn struct {
	localPort, remotePort int
	remoteAddr, state     string
}

// tcpConns returns the TCP connections of process pid: the socket inodes
// of /proc/<pid>/fd matched against the kernel's TCP tables. The error
// is the first thing that could not be read.
func tcpConns(pid int) ([]tcpConn, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if inode, ok := strings.CutPrefix(link, "socket:["); ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	var out []tcpConn
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if errors.Is(err, fs.ErrNotExist) && f == "/proc/net/tcp6" {
			continue // no IPv6 on this machine
		}
		if err != nil {
			return out, err
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fields := strings.Fields(line)
			if len(fields) < 10 || !inodes[fields[9]] {
				continue
			}
			_, hexLocal, _ := strings.Cut(fields[1], ":")
			remote, hexRemote, _ := strings.Cut(fields[2], ":")
			l, err1 := strconv.ParseUint(hexLocal, 16, 16)
			r, err2 := strconv.ParseUint(hexRemote, 16, 16)
			if err1 == nil && err2 == nil {
				out = append(out, tcpConn{localPort: int(l), remotePort: int(r), remoteAddr: remote, state: fields[3]})
			}
		}
	}
	return out, nil
}

// ---------------------------------------------------------------------
// A raw target, for answers the recording target cannot give (headers,
// redirects, hijacked connections).

// rawTarget records spans around a handler that writes its own answer.
type rawTarget struct {
	srv   *httptest.Server
	spans spanLog
}

// rawHandler answers one request; it returns the status it wrote (0 when
// it hijacked the connection or the client went away).
type rawHandler func(w http.ResponseWriter, r *http.Request, c call) int

func newRawTarget(t *testing.T, h rawHandler) *rawTarget {
	t.Helper()
	rt := &rawTarget{}
	rt.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := readCall(r)
		i := rt.spans.opened(r, c)
		status := h(w, r, c)
		rt.spans.closed(i, r, status)
	}))
	t.Cleanup(func() {
		rt.srv.CloseClientConnections()
		rt.srv.Close()
	})
	return rt
}

// resetConn hijacks the request's connection and closes it with a TCP
// reset (linger 0), as a crashing target or a middlebox would.
func resetConn(t *testing.T, w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.Errorf("hijack: %v", err)
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// ---------------------------------------------------------------------
// Processes with an environment of their own, and one-shot commands.

// runCmd runs the binary to completion (at most within) and returns its
// stdout, stderr and exit code.
func runCmd(t *testing.T, within time.Duration, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = append(os.Environ(), env...)
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("switchyard %s did not finish within %s\nstdout: %s\nstderr: %s", strings.Join(args, " "), within, &out, &errb)
	}
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("switchyard %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// stopProc sends SIGSTOP (or SIGCONT) to a process: a stall the process
// cannot notice, as a long GC pause, a frozen VM or a swapped-out host.
func stopProc(t *testing.T, p *proc, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(p.cmd.Process.Pid, sig); err != nil {
		t.Fatalf("%s to %s: %v", sig, p.name, err)
	}
}

// term sends SIGTERM and checks the process stops cleanly (I7): exit 0.
// It must still be running: a process that exited by itself did not
// recover from what the test did to it.
func term(t *testing.T, p *proc, within time.Duration) {
	t.Helper()
	if p.exited() {
		t.Fatalf("%s exited by itself with code %d; it should have recovered and kept running", p.name, p.code)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(within); code != 0 {
		t.Errorf("%s exited with code %d after SIGTERM, want 0 (I7)", p.name, code)
	}
}

var reAdminAddr = regexp.MustCompile(`"msg":"admin API listening","addr":"([^"]+)"`)

// adminAddr waits for the process to log its admin address and returns it.
func adminAddr(t *testing.T, p *proc) string {
	t.Helper()
	p.waitLog(30*time.Second, "admin API listening")
	m := reAdminAddr.FindStringSubmatch(p.log.String())
	if m == nil {
		t.Fatalf("%s: no admin address in its log", p.name)
	}
	return m[1]
}

// ---------------------------------------------------------------------
// HTTP to the admin API.

// adminGet GETs a path of the admin API (with the bearer token when not
// empty) and returns the status and body. A client of its own without
// keep-alives leaves no goroutine behind for goleak.
func adminGet(t *testing.T, addr, path, token string) (int, string) {
	t.Helper()
	if token != "" {
		token = "Bearer " + token
	}
	return adminGetAuth(t, addr, path, token)
}

// adminGetAuth is adminGet with the whole Authorization header.
func adminGetAuth(t *testing.T, addr, path, auth string) (int, string) {
	t.Helper()
	return apiAs(t, addr, http.MethodGet, path, auth)
}

// metricSum scrapes /metrics and sums the samples of a metric whose
// labels include every given `name="value"` pair.
func metricSum(t *testing.T, addr, metric string, labels ...string) float64 {
	t.Helper()
	_, body := adminGet(t, addr, "/metrics", "")
	sum := 0.0
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, metric+"{") && !strings.HasPrefix(line, metric+" ") {
			continue
		}
		sel, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(sel, l)
		}
		if !match {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			sum += v
		}
	}
	return sum
}

// ---------------------------------------------------------------------
// Consumer group.

// evictDead removes the members of one killed process from its group, as
// the broker would once their sessions expired (kafka.session_timeout,
// 10s by default). Unlike evictMembers it only evicts the ids the dead
// process logged, so live members of a multi-process group are left
// alone. Failing only costs time (the sessions then expire), so it logs.
func evictDead(t *testing.T, group string, dead *proc) {
	t.Helper()
	ids := map[string]bool{}
	for _, m := range reMemberID.FindAllStringSubmatch(dead.log.String(), -1) {
		ids[m[1]] = true
	}
	leaveGroup(t, group, dead.name, ids)
}

// ---------------------------------------------------------------------
// Rows, and the summary line.

// sameRow reports whether two reads of a job show the same row: every
// column but the payload, which nothing writes, and started_at, which
// only a claim or the holder itself moves (a claim changes the token).
func sameRow(a, b jobRow) bool {
	sameTime := func(x, y *time.Time) bool { return x == nil && y == nil || x != nil && y != nil && x.Equal(*y) }
	return a.ID == b.ID && a.Route == b.Route && a.State == b.State && a.Attempts == b.Attempts &&
		a.Token == b.Token && a.Key == b.Key && a.Version == b.Version && a.DedupeKey == b.DedupeKey &&
		a.Partition == b.Partition && a.Offset == b.Offset && a.LastError == b.LastError &&
		sameTime(a.FinishedAt, b.FinishedAt)
}

// staleAccepted counts finished jobs whose final state was not written
// by the holder of their last lease: the row's token (that of the last
// claim, which JobComplete never changes) has no call at the target, or
// the row finished before the target answered the call carrying that
// token. A completion from a holder whose lease was lost that got
// through (I4 broken) shows up exactly so. Postgres runs on this host, so
// its now() and time.Now() read the same clock; 5ms absorbs rounding.
func staleAccepted(rows []jobRow, ss []span) (n int, why []string) {
	byToken := map[int64]span{}
	for _, s := range ss {
		if s.Token != 0 {
			byToken[s.Token] = s
		}
	}
	for _, j := range rows {
		if j.State != "succeeded" || j.Token == 0 {
			continue
		}
		s, ok := byToken[j.Token]
		switch {
		case !ok:
			n++
			why = append(why, fmt.Sprintf("job %d succeeded with token %d that no call carried", j.ID, j.Token))
		case s.Close.IsZero() || j.FinishedAt == nil || j.FinishedAt.Before(s.Close.Add(-5*time.Millisecond)):
			n++
			finished := "never"
			if j.FinishedAt != nil {
				finished = j.FinishedAt.Format("15:04:05.000")
			}
			why = append(why, fmt.Sprintf("job %d finished at %s, before its last holder's call %v was answered",
				j.ID, finished, s))
		}
	}
	return n, why
}

// redeliveries counts attempts that reached the target past each job's
// first: distinct (job, token) pairs minus distinct jobs. Requests that
// share a token are one attempt (a redirect followed, or net/http
// re-sending an idempotent request on a fresh connection).
func redeliveries(ss []span) int {
	jobs, attempts := map[int64]bool{}, map[[2]int64]bool{}
	for _, s := range ss {
		if s.JobID == 0 {
			continue
		}
		jobs[s.JobID] = true
		attempts[[2]int64{s.JobID, s.Token}] = true
	}
	return len(attempts) - len(jobs)
}

// faultSummary is the one line each Fault scenario ends with:
//
//   - produced: records the test wrote to Kafka;
//   - jobs: job rows in the test's schema;
//   - lost: produced records with neither a job row (matched by topic,
//     partition and offset) nor a DLQ entry — I1;
//   - duplicate_jobs: job rows past one per produced record (rows sharing
//     a source, plus rows beyond the record count) — I2;
//   - order_violations: pairs of target calls open at once for one job
//     (or one key of a lane) that a superseded stale holder does not
//     explain, plus, in lanes, a key whose calls started at a lower
//     version than an earlier call — I3/I4;
//   - stale_completions_accepted: completions from a holder whose lease
//     was lost that changed a row (see staleAccepted; the SIGSTOP test
//     observes it directly) — I4;
//   - redeliveries: attempts (distinct tokens) that reached the target
//     past each job's first.
type faultSummary struct {
	produced, jobs, lost, duplicateJobs, orderViolations int
	staleCompletionsAccepted, redeliveries               int
}

// add counts o, another run of the same scenario, in s.
func (s *faultSummary) add(o faultSummary) {
	s.produced += o.produced
	s.jobs += o.jobs
	s.lost += o.lost
	s.duplicateJobs += o.duplicateJobs
	s.orderViolations += o.orderViolations
	s.staleCompletionsAccepted += o.staleCompletionsAccepted
	s.redeliveries += o.redeliveries
}

// report prints the line to the test log and to stdout, and fails the
// test unless the invariant counters are 0.
func (s faultSummary) report(t *testing.T, scenario string) {
	t.Helper()
	line := fmt.Sprintf("FAULT-SUMMARY scenario=%s produced=%d jobs=%d lost=%d duplicate_jobs=%d order_violations=%d stale_completions_accepted=%d redeliveries=%d",
		scenario, s.produced, s.jobs, s.lost, s.duplicateJobs, s.orderViolations, s.staleCompletionsAccepted, s.redeliveries)
	t.Log(line)
	fmt.Println(line)
	if s.lost != 0 || s.duplicateJobs != 0 || s.orderViolations != 0 || s.staleCompletionsAccepted != 0 {
		t.Errorf("invariant counters not zero: %s", line)
	}
}

// sourceCheck matches produced records to job rows by (partition,
// offset) and returns the lost and duplicate counts of the summary. A
// record parked in the DLQ counts as not lost.
func sourceCheck(t *testing.T, s *pgstore.Store, topic string, rows []jobRow, produced map[[2]int64]bool) (lost, dups int) {
	t.Helper()
	have := map[[2]int64]int{}
	for _, j := range rows {
		have[[2]int64{int64(j.Partition), j.Offset}]++
	}
	for src, n := range have {
		if n > 1 {
			dups += n - 1
			t.Errorf("I2: %d job rows come from %s/%d/%d", n, topic, src[0], src[1])
		}
	}
	for src := range produced {
		if have[src] > 0 {
			continue
		}
		if testenv.Count(t, s, `SELECT count(*) FROM dlq_entries WHERE src_topic = $1 AND src_partition = $2 AND src_offset = $3`,
			topic, src[0], src[1]) > 0 {
			continue
		}
		lost++
		t.Errorf("I1: record %s/%d/%d has no job row and no DLQ entry", topic, src[0], src[1])
	}
	if extra := len(rows) - len(produced) - dups; extra > 0 {
		dups += extra
		t.Errorf("I2: %d job rows beyond the %d records produced", extra, len(produced))
	}
	return lost, dups
}
