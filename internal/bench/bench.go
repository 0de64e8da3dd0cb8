// Package bench is the benchmark suite of SPEC §9, run by `switchyard
// bench`. It measures the engine's own paths — the ingest consumer, the
// dispatcher with a Go and an HTTP target, pgstore's claim and completion
// statements — against the Kafka and Postgres it is given, and prints one
// `name value unit` line per figure so that runs can be compared, with
// context lines starting with '#'.
//
// It works in a schema (bench_<random>) and topics of its own and removes
// them when it ends, on failure and cancellation too. It never reads or
// writes the configured schema. Statements that only a benchmark runs
// (truncating, bulk-loading history, VACUUM) live in sql.go; everything
// the engine runs goes through pgstore as in production.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

// Config sizes a run. Zero values mean the defaults, which finish within
// 8 minutes on 2 cores shared with Kafka and Postgres.
type Config struct {
	// DatabaseURL names the Postgres server. Required.
	DatabaseURL string
	// MaxConns is the engine's Postgres pool size, as postgres.max_conns.
	// Defaults to 20.
	MaxConns int32
	// Brokers are the Kafka seed brokers. Required.
	Brokers []string
	// Records is how many records ingest_records_per_s consumes and
	// copy_rows_per_s loads. Defaults to 200,000.
	Records int
	// Jobs is the burn-down size of raw_claim, work and ordered. Defaults
	// to 200,000.
	Jobs int
	// HTTPJobs is the burn-down size through the HTTP target, and the bare
	// loop's requests. Defaults to 200,000, as work's: SPEC §9's
	// http_jobs_per_s is the unordered case through the target.
	HTTPJobs int
	// Keys is the number of distinct record keys (lanes of the ordered
	// route). Defaults to 10,000.
	Keys int
	// History is how many finished jobs are retained for the second claim
	// latency figure. Defaults to 10,000,000.
	History int
	// Future is how many jobs scheduled ahead the third claim latency
	// figure passes over. Defaults to 1,000,000.
	Future int
	// Concurrency is the worker pool size of the burn-downs and e2e.
	// Defaults to 64.
	Concurrency int
	// RawLoops is how many claim+complete loops raw_claim runs at once.
	// Defaults to 2.
	RawLoops int
	// Rate is the e2e offered load in records/s, and the jobs/s the
	// processes curve offers while it times claims. Defaults to 1,000.
	Rate int
	// Duration is how long e2e offers its load. Defaults to 20s.
	Duration time.Duration
	// Samples is the number of claims timed per claim latency figure.
	// Defaults to 2,000.
	Samples int
	// Scale runs the scale curves (scale.go) instead of the figures.
	Scale bool
	// PointJobs is the burn-down size of a scale point. Defaults to 50,000.
	PointJobs int
	// SlowJob is how long a job of the leases curve takes. Defaults to 1s.
	SlowJob time.Duration
	// Rounds is how many times each scale curve runs; each figure is its
	// best round. Defaults to 2.
	Rounds int
	// Repeat runs the selected figures this many times over, in turn
	// (work, grouped, work, grouped, …), so that a change in the machine's
	// load meets every figure alike; each figure is then its median, and
	// the ratios are of medians. Defaults to 1.
	Repeat int
	// Executable is the switchyard binary the processes curve starts;
	// empty skips that curve.
	Executable string
	// GC says how the process's garbage collector is paced, for the
	// context lines (the command sets it; the engine's CPU depends on it).
	GC string
	// Only names the figures (or groups) to run, or with Scale the
	// curves; empty runs them all.
	Only []string
	// Out receives the figures. Required.
	Out io.Writer
	// Log receives the engine's logs. Defaults to a no-op logger.
	Log *zap.Logger
}

func (c *Config) setDefaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Records, 200_000)
	def(&c.Jobs, 200_000)
	def(&c.HTTPJobs, 200_000)
	def(&c.Keys, 10_000)
	def(&c.History, 10_000_000)
	def(&c.Future, 1_000_000)
	def(&c.Concurrency, 64)
	def(&c.RawLoops, 2)
	def(&c.Rate, 1000)
	def(&c.Samples, 2000)
	def(&c.PointJobs, 50_000)
	def(&c.Rounds, 2)
	def(&c.Repeat, 1)
	if c.MaxConns == 0 {
		c.MaxConns = 20
	}
	if c.Duration == 0 {
		c.Duration = 20 * time.Second
	}
	if c.SlowJob == 0 {
		c.SlowJob = time.Second
	}
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
}

// Validate reports the first size or selection that cannot run, naming
// the field.
func (c *Config) Validate() error {
	switch {
	case c.DatabaseURL == "":
		return errors.New("database: not set: pass --config or set SWITCHYARD_DATABASE_URL")
	case len(c.Brokers) == 0:
		return errors.New("kafka brokers: not set: pass --config or set SWITCHYARD_KAFKA_BROKERS")
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"records", c.Records}, {"jobs", c.Jobs}, {"http-jobs", c.HTTPJobs}, {"keys", c.Keys},
		{"history", c.History}, {"future", c.Future}, {"concurrency", c.Concurrency}, {"raw-loops", c.RawLoops},
		{"rate", c.Rate}, {"samples", c.Samples}, {"point-jobs", c.PointJobs}, {"rounds", c.Rounds},
		{"repeat", c.Repeat}} {
		if f.v < 0 {
			return fmt.Errorf("%s: must not be negative, got %d", f.name, f.v)
		}
	}
	if c.Duration < 0 {
		return fmt.Errorf("duration: must not be negative, got %s", c.Duration)
	}
	if c.SlowJob < 0 {
		return fmt.Errorf("slow-job: must not be negative, got %s", c.SlowJob)
	}
	if c.Scale {
		_, err := selectCurves(c.Only)
		return err
	}
	_, err := selectGroups(c.Only)
	return err
}

// group is the unit that runs: one function, one or more figures.
type group struct {
	name    string
	figures []string
	run     func(*env, context.Context) error
}

// groups are run in this order: history last, because it leaves the
// table at millions of rows.
var groups = []group{
	{"ingest", []string{"ingest_records_per_s", "copy_rows_per_s"}, (*env).ingest},
	{"raw_claim", []string{"raw_claim_jobs_per_s"}, (*env).rawClaim},
	{"work", []string{"work_jobs_per_s"}, (*env).work},
	{"http", []string{"http_raw_requests_per_s", "http_jobs_per_s"}, (*env).http},
	{"ordered", []string{"ordered_jobs_per_s"}, (*env).ordered},
	{"capped", []string{"capped_jobs_per_s"}, (*env).capped},
	{"grouped", []string{"grouped_jobs_per_s"}, (*env).grouped},
	{"e2e", []string{"e2e_latency_p50_ms", "e2e_latency_p99_ms"}, (*env).e2e},
	{"claim", []string{"claim_ms_p99_at_0", "claim_ms_p99_at_10m", "claim_ms_p99_at_1m_future"}, (*env).claim},
}

// Names lists what --only accepts.
func Names() []string {
	var out []string
	for _, g := range groups {
		out = append(out, g.name)
		for _, f := range g.figures {
			if f != g.name {
				out = append(out, f)
			}
		}
	}
	return out
}

// selectGroups picks the groups named, by group or by figure name.
func selectGroups(only []string) ([]group, error) {
	if len(only) == 0 {
		return groups, nil
	}
	var out []group
	for _, name := range only {
		i := slices.IndexFunc(groups, func(g group) bool { return g.name == name || slices.Contains(g.figures, name) })
		if i < 0 {
			return nil, fmt.Errorf("only: unknown figure %q; known: %s", name, strings.Join(Names(), ", "))
		}
		if !slices.ContainsFunc(out, func(g group) bool { return g.name == groups[i].name }) {
			out = append(out, groups[i])
		}
	}
	// Keep the canonical order whatever order they were named in.
	slices.SortFunc(out, func(a, b group) int {
		return slices.IndexFunc(groups, func(g group) bool { return g.name == a.name }) -
			slices.IndexFunc(groups, func(g group) bool { return g.name == b.name })
	})
	return out, nil
}

// env is what every figure shares: the bench schema and its store, the
// Kafka client, what to clean up, and the results so far.
type env struct {
	cfg      Config
	schema   string
	store    *pgstore.Store
	kafka    *kgo.Client
	admin    *kadm.Client
	topics   []string // created; deleted by teardown
	groups   []string // consumer groups used; deleted by teardown
	results  map[string]float64
	rssKiB   int64         // highest RSS seen while engine components ran
	phaseCPU time.Duration // the CPU time the process spent in the last withRSS
	// siblings are further schemas of this run, dropped by teardown.
	siblings []*env
	// calls counts handler calls (Go or HTTP) of the engine run at hand.
	calls atomic.Int64
	// registry holds the metrics of the engine started last.
	registry *prometheus.Registry
	// shape of the records the figure at hand makes.
	shape shape
	// round is the round of the figures at hand (1…Config.Repeat); past
	// the last, report keeps figures as results.
	round int
	// rounds holds each repeated figure's values, roundOrder their names
	// in the order first reported, units their units.
	rounds     map[string][]float64
	roundOrder []string
	units      map[string]string
}

// Run runs the selected figures and prints them to cfg.Out. The schema
// and topics it made are removed before it returns, whatever happened.
func Run(ctx context.Context, cfg Config) (err error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	began := time.Now()
	e, err := setup(ctx, cfg)
	defer func() {
		if e != nil {
			err = errors.Join(err, e.teardown())
		}
	}()
	if err != nil {
		return err
	}
	if err := e.printContext(ctx); err != nil {
		return err
	}
	if cfg.Scale {
		curves, _ := selectCurves(cfg.Only)
		for _, c := range curves {
			if err := e.runCurve(ctx, c); err != nil {
				return err
			}
		}
		e.note("total %s", time.Since(began).Round(time.Second))
		return nil
	}
	selected, _ := selectGroups(cfg.Only)
	for e.round = 1; e.round <= cfg.Repeat; e.round++ {
		for _, g := range selected {
			if err := ctx.Err(); err != nil {
				return err
			}
			start := time.Now()
			if err := g.run(e, ctx); err != nil {
				return fmt.Errorf("%s: %w", g.name, err)
			}
			e.note("%s took %s (load average %s)", g.name, time.Since(start).Round(100*time.Millisecond), loadAverage())
		}
	}
	e.reportMedians()
	e.summary()
	e.note("total %s", time.Since(began).Round(time.Second))
	return nil
}

func setup(ctx context.Context, cfg Config) (*env, error) {
	e := &env{cfg: cfg, schema: randomName("bench"), results: map[string]float64{}, shape: defaultShape(cfg),
		rounds: map[string][]float64{}, units: map[string]string{}}
	store, err := openStore(ctx, cfg, e.schema)
	if err != nil {
		return nil, err
	}
	e.store = store
	// From here on teardown drops the schema, even if Migrate failed half way.
	if _, err := store.Migrate(ctx); err != nil {
		return e, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0),
		// Topics are created just before they are produced to; the default
		// 5s would make the first produce wait for a metadata refresh.
		kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		return e, fmt.Errorf("kafka: %w", err)
	}
	e.kafka, e.admin = cl, kadm.NewClient(cl)
	return e, nil
}

// teardown removes what the run created. It runs on a fresh context: it
// must also work after Ctrl-C cancelled the run's.
func (e *env) teardown() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	if e.kafka != nil {
		if len(e.groups) > 0 {
			// Best effort: an engine that failed to stop may still hold its
			// group, which Kafka then expires on its own.
			_, _ = e.admin.DeleteGroups(ctx, e.groups...)
		}
		if len(e.topics) > 0 {
			resp, err := e.admin.DeleteTopics(ctx, e.topics...)
			if err == nil {
				err = resp.Error()
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("delete topics %v: %w", e.topics, err))
			}
		}
		e.kafka.Close()
	}
	for _, db := range append(e.siblings, e) {
		if db.store == nil {
			continue
		}
		if err := db.store.DropSchema(ctx); err != nil {
			errs = append(errs, fmt.Errorf("drop schema %s: %w", db.schema, err))
		}
		db.store.Close()
	}
	return errors.Join(errs...)
}

// sibling opens a second migrated schema of this run (<schema>_<suffix>)
// for figures that compare two tables side by side. It shares the
// config; only its database methods (enqueue, claimBatch, ...) are used.
func (e *env) sibling(ctx context.Context, suffix string) (*env, error) {
	s := &env{cfg: e.cfg, schema: e.schema + "_" + suffix, shape: e.shape}
	store, err := openStore(ctx, e.cfg, s.schema)
	if err != nil {
		return nil, err
	}
	s.store = store
	e.siblings = append(e.siblings, s)
	if _, err := store.Migrate(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// openStore opens the bench's own pool on a schema. It serves
// raw_claim's loops and the claim figure; engines open their own with
// cfg.MaxConns. Bulk loads run longer than the engine's default
// statement timeout allows.
func openStore(ctx context.Context, cfg Config, schema string) (*pgstore.Store, error) {
	return pgstore.Open(ctx, pgstore.Config{URL: cfg.DatabaseURL, Schema: schema,
		MaxConns: int32(cfg.RawLoops) + 4, StatementTimeoutMS: int((10 * time.Minute).Milliseconds())})
}

// report prints one figure and keeps it for the summary. While figures
// repeat (Config.Repeat), a round's figure is a note, kept for its median.
func (e *env) report(name string, value float64, unit string) {
	if e.cfg.Repeat > 1 && e.round <= e.cfg.Repeat {
		if _, ok := e.rounds[name]; !ok {
			e.roundOrder = append(e.roundOrder, name)
		}
		e.rounds[name] = append(e.rounds[name], value)
		e.units[name] = unit
		e.note("round %d of %d: %s %.2f %s", e.round, e.cfg.Repeat, name, value, unit)
		return
	}
	e.results[name] = value
	format := "%s %.0f %s\n"
	switch unit {
	case "ms", "ratio":
		format = "%s %.2f %s\n"
	case "MiB/s":
		format = "%s %.1f %s\n"
	}
	fmt.Fprintf(e.cfg.Out, format, name, value, unit)
}

// reportMedians reports each repeated figure's median over its rounds.
func (e *env) reportMedians() {
	for _, name := range e.roundOrder {
		e.report(name, median(e.rounds[name]), e.units[name])
	}
}

// roundRatios is num/den of each round, when both figures repeated.
func (e *env) roundRatios(num, den string) []float64 {
	a, b := e.rounds[num], e.rounds[den]
	if len(a) < 2 || len(a) != len(b) {
		return nil
	}
	out := make([]float64, len(a))
	for i := range a {
		if b[i] == 0 {
			return nil
		}
		out[i] = a[i] / b[i]
	}
	return out
}

func median(v []float64) float64 {
	v = slices.Sorted(slices.Values(v))
	if len(v)%2 == 0 {
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return v[len(v)/2]
}

// note prints a context line.
func (e *env) note(format string, args ...any) {
	fmt.Fprintf(e.cfg.Out, "# "+format+"\n", args...)
}

// summary prints the ratios and targets for the figures this run
// produced: the performance issues' targets, the later where one raised
// an earlier one (ingest/COPY 0.5 → 0.8, ordered/work 0.8 → 0.9, claim
// history/0 1.2 → 1.1, e2e p99 50 → 10 ms, RSS 200 → 150 MiB).
func (e *env) summary() {
	if e.rssKiB > 0 {
		e.report("dispatcher_rss_mib_max", float64(e.rssKiB)/1024, "MiB")
	}
	r := e.results
	ratio := func(label, num, den string, target string, ok func(float64) bool) {
		a, okA := r[num]
		b, okB := r[den]
		if !okA || !okB || b == 0 {
			return
		}
		x, of := a/b, ""
		if rounds := e.roundRatios(num, den); rounds != nil {
			// Each round's two figures ran minutes apart at most, under
			// much the same load: their ratio is steadier than the
			// medians'.
			x, of = median(rounds), fmt.Sprintf(", the median of the rounds' %.3f", rounds)
		}
		e.note("%s ratio %.3f (target %s: %s%s)", label, x, target, verdict(ok(x)), of)
	}
	ratio("ingest/copy", "ingest_records_per_s", "copy_rows_per_s", "≥ 0.8", func(x float64) bool { return x >= 0.8 })
	ratio("work/raw", "work_jobs_per_s", "raw_claim_jobs_per_s", "≥ 0.6", func(x float64) bool { return x >= 0.6 })
	ratio("ordered/work", "ordered_jobs_per_s", "work_jobs_per_s", "≥ 0.9", func(x float64) bool { return x >= 0.9 })
	ratio("http/raw", "http_jobs_per_s", "http_raw_requests_per_s", "≥ 0.7", func(x float64) bool { return x >= 0.7 })
	ratio("capped/work", "capped_jobs_per_s", "work_jobs_per_s", "≥ 0.8", func(x float64) bool { return x >= 0.8 })
	ratio("grouped/work", "grouped_jobs_per_s", "work_jobs_per_s", "≥ 0.8", func(x float64) bool { return x >= 0.8 })
	ratio("claim history/0", historyFigure(e.cfg.History), "claim_ms_p99_at_0", "≤ 1.1", func(x float64) bool { return x <= 1.1 })
	ratio("claim future/0", futureFigure(e.cfg.Future), "claim_ms_p99_at_0", "≤ 1.2", func(x float64) bool { return x <= 1.2 })
	absolute := func(name, target string, ok func(float64) bool) {
		if v, found := r[name]; found {
			e.note("%s target %s: %s", name, target, verdict(ok(v)))
		}
	}
	absolute("work_jobs_per_s", "≥ 16000", func(x float64) bool { return x >= 16000 })
	absolute("e2e_latency_p99_ms", "≤ 10", func(x float64) bool { return x <= 10 })
	absolute("dispatcher_rss_mib_max", "< 150", func(x float64) bool { return x < 150 })
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}
