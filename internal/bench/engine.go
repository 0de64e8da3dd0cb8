package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	switchyard "github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/workers"
)

// pollInterval of the bench queue: an idle pool looks for work this often.
const pollInterval = 10 * time.Millisecond

// benchPrefetch is the engine's prefetch, × its concurrency: at 64
// workers, 448 prefetched jobs, a local queue of 512 as graphile-worker's
// 500 in bench/peers. Measured against a pool's worth (1 ×): claims of
// 60 → 155 jobs, work_jobs_per_s +21 % (docs/performance.md).
const benchPrefetch = config.MaxPrefetch - 1

// stallAfter fails a wait that sees no progress for this long.
const stallAfter = time.Minute

// startEngine starts the real engine for one route and role, on the bench
// schema, with the admin server off. It is the production wiring: the
// config goes through defaults and validation as a YAML file would, and
// the engine builds the consumer, dispatcher and targets from it.
func (e *env) startEngine(ctx context.Context, role string, route config.Route, h workers.Handler,
	kopts ...kgo.Opt) (*switchyard.Engine, error) {
	return e.startEngineFor(ctx, role, []config.Route{route}, e.cfg.Concurrency, h, kopts...)
}

// startEngineFor is startEngine for several routes, every queue they name
// with the given concurrency, and h registered for every Go kind.
func (e *env) startEngineFor(ctx context.Context, role string, routes []config.Route, concurrency int,
	h workers.Handler, kopts ...kgo.Opt) (*switchyard.Engine, error) {
	queues := map[string]config.Queue{}
	for _, r := range routes {
		// The bench's jobs are fast and uniform: a local queue of
		// graphile-worker's size in bench/peers (500), workers included.
		queues[r.Queue] = config.Queue{Concurrency: concurrency, Prefetch: benchPrefetch * concurrency,
			PollInterval: config.Duration(pollInterval)}
	}
	cfg := &config.Config{
		Kafka:    config.Kafka{Brokers: e.cfg.Brokers, Group: routes[0].Topic},
		Postgres: config.Postgres{URL: e.cfg.DatabaseURL, Schema: e.schema, MaxConns: e.cfg.MaxConns},
		HTTP:     config.HTTP{Listen: "off"},
		Queues:   queues,
		Routes:   routes,
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e.registry = prometheus.NewRegistry()
	eng, err := switchyard.New(cfg, switchyard.Options{Logger: e.cfg.Log, Role: role, Registry: e.registry,
		KafkaOpts: kopts})
	if err != nil {
		return nil, err
	}
	for _, r := range routes {
		if r.Target.Go && h != nil {
			if err := eng.Register(r.Kind, h); err != nil {
				return nil, err
			}
		}
	}
	if role != switchyard.RoleWork {
		e.groups = append(e.groups, cfg.Kafka.Group)
	}
	if err := eng.Start(ctx); err != nil {
		return nil, errors.Join(err, stopEngine(eng))
	}
	return eng, nil
}

// stopEngine stops an engine on a fresh context, so that it also stops
// cleanly after Ctrl-C.
func stopEngine(eng *switchyard.Engine) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return eng.Stop(ctx)
}

// noop is the Go handler of the burn-downs: it counts the call.
func (e *env) noop(context.Context, *workers.Job) error {
	e.calls.Add(1)
	return nil
}

// waitUntil polls cond every interval until it reports done. It fails
// when ctx ends, fatal (an engine's Done, if any) reports an error, or
// the progress cond reports has not moved for stallAfter.
func waitUntil(ctx context.Context, fatal <-chan error, every time.Duration, what string,
	cond func() (progress int64, done bool, err error)) error {
	t := time.NewTicker(every)
	defer t.Stop()
	last, lastMoved := int64(-1), time.Now()
	for {
		progress, done, err := cond()
		if err != nil || done {
			return err
		}
		if progress != last {
			last, lastMoved = progress, time.Now()
		} else if time.Since(lastMoved) > stallAfter {
			return fmt.Errorf("waiting for %s: no progress for %s (at %d)", what, stallAfter, progress)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-fatal:
			return fmt.Errorf("waiting for %s: %w", what, err)
		case <-t.C:
		}
	}
}

// queueDrained reports whether the bench queue has nothing left to run;
// progress is the number of jobs still owed. A dead job is an error: a
// no-op handler never fails, so something in the path did.
func (e *env) queueDrained(ctx context.Context) (int64, bool, error) {
	stats, err := e.store.QueueStats(ctx, pgstore.Groups{})
	if err != nil {
		return 0, false, err
	}
	q := stats[queue]
	if q == nil {
		return 0, true, nil
	}
	if q.Dead > 0 {
		return 0, false, fmt.Errorf("%d jobs ended dead", q.Dead)
	}
	left := q.Jobs["waiting"] + q.Jobs["queued"] + q.Jobs["running"] + q.Jobs[pgstore.Reserved] + q.Jobs["retrying"]
	return -left, left == 0, nil
}

// burnDown queues n jobs of route (not timed), then runs the engine's
// dispatcher on them and reports jobs/s from Start until the last job's
// success is committed. The route says what is measured: its target (Go
// or HTTP) and whether it is ordered.
func (e *env) burnDown(ctx context.Context, figure string, route config.Route, n int) error {
	if err := e.reset(ctx); err != nil {
		return err
	}
	if err := e.enqueue(ctx, route, 0, n); err != nil {
		return err
	}
	// Statistics as autovacuum would have them by now: without this, the
	// previous phase's (an empty lanes table, no waiting jobs) steer the
	// plans of this one.
	if err := e.analyze(ctx); err != nil {
		return err
	}
	e.calls.Store(0)
	var elapsed time.Duration
	since, err := e.dbNow(ctx)
	if err != nil {
		return err
	}
	err = e.withRSS(figure, func() error {
		start := time.Now()
		eng, err := e.startEngine(ctx, switchyard.RoleWork, route, workers.HandlerFunc(e.noop))
		if err != nil {
			return err
		}
		err = waitUntil(ctx, eng.Done(), 5*time.Millisecond, "handler calls", func() (int64, bool, error) {
			c := e.calls.Load()
			return c, c >= int64(n), nil
		})
		if err == nil {
			// Every job has run; the last completions are being written.
			// The engine counts an attempt's outcome once its completion
			// has committed, so the clock stops at the last commit.
			//
			// Why not the queue's depth: QueueStats reuses a count that
			// took 50 ms or more for twenty times as long, and at the end
			// of a burn-down the count reads the table's 200,000 dead
			// rows. The clock stopped up to 1.4 s after the last commit,
			// in some runs and not others: `bench --only work` spread
			// 31.2k–45.1k jobs/s while the steady middle of the same runs
			// spread 44.1k–47.6k (2026-12-06).
			err = waitUntil(ctx, eng.Done(), 5*time.Millisecond, "completions", func() (int64, bool, error) {
				return e.succeeded(n)
			})
		}
		elapsed = time.Since(start)
		if err == nil {
			// Not timed: the queue agrees. Its depth may be a count
			// reused for a while (pgstore's depthReuse), which is why it
			// does not stop the clock.
			err = waitUntil(ctx, eng.Done(), 10*time.Millisecond, "a drained queue", func() (int64, bool, error) {
				return e.queueDrained(ctx)
			})
		}
		return errors.Join(err, stopEngine(eng))
	})
	if err != nil {
		return err
	}
	if c := e.calls.Load(); c != int64(n) {
		e.note("%s: %d handler calls for %d jobs (retries)", figure, c, n)
	}
	txs, err := e.statements(ctx)
	if err != nil {
		return err
	}
	claimed := txs.jobs - txs.handedOff
	// The figure runs from Start to the last completion; the steady
	// middle says how much of it start-up and the tail took.
	if _, steady, err := e.steadyRate(ctx, []string{route.Topic}, since); err == nil {
		e.note("%s: %.0f jobs/s in the steady middle (completions between the 10th and 90th percentile)", figure, steady)
	}
	e.note("%s: %d claim statements (%.1f jobs each), %d completion statements (%.1f jobs each), %d jobs handed off by them",
		figure, txs.claims, float64(claimed)/float64(max(txs.claims, 1)),
		txs.completions, float64(txs.jobs)/float64(max(txs.completions, 1)), txs.handedOff)
	e.note("%s: the process used %.1f µs of CPU a job (user and system, start to stop)", figure,
		float64(e.phaseCPU.Microseconds())/float64(n))
	e.report(figure, float64(n)/elapsed.Seconds(), "jobs/s")
	return nil
}

// httpTarget serves a no-op HTTP target on loopback: every request is
// read, counted and answered 204.
func (e *env) httpTarget() (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			e.calls.Add(1)
			w.WriteHeader(http.StatusNoContent)
		})}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = srv.Serve(ln) }()
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		wg.Wait()
	}
	return "http://" + ln.Addr().String() + "/hook", stop, nil
}

// firstError keeps the first error of asynchronous produce callbacks.
type firstError struct {
	mu  sync.Mutex
	err error
}

func (f *firstError) record(_ *kgo.Record, err error) {
	if err == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

func (f *firstError) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// succeeded reports how many attempts of the engine started last
// succeeded (switchyard_job_attempts_total, counted once each completion
// has committed), done once n have; a dead job is an error, as in
// queueDrained.
func (e *env) succeeded(n int) (int64, bool, error) {
	series, err := e.gathered("switchyard_job_attempts_total")
	if err != nil {
		return 0, false, err
	}
	by := map[string]float64{}
	for _, m := range series {
		for _, l := range m.GetLabel() {
			if l.GetName() == "outcome" {
				by[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	if by["dead"] > 0 {
		return 0, false, fmt.Errorf("%.0f jobs ended dead", by["dead"])
	}
	ok := int64(by["succeeded"])
	return ok, ok >= int64(n), nil
}

// histogram reads a histogram of the engine started last: its count of
// observations and their sum.
func (e *env) histogram(name string) (uint64, float64, error) {
	series, err := e.gathered(name)
	if err != nil {
		return 0, 0, err
	}
	if series == nil {
		return 0, 0, fmt.Errorf("no %s", name)
	}
	var n uint64
	var sum float64
	for _, m := range series {
		n += m.GetHistogram().GetSampleCount()
		sum += m.GetHistogram().GetSampleSum()
	}
	return n, sum, nil
}

// gathered is the series of the named metric of the engine started last;
// nil when it has none.
func (e *env) gathered(name string) ([]*dto.Metric, error) {
	families, err := e.registry.Gather()
	if err != nil {
		return nil, err
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric(), nil
		}
	}
	return nil, nil
}
