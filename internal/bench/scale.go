package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	switchyard "github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/workers"
)

// The scale curves of `switchyard bench --scale`: how the cost of a job
// grows with what surrounds it. Each curve varies one thing — queues,
// lanes, future jobs, concurrent leases, payload size, processes — and
// keeps the work per job the same, so a flat curve (no point costing
// flatTarget times the first or more) is the promise and a rising one is
// a cost to explain. Flat is judged one way: a point that does better
// than the first (more queues bring more workers) costs nothing.
//
// A point measures two things while the engine burns its jobs down:
//   - jobs/s in the steady middle of the run: the completions between the
//     10th and 90th percentile of finished_at, so that start-up (group
//     join, a child process's start) and the tail do not count, and
//     points with different start-up costs compare;
//   - claim p99: claims of 10 jobs (completed at once) from the bench's
//     own pool, timed on the point's state before its load starts, or,
//     where the state only exists under load (leases held, processes),
//     beside it (see load.probe). Beside it means at a steady offered
//     load below what the machine can do, as the quiet probes are: timed
//     beside a burn-down that saturates both cores, a claim measures its
//     wait for a CPU, which grows with every process added whatever the
//     database does (kept as a figure of its own, claim_ms_p99_saturated).

// flatTarget is the most a point may cost relative to the first.
const flatTarget = 1.2

// scaleCurve is one curve: its points, the figures that must stay flat,
// and those of its figures that are ratios of two others.
type scaleCurve struct {
	name   string
	xs     []int
	flat   []string
	ratios []ratio
	point  func(e *env, ctx context.Context, x int) ([]figure, error)
}

// ratio is a figure that is the ratio of two others of its point.
type ratio struct {
	name string
	of   [2]string
}

var scaleCurves = []scaleCurve{
	{name: "queues", xs: []int{1, 10, 100}, flat: []string{"jobs_per_s", "claim_ms_p99"}, point: (*env).scaleQueues},
	{name: "lanes", xs: []int{10_000, 100_000, 1_000_000}, flat: []string{"jobs_per_s", "claim_ms_p99"},
		point: (*env).scaleLanes},
	{name: "future", xs: []int{0, 1_000_000}, flat: []string{"jobs_per_s", "claim_ms_p99"}, point: (*env).scaleFuture},
	{name: "leases", xs: []int{64, 1000, 10_000}, flat: []string{"efficiency", "claim_ms_p99"},
		ratios: []ratio{{"efficiency", [2]string{"jobs_per_s", "ideal_jobs_per_s"}}}, point: (*env).scaleLeases},
	{name: "payload", xs: []int{200, 1000, 10_000, 100_000}, flat: []string{"ingest_copy_ratio"},
		ratios: []ratio{{"ingest_copy_ratio", [2]string{"ingest_mb_per_s", "copy_mb_per_s"}}}, point: (*env).scalePayload},
	{name: "processes", xs: []int{1, 2, 4}, flat: []string{"jobs_per_s", "claim_ms_p99"}, point: (*env).scaleProcesses},
}

// ScaleNames lists what --only accepts with --scale.
func ScaleNames() []string {
	var out []string
	for _, c := range scaleCurves {
		out = append(out, c.name)
	}
	return out
}

func selectCurves(only []string) ([]scaleCurve, error) {
	if len(only) == 0 {
		return scaleCurves, nil
	}
	var out []scaleCurve
	for _, c := range scaleCurves {
		if slices.Contains(only, c.name) {
			out = append(out, c)
		}
	}
	for _, name := range only {
		if !slices.Contains(ScaleNames(), name) {
			return nil, fmt.Errorf("only: unknown curve %q; known with --scale: %s", name, strings.Join(ScaleNames(), ", "))
		}
	}
	return out, nil
}

// runCurve runs a curve's points in order, cfg.Rounds times over, prints
// each figure's best round and notes how flat the curve is. The best of
// rounds, because noise on a shared machine only ever makes a point look
// worse, and a curve that ran its points in one order would otherwise
// charge a drift over minutes to its last points.
func (e *env) runCurve(ctx context.Context, c scaleCurve) error {
	best := map[string]figure{} // each figure's best reading so far
	var names []string
	for round := range e.cfg.Rounds {
		for _, x := range c.xs {
			if err := ctx.Err(); err != nil {
				return err
			}
			start := time.Now()
			figures, err := c.point(e, ctx, x)
			if err != nil {
				return fmt.Errorf("%s at %d: %w", c.name, x, err)
			}
			var line []string
			for _, f := range figures {
				name := scaleFigure(c.name, x, f.metric)
				b, seen := best[name]
				if !seen {
					names = append(names, name)
				}
				if !seen || f.better(b) {
					best[name] = f
				}
				line = append(line, fmt.Sprintf("%s %s", f.metric, strconv.FormatFloat(f.value, 'f', 2, 64)))
			}
			e.note("scale %s %d round %d: %s (%s, load average %s)", c.name, x, round+1, strings.Join(line, ", "),
				time.Since(start).Round(100*time.Millisecond), loadAverage())
		}
	}
	// A ratio of two figures is the ratio of their best readings, which
	// may come from different rounds.
	for _, x := range c.xs {
		for _, metric := range c.ratios {
			name := scaleFigure(c.name, x, metric.name)
			f := best[name]
			f.value = best[scaleFigure(c.name, x, metric.of[0])].value / best[scaleFigure(c.name, x, metric.of[1])].value
			best[name] = f
		}
	}
	for _, name := range names {
		e.report(name, best[name].value, best[name].unit)
	}
	for _, metric := range c.flat {
		first := best[scaleFigure(c.name, c.xs[0], metric)]
		worst := 1.0
		for _, x := range c.xs[1:] {
			worst = max(worst, first.growth(best[scaleFigure(c.name, x, metric)]))
		}
		e.note("scale %s %s: worst/first %.2f (target ≤ %.1f: %s)", c.name, metric, worst, flatTarget,
			verdict(worst <= flatTarget))
	}
	return nil
}

// figure is one measurement of a scale point.
type figure struct {
	metric string
	value  float64
	unit   string
}

// better reports whether f is a better reading than g of the same
// figure: a lower latency, a higher anything else.
func (f figure) better(g figure) bool { return f.growth(g) > 1 }

// growth is how much more g costs than f: a latency's ratio, a rate's
// inverse ratio.
func (f figure) growth(g figure) float64 {
	if f.unit == "ms" {
		return g.value / f.value
	}
	return f.value / g.value
}

func scaleFigure(curve string, x int, metric string) string {
	return fmt.Sprintf("scale_%s_%d_%s", curve, x, metric)
}

// load is what a point's engines run: jobs already queued on routes.
type load struct {
	routes      []config.Route
	jobs        int
	concurrency int // per queue
	handler     workers.Handler
	// processes > 0 runs that many `switchyard run --role work` processes
	// (HTTP routes only) instead of one engine in this process.
	processes int
	// probe says when the claims are timed, and probeQueue where (for
	// probeBefore; the others use a queue of their own, probeQueue).
	probe      probeMode
	probeQueue string
}

// probeMode is when a point times its claims.
type probeMode int

const (
	// probeBefore: before the load starts, on the point's own state,
	// the machine quiet.
	probeBefore probeMode = iota
	// probeHeld: once the load's first jobs hold every worker (leases
	// held, nothing completing), the machine quiet again.
	probeHeld
	// probePaced: one claim every probeEvery beside the load, for what
	// only exists with the load running (several processes): while it
	// burns its jobs down (claim_ms_p99_saturated), then, for the
	// figure, while it serves a steady offered load (pacedLoad).
	probePaced
)

// probeQueue is the queue of the probes that do not take the point's
// own jobs.
const probeQueue = "probe"

// quietClaims is how many claims a quiet probe times, after warm.
const quietClaims, warm = 1000, 20

// probeEvery is how often the probe claims under load: at 10 jobs a
// claim, a thousand jobs a second, a small share of any point's rate.
const probeEvery = 10 * time.Millisecond

// probeJobs is what the probe beside a load may claim: 20 s of claims
// beside the burn-down, and those beside the offered load after it.
func (e *env) probeJobs() int {
	return (int(20*time.Second/probeEvery) + e.pacedJobs()*int(time.Second/probeEvery)/e.cfg.Rate) * claimPer
}

// pacedJobs is how many jobs a paced probe's offered load brings: a
// fifth of the point's, at cfg.Rate a second (10 s and 1,000 claims
// timed at the defaults).
func (e *env) pacedJobs() int { return max(1, e.cfg.PointJobs/5) }

// measure runs l to the end and returns the point's jobs/s and claim p99.
func (e *env) measure(ctx context.Context, l load) ([]figure, error) {
	// The state a deployment keeps the tables in (as for the claim
	// figure): a point that bulk-loaded a million rows would otherwise
	// time their first vacuum and checkpoint along with its jobs.
	if err := e.settle(ctx); err != nil {
		return nil, err
	}
	var lat []time.Duration
	probed := 0 // jobs of the point that the probe ran
	switch l.probe {
	case probeBefore:
		// No more than a quarter of the jobs go to the probe.
		var err error
		if lat, probed, err = e.timeClaims(ctx, l.probeQueue, min(warm+quietClaims, l.jobs/4/claimPer)); err != nil {
			return nil, err
		}
	case probeHeld, probePaced:
		r := e.route("probe")
		r.Queue = probeQueue
		n := (warm + quietClaims) * claimPer
		if l.probe == probePaced {
			n = e.probeJobs()
		}
		if err := e.enqueue(ctx, r, 0, n); err != nil {
			return nil, err
		}
	}
	h := l.handler
	if h == nil {
		h = workers.HandlerFunc(e.noop)
	}
	held, release := make(chan struct{}), make(chan struct{})
	if l.probe == probeHeld {
		var holding atomic.Int64
		inner := h
		h = workers.HandlerFunc(func(ctx context.Context, job *workers.Job) error {
			if n := holding.Add(1); n <= int64(l.concurrency) {
				if n == int64(l.concurrency) {
					close(held)
				}
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return inner.Handle(ctx, job)
		})
	}
	since, err := e.dbNow(ctx)
	if err != nil {
		return nil, err
	}
	e.calls.Store(0)
	fatal, stop, err := e.startLoad(ctx, l, h)
	if err != nil {
		return nil, err
	}
	var p *probe
	switch l.probe {
	case probeHeld:
		err = waitUntil(ctx, fatal, 5*time.Millisecond, "every worker busy", func() (int64, bool, error) {
			select {
			case <-held:
				return 0, true, nil
			default:
				return 0, false, nil
			}
		})
		if err == nil {
			lat, _, err = e.timeClaims(ctx, probeQueue, warm+quietClaims)
		}
		close(release)
	case probePaced:
		p = e.startProbe(ctx, probeQueue)
	}
	names := routeNames(l.routes)
	if err == nil {
		err = e.waitDone(ctx, fatal, names, int64(l.jobs-probed))
	}
	var saturated []time.Duration
	if p != nil {
		var probeErr error
		saturated, probeErr = p.stop()
		err = errors.Join(err, probeErr)
	}
	var done int64
	var rate float64
	if err == nil {
		done, rate, err = e.steadyRate(ctx, names, since)
	}
	if err == nil && done != int64(l.jobs-probed) {
		err = fmt.Errorf("%d jobs finished under load, want %d", done, l.jobs-probed)
	}
	if err == nil && l.probe == probePaced {
		// On a settled state, as every quiet probe: the burn-down's dead
		// rows would otherwise be vacuumed, and its WAL checkpointed,
		// under the claims timed.
		if err = e.settle(ctx); err == nil {
			lat, err = e.pacedLoad(ctx, fatal, l)
		}
	}
	if err := errors.Join(err, stop()); err != nil {
		return nil, err
	}
	slices.Sort(lat)
	figures := []figure{{metric: "jobs_per_s", value: rate, unit: "jobs/s"},
		{metric: "claim_ms_p99", value: ms(percentile(lat, 0.99)), unit: "ms"}}
	if saturated != nil {
		slices.Sort(saturated)
		figures = append(figures, figure{metric: "claim_ms_p99_saturated", value: ms(percentile(saturated, 0.99)), unit: "ms"})
	}
	return figures, nil
}

// waitDone waits until the handler has been called for want more jobs
// since e.calls was reset and no job of routes is unfinished.
func (e *env) waitDone(ctx context.Context, fatal <-chan error, routes []string, want int64) error {
	err := waitUntil(ctx, fatal, 5*time.Millisecond, "handler calls", func() (int64, bool, error) {
		c := e.calls.Load()
		return c, c >= want, nil
	})
	if err != nil {
		return err
	}
	return waitUntil(ctx, fatal, 50*time.Millisecond, "completions", func() (int64, bool, error) {
		n, err := e.unfinished(ctx, routes)
		return -n, n == 0, err
	})
}

// pacedLoad offers the running load e.pacedJobs() more jobs of its first
// route at cfg.Rate a second, in a tick's worth every probeEvery, and
// times the probe's claims beside it until they have all run.
func (e *env) pacedLoad(ctx context.Context, fatal <-chan error, l load) ([]time.Duration, error) {
	route, n := l.routes[0], e.pacedJobs()
	base := e.calls.Load()
	p := e.startProbe(ctx, probeQueue)
	t := time.NewTicker(probeEvery)
	start, sent := time.Now(), 0
	var err error
	for sent < n && err == nil {
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case ferr := <-fatal:
			err = fmt.Errorf("offering a paced load: %w", ferr)
		case <-t.C:
			due := min(n, int(time.Since(start).Seconds()*float64(e.cfg.Rate)))
			if due > sent {
				err = e.enqueue(ctx, route, l.jobs+sent, due-sent)
				sent = due
			}
		}
	}
	t.Stop()
	if err == nil {
		err = e.waitDone(ctx, fatal, routeNames(l.routes), base+int64(n))
	}
	lat, probeErr := p.stop()
	return lat, errors.Join(err, probeErr)
}

// timeClaims claims (and completes) claimPer jobs of queue n times, and
// returns the times of all but the first warm (or first half), which warm
// the caches up, and how many jobs it took.
func (e *env) timeClaims(ctx context.Context, queue string, n int) ([]time.Duration, int, error) {
	var lat []time.Duration
	jobs := 0
	for i := range n {
		got, took, err := e.claimBatch(ctx, queue, claimPer)
		if err != nil {
			return nil, 0, err
		}
		jobs += got
		if i >= min(warm, n/2) {
			lat = append(lat, took)
		}
	}
	return lat, jobs, nil
}

func routeNames(routes []config.Route) []string {
	names := make([]string, len(routes))
	for i, r := range routes {
		names[i] = r.Topic
	}
	return names
}

// startLoad starts the point's engine, or its processes. fatal reports
// one that failed; stop stops them all.
func (e *env) startLoad(ctx context.Context, l load, h workers.Handler) (fatal <-chan error, stop func() error, err error) {
	if l.processes > 0 {
		return e.startProcesses(ctx, l)
	}
	eng, err := e.startEngineFor(ctx, switchyard.RoleWork, l.routes, l.concurrency, h)
	if err != nil {
		return nil, nil, err
	}
	return eng.Done(), func() error { return stopEngine(eng) }, nil
}

// probe times claims of a queue of its own beside the running load.
type probe struct {
	stopc chan struct{}
	done  chan struct{}
	// Written by the probe's goroutine until done is closed.
	lat []time.Duration
	err error
}

func (e *env) startProbe(ctx context.Context, queue string) *probe {
	p := &probe{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		// At random moments, probeEvery apart on average: a probe on a
		// ticker keeps one phase against a load that has its own (a
		// paced feed, a poll interval), and would time the same moment
		// of it every time.
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-p.stopc:
				return
			case <-t.C:
				t.Reset(time.Duration(rand.Int64N(int64(2 * probeEvery))))
			}
			_, took, err := e.claimBatch(ctx, queue, claimPer)
			p.lat, p.err = append(p.lat, took), err
			if err != nil {
				return
			}
		}
	}()
	return p
}

// stop ends the probe and returns the claim latencies it timed.
func (p *probe) stop() ([]time.Duration, error) {
	close(p.stopc)
	<-p.done
	if p.err == nil && len(p.lat) == 0 {
		p.err = errors.New("probe: no claim timed (the point ran for less than one probe interval)")
	}
	return p.lat, p.err
}

// scaleQueues: the same jobs spread over x queues, each configured as
// the one queue of the other curves (cfg.Concurrency workers), worked at
// once by one engine. (Splitting one concurrency budget over the queues
// instead measures smaller claim batches, not the number of queues.)
func (e *env) scaleQueues(ctx context.Context, x int) ([]figure, error) {
	if err := e.reset(ctx); err != nil {
		return nil, err
	}
	n := e.cfg.PointJobs / x * x
	var routes []config.Route
	for i := range x {
		r := e.route(fmt.Sprintf("queues%d_%d", x, i))
		r.Queue = fmt.Sprintf("q%d", i)
		routes = append(routes, r)
		if err := e.enqueue(ctx, r, 0, n/x); err != nil {
			return nil, err
		}
	}
	return e.measure(ctx, load{routes: routes, jobs: n, concurrency: e.cfg.Concurrency, probeQueue: routes[0].Queue})
}

// scaleLanes: an ordered burn-down with 20 jobs on each of
// PointJobs/20 active keys, spread over a lanes table of x lanes (the
// others idle, as after a long history of keys).
func (e *env) scaleLanes(ctx context.Context, x int) ([]figure, error) {
	if err := e.reset(ctx); err != nil {
		return nil, err
	}
	route := e.route("lanes")
	route.Ordered = true
	active := max(1, min(x, e.cfg.PointJobs/20))
	if err := e.insertLanes(ctx, route.Topic, x); err != nil {
		return nil, err
	}
	defer e.useShape(defaultShape(e.cfg))
	e.useShape(shape{keys: active, stride: x / active, pad: defaultShape(e.cfg).pad})
	if err := e.enqueue(ctx, route, 0, e.cfg.PointJobs); err != nil {
		return nil, err
	}
	return e.measure(ctx, load{routes: []config.Route{route}, jobs: e.cfg.PointJobs,
		concurrency: e.cfg.Concurrency, probeQueue: queue})
}

// scaleFuture: the work burn-down with x jobs scheduled a day ahead in
// the same queue, which every claim must pass over.
func (e *env) scaleFuture(ctx context.Context, x int) ([]figure, error) {
	if err := e.reset(ctx); err != nil {
		return nil, err
	}
	route := e.route("future")
	if err := e.insertFuture(ctx, route.Topic+"_later", x, e.record(route.Topic, 0).Value); err != nil {
		return nil, err
	}
	if err := e.enqueue(ctx, route, 0, e.cfg.PointJobs); err != nil {
		return nil, err
	}
	return e.measure(ctx, load{routes: []config.Route{route}, jobs: e.cfg.PointJobs,
		concurrency: e.cfg.Concurrency, probeQueue: queue})
}

// scaleLeases: x workers, each job cfg.SlowJob long on average, for ten
// rounds: x leases are held at once. Efficiency is jobs/s over the x/s ideal;
// claims are timed while the first x jobs hold every worker.
func (e *env) scaleLeases(ctx context.Context, x int) ([]figure, error) {
	if err := e.reset(ctx); err != nil {
		return nil, err
	}
	route := e.route("leases")
	n := 10 * x
	if err := e.enqueue(ctx, route, 0, n); err != nil {
		return nil, err
	}
	// Jobs take 0.5 to 1.5 × SlowJob (SlowJob on average), spread by
	// id: jobs that all took the same time would start and end in waves,
	// and each wave's ends would queue for the CPU together.
	slow := workers.HandlerFunc(func(ctx context.Context, job *workers.Job) error {
		select {
		case <-time.After(e.cfg.SlowJob/2 + time.Duration(job.ID*7919%1000)*e.cfg.SlowJob/1000):
		case <-ctx.Done():
			return ctx.Err()
		}
		e.calls.Add(1)
		return nil
	})
	figures, err := e.measure(ctx, load{routes: []config.Route{route}, jobs: n, concurrency: x, handler: slow,
		probe: probeHeld})
	if err != nil {
		return nil, err
	}
	ideal := float64(x) / e.cfg.SlowJob.Seconds()
	return append(figures, figure{metric: "ideal_jobs_per_s", value: ideal, unit: "jobs/s"},
		figure{metric: "efficiency", value: figures[0].value / ideal, unit: "ratio"}), nil
}

// scalePayload: ingest against COPY of the same rows (in the order
// ingest stored them, as ingest_records_per_s), by payload size; each
// point moves about the same bytes (up to cfg.Records records).
// Ingest is timed after its first batch (ingestTimes.steady): the group
// join would otherwise weigh on the large payloads' short runs alone.
func (e *env) scalePayload(ctx context.Context, x int) ([]figure, error) {
	const budget = 128 << 20
	defer e.useShape(defaultShape(e.cfg))
	e.useShape(shape{keys: e.cfg.Keys, stride: 1, pad: strings.Repeat("x", max(0, x-80))})
	n := min(e.cfg.Records, budget/x)
	// A topic per round: the bench's topics are never reused.
	t, err := e.ingestAndCopy(ctx, fmt.Sprintf("payload%d_%d", x, len(e.topics)), n, false)
	if err != nil {
		return nil, err
	}
	size := float64(len(e.record("", 0).Value)) / (1 << 20)
	ingest := float64(t.steadyRecords) * size / t.steady.Seconds()
	copied := float64(n) * size / t.copied.Seconds()
	return []figure{{metric: "ingest_mb_per_s", value: ingest, unit: "MiB/s"},
		{metric: "copy_mb_per_s", value: copied, unit: "MiB/s"},
		{metric: "ingest_copy_ratio", value: ingest / copied, unit: "ratio"}}, nil
}

// useShape makes later records of this run look like s.
func (e *env) useShape(s shape) { e.shape = s }

// scaleProcesses: x `switchyard run --role work` processes on one
// Postgres, each configured as the others (a fleet), through the HTTP
// target to the bench's loopback no-op server.
func (e *env) scaleProcesses(ctx context.Context, x int) ([]figure, error) {
	if e.cfg.Executable == "" {
		return nil, errors.New("no switchyard executable to start (Config.Executable)")
	}
	url, stopTarget, err := e.httpTarget()
	if err != nil {
		return nil, err
	}
	defer stopTarget()
	if err := e.reset(ctx); err != nil {
		return nil, err
	}
	route := e.route("processes")
	route.Target = config.Target{HTTP: &config.HTTPTarget{URL: url}}
	if err := e.enqueue(ctx, route, 0, e.cfg.PointJobs); err != nil {
		return nil, err
	}
	return e.measure(ctx, load{routes: []config.Route{route}, jobs: e.cfg.PointJobs,
		concurrency: e.cfg.Concurrency, processes: x, probe: probePaced})
}

// startProcesses starts l.processes child processes of the switchyard
// executable with role work on a config of the bench schema.
func (e *env) startProcesses(ctx context.Context, l load) (<-chan error, func() error, error) {
	dir, err := os.MkdirTemp("", "switchyard-bench-")
	if err != nil {
		return nil, nil, err
	}
	path := filepath.Join(dir, "switchyard.yaml")
	if err := os.WriteFile(path, []byte(e.processConfig(l)), 0o600); err != nil {
		return nil, nil, errors.Join(err, os.RemoveAll(dir))
	}
	fatal := make(chan error, l.processes)
	stopping := make(chan struct{})
	var cmds []*exec.Cmd
	var wg sync.WaitGroup
	stop := func() error {
		close(stopping)
		for _, c := range cmds {
			_ = c.Process.Signal(os.Interrupt)
		}
		wg.Wait()
		return os.RemoveAll(dir)
	}
	for i := range l.processes {
		cmd := exec.CommandContext(ctx, e.cfg.Executable, "run", "--config", path, "--role", switchyard.RoleWork)
		cmd.Env = append(os.Environ(), "SWITCHYARD_LOG_LEVEL=warn")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			return nil, nil, errors.Join(fmt.Errorf("start %s: %w", e.cfg.Executable, err), stop())
		}
		cmds = append(cmds, cmd)
		wg.Go(func() {
			// Until stop, any exit is a failure, a clean one too.
			err := cmd.Wait()
			select {
			case <-stopping:
			default:
				fatal <- fmt.Errorf("process %d exited (%v): %s", i, err, bytes.TrimSpace(stderr.Bytes()))
			}
		})
	}
	return fatal, stop, nil
}

// processConfig is the YAML config of the processes curve's children:
// the bench schema, l's routes and queues, no admin server. Their pools
// poll at the product's default interval, not the bench's: a fleet is
// woken by NOTIFY, and each process's idle polls would otherwise be a
// cost that grows with the fleet by the bench's choice.
func (e *env) processConfig(l load) string {
	var b strings.Builder
	fmt.Fprintf(&b, "kafka: {brokers: [%s], group: %q}\n", quoteAll(e.cfg.Brokers), e.schema+"_processes")
	fmt.Fprintf(&b, "postgres: {url: %q, schema: %q, max_conns: %d}\n", e.cfg.DatabaseURL, e.schema, e.cfg.MaxConns)
	b.WriteString("http: {listen: \"off\"}\nqueues:\n")
	for _, r := range l.routes {
		fmt.Fprintf(&b, "  %s: {concurrency: %d, prefetch: %d}\n", r.Queue, l.concurrency, l.concurrency)
	}
	b.WriteString("routes:\n")
	for _, r := range l.routes {
		fmt.Fprintf(&b, "  - {topic: %q, kind: %q, queue: %q, dedupe: {field: %q}, target: {http: {url: %q}}}\n",
			r.Topic, r.Kind, r.Queue, r.Dedupe.Field, r.Target.HTTP.URL)
	}
	return b.String()
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}
