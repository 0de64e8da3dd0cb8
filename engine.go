// Package switchyard is the engine behind the switchyard binary, importable
// by Go programs: build it from the same YAML config, register in-process
// handlers for the kinds of `target: {go: true}` routes, and run it.
//
//	cfg, err := config.Load("switchyard.yaml", os.Getenv)
//	eng, err := switchyard.New(cfg, switchyard.Options{Logger: log})
//	eng.Register("order.sync", workers.HandlerFunc(syncOrder))
//	err = eng.Start(ctx) // … eng.Stop(ctx) on shutdown
//
// The engine wires the components and owns their lifecycle; it holds no
// logic of its own: internal/ingest turns records into rows,
// internal/dispatch runs them, workers holds handlers and the HTTP target,
// internal/dlq re-drives parked work and internal/admin serves the API.
// Embedders reach them through the Engine only (Applier, RedriveDLQ,
// DiscardDLQ), so nothing they call mentions an internal type.
package switchyard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/admin"
	"github.com/switchyard-dev/switchyard/internal/dispatch"
	"github.com/switchyard-dev/switchyard/internal/dlq"
	"github.com/switchyard-dev/switchyard/internal/flow"
	"github.com/switchyard-dev/switchyard/internal/ingest"
	"github.com/switchyard-dev/switchyard/internal/metrics"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/sampler"
	"github.com/switchyard-dev/switchyard/internal/schedule"
	"github.com/switchyard-dev/switchyard/internal/tracing"
	"github.com/switchyard-dev/switchyard/workers"
)

// Roles select which parts of the engine run in a process.
const (
	RoleAll    = "all"
	RoleIngest = "ingest"
	RoleWork   = "work"
)

// Roles are the values Options.Role takes (and `switchyard run --role`).
var Roles = []string{RoleAll, RoleIngest, RoleWork}

// Options are the engine's settings that are not in the YAML file.
type Options struct {
	// Logger defaults to a no-op logger.
	Logger *zap.Logger
	// Role is all | ingest | work. Defaults to all.
	Role string
	// Registry receives the metrics. Defaults to a new registry with the
	// Go and process collectors.
	Registry *prometheus.Registry
	// KafkaOpts are extra franz-go options (TLS, SASL, tuning), given
	// after the engine's own, so that one of the same option replaces
	// its. Never pass what the consumer owns: the topics and group
	// (ConsumeTopics, ConsumerGroup), the partition callbacks
	// (OnPartitions*), AdjustFetchOffsetsFn (positions come from
	// Postgres, I1) or FetchIsolationLevel.
	KafkaOpts []kgo.Opt
	// OAuthToken supplies OAUTHBEARER tokens when kafka.sasl.mechanism is
	// OAUTHBEARER; it wins over kafka.sasl.token_file.
	OAuthToken func(ctx context.Context) (string, error)
	// ResetOffsets allows resuming from Kafka's committed offsets when
	// Postgres has none stored, as `switchyard run --reset-offsets` does.
	ResetOffsets bool
	// StatsInterval is how often queue gauges are refreshed. Defaults to 5s.
	StatsInterval time.Duration
	// TracerProvider, when set, receives the engine's spans instead of
	// the provider the tracing block and the OTEL_* environment would
	// build; the embedder owns it (the engine does not shut it down).
	TracerProvider trace.TracerProvider
}

// Engine is one Switchyard process.
type Engine struct {
	cfg      *config.Config
	opts     Options
	log      *zap.Logger
	registry *workers.Registry
	targets  map[string]*workers.HTTPTarget // by route name
	compiled []*ingest.Route

	store      *pgstore.Store
	metrics    *metrics.Metrics
	consumer   *ingest.Consumer
	dispatcher *dispatch.Dispatcher
	dlq        *dlq.Service
	lag        *ingest.LagReader
	server     *http.Server
	listener   net.Listener
	// attemptKey signs attempt secrets (HTTP checkpoints).
	attemptKey []byte

	// flow holds queues and routes back (pauses, backpressure); its
	// loop stops with stopFlow and has ended when flowDone is closed.
	flow     *flow.Watcher
	stopFlow context.CancelFunc
	flowDone chan struct{}

	// tracing is the provider the engine built (off when no endpoint is
	// configured), shut down by Stop; tracer is nil when off.
	tracing *tracing.Tracing
	tracer  trace.Tracer

	fatal   chan error
	sampler *sampler.Sampler
	// scheduler runs the cron schedules; nil when none run.
	scheduler *schedule.Scheduler
	wg        sync.WaitGroup
	stopOnce  sync.Once
	stopErr   error

	// life guards begun, starting and cancelStart. begun: Start or Stop
	// was called (an engine starts once, and not after Stop). starting
	// is closed when a Start returns, and cancelStart ends its context:
	// a Stop that finds a Start in progress cancels it and waits for it,
	// since Start sets the fields stop reads, and what it went on to
	// start after a Stop that did not wait would run with no owner.
	life        sync.Mutex
	begun       bool
	starting    chan struct{}
	cancelStart func()
	// opened: Start has opened the store and made the DLQ service, which
	// the engine's actions (Applier, RedriveDLQ, DiscardDLQ) may read
	// from then on; stopped: Stop is closing or has closed the store.
	opened, stopped atomic.Bool
}

// ErrNotStarted is what the engine's actions return before Start has
// opened the database.
var ErrNotStarted = errors.New("switchyard: the engine is not started: call Start first")

// errStopped is what the engine's actions return once Stop has begun:
// rather than the closed pool's "closed pool", which names no engine.
var errStopped = errors.New("switchyard: the engine is stopped: its actions ended with Stop")

// ready is nil when the engine's actions may use the database.
func (e *Engine) ready() error {
	switch {
	case e.stopped.Load():
		return errStopped
	case !e.opened.Load():
		return ErrNotStarted
	}
	return nil
}

// New builds an engine from a loaded config (config.Load or Parse). A
// config built in code needs cfg.SetDefaults() first: New refuses one
// that does not validate, with the fields at fault, rather than run
// with, say, routes without names.
func New(cfg *config.Config, opts Options) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.ServingErrors(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	for _, w := range cfg.Warnings() {
		opts.Logger.Warn(w)
	}
	if opts.Role == "" {
		opts.Role = RoleAll
	}
	if !slices.Contains(Roles, opts.Role) {
		return nil, fmt.Errorf("Options.Role: %q is not one of %s (RoleAll, RoleIngest, RoleWork)", opts.Role, strings.Join(Roles, ", "))
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
		opts.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	switch {
	case opts.StatsInterval < 0:
		return nil, fmt.Errorf("Options.StatsInterval: %s is negative (0 means the default, 5s)", opts.StatsInterval)
	case opts.StatsInterval == 0:
		opts.StatsInterval = 5 * time.Second
	}
	m, err := metrics.Register(opts.Registry)
	if err != nil {
		return nil, fmt.Errorf("Options.Registry: %w", err)
	}
	e := &Engine{cfg: cfg, opts: opts, log: opts.Logger, registry: workers.NewRegistry(),
		targets: map[string]*workers.HTTPTarget{}, metrics: m, fatal: make(chan error, 1)}
	for i, r := range cfg.Routes {
		cr, err := ingest.CompileRoute(r)
		if err != nil {
			return nil, fmt.Errorf("routes[%d]: %w", i, err)
		}
		e.compiled = append(e.compiled, cr)
	}
	if err := e.buildTargets(nil); err != nil {
		return nil, err
	}
	return e, nil
}

// buildTargets makes the HTTP targets of the routes, their calls traced
// by tracer (nil: not traced). New makes them untraced, which checks
// them; Start makes them again once tracing is on.
func (e *Engine) buildTargets(tracer trace.Tracer) error {
	e.targets = map[string]*workers.HTTPTarget{}
	for i, r := range e.cfg.Routes {
		if r.Target.HTTP == nil {
			continue
		}
		t, err := workers.NewHTTPTarget(workers.HTTPTargetConfig{URL: r.Target.HTTP.URL,
			Timeout: r.Target.HTTP.Timeout.D(), FollowRedirects: r.Target.HTTP.FollowRedirects,
			ResultMaxBytes: r.ResultLimit(), Tracer: tracer})
		if err != nil {
			return fmt.Errorf("routes[%d].target: %w", i, err)
		}
		e.targets[r.Name] = t
	}
	// A schedule's jobs under its own route run like the jobs of the
	// first route of their kind, if there is one: its target, attempts
	// and backoff (under a route of their kind, they are its jobs).
	for _, r := range e.ownScheduleRoutes() {
		if t := e.targets[r.of]; t != nil {
			e.targets[r.own] = t
		}
	}
	return nil
}

// ownScheduleRoute is a schedule's own route (own) and the route of its
// kind whose settings its jobs take (of).
type ownScheduleRoute struct{ own, of string }

// ownScheduleRoutes are the schedules stored under their own route that
// have a route of their kind in another queue (schedule.Schedule.Like).
func (e *Engine) ownScheduleRoutes() []ownScheduleRoute {
	var out []ownScheduleRoute
	for _, sc := range e.schedules() {
		if sc.Own() && sc.Like != "" {
			out = append(out, ownScheduleRoute{own: sc.Route, of: sc.Like})
		}
	}
	return out
}

// startTracing builds the tracer provider (off when no endpoint is
// configured anywhere, and then nothing traces) or takes the embedder's.
func (e *Engine) startTracing(ctx context.Context) error {
	if e.opts.TracerProvider != nil {
		e.tracer = e.opts.TracerProvider.Tracer(tracing.ScopeName)
	} else {
		t, err := tracing.New(ctx, tracing.Config{Endpoint: e.cfg.Tracing.OTLPEndpoint, SampleRatio: e.cfg.Tracing.Ratio()})
		if err != nil {
			return err
		}
		e.tracing, e.tracer = t, t.Tracer()
		if t.Enabled() {
			e.log.Info("tracing on: spans go to an OTLP receiver", zap.String("endpoint", t.Endpoint),
				zap.Float64("sample_ratio", e.cfg.Tracing.Ratio()))
		}
	}
	if e.tracer == nil {
		return nil
	}
	return e.buildTargets(e.tracer)
}

// allLimited reports whether every route and schedule that feeds queue
// has a flow limit (a schedule under its own route has none).
func (e *Engine) allLimited(queue string) bool {
	for _, sc := range e.schedules() {
		if sc.Queue == queue && sc.Own() {
			return false
		}
	}
	feeds := false
	for _, r := range e.cfg.Routes {
		if r.Queue == queue {
			if !flowLimit(r).Limited() {
				return false
			}
			feeds = true
		}
	}
	return feeds
}

// Register adds the Go handler for a kind. Call it before Start. The
// kind must be one a handler runs: that of a route with target go: true,
// or of a schedule that no route takes. A misspelt kind, or that of a
// route with an HTTP target, is an error here rather than a handler that
// never runs.
func (e *Engine) Register(kind string, h workers.Handler) error {
	if !e.runsGo(kind) {
		return fmt.Errorf("register handler %q: no route with target go: true has this kind, nor a schedule without a route, so the handler would never run", kind)
	}
	return e.registry.Register(kind, h)
}

// runsGo reports whether jobs of kind run on a registered Go handler.
func (e *Engine) runsGo(kind string) bool {
	routed := false
	for _, r := range e.cfg.Routes {
		if r.Kind == kind {
			if r.Target.Go {
				return true
			}
			routed = true
		}
	}
	if routed {
		return false
	}
	for _, sc := range e.cfg.Schedules {
		if sc.Kind == kind {
			return true
		}
	}
	return false
}

// resolve finds the handler of a job: the route's HTTP target, else the
// Go handler registered for its kind.
func (e *Engine) resolve(j *workers.Job) (workers.Handler, error) {
	if t, ok := e.targets[j.Route]; ok {
		return t, nil
	}
	if h, ok := e.registry.Lookup(j.Kind); ok {
		return h, nil
	}
	return nil, fmt.Errorf("no handler for kind %q (route %q): register one with Engine.Register", j.Kind, j.Route)
}

// ErrSchemaNewer is Migrate's error (errors.Is) for a schema that a newer
// Switchyard migrated: this build would put its older functions back
// under the newer fleet, so it changes nothing.
var ErrSchemaNewer = pgstore.ErrNewerSchema

// ErrMigrateLocked is Migrate's error (errors.Is) when a transaction held
// a lock on a table it changes through all its tries (about 45 s, giving
// way after 2 s each time so that the fleet's queries are not queued
// behind it): it changed nothing; find the long transaction and run it
// again.
var ErrMigrateLocked = pgstore.ErrMigrateLocked

// Migrate creates or upgrades the schema that cfg names (postgres.url and
// postgres.schema), as `switchyard migrate` does: safe to run from several
// processes at once. It returns what it applied; ErrSchemaNewer when a
// newer build migrated the schema, ErrMigrateLocked when another
// transaction kept a table it changes locked. It also publishes cfg's
// routes for the SQL function enqueue(), as every process does at start.
func Migrate(ctx context.Context, cfg *config.Config) ([]string, error) {
	if cfg == nil {
		return nil, config.ErrNil // it needs only the database: no more is validated
	}
	if cfg.Postgres.URL == "" { // else pgx would try its defaults (a local socket)
		return nil, &config.FieldError{Field: "postgres.url", Msg: "required: set it or " + config.EnvDatabaseURL}
	}
	store, err := pgstore.Open(ctx, pgstore.Config{URL: cfg.Postgres.URL, Schema: cfg.Postgres.Schema, MaxConns: 2})
	if err != nil {
		return nil, err
	}
	defer store.Close()
	applied, err := store.Migrate(ctx)
	if err != nil {
		return applied, err
	}
	return applied, publishRoutes(ctx, store, cfg)
}

// Addr is the admin server's address once started ("" when disabled).
func (e *Engine) Addr() string {
	if e.listener == nil {
		return ""
	}
	return e.listener.Addr().String()
}

// Done receives at most one error, of a component that stopped for good
// (e.g. the consumer refusing to resume without stored offsets): the
// process should then Stop and exit non-zero. It is never closed, Stop
// included: select on it beside a signal, not alone after Stop.
func (e *Engine) Done() <-chan error { return e.fatal }

// Start connects to Postgres (whose schema must be migrated), checks every
// go-target route has a handler (CheckHandlers), and starts the HTTP
// server, the consumer and the worker pools. It returns once they run.
// ctx bounds the start only: cancelling it later stops nothing (Stop
// does). An engine starts once: a second Start, or one after Stop, is an
// error. A Start that fails stops what it had started (as Stop would,
// within shutdown_grace) before it returns; Stop after it is harmless.
// A Stop called while Start runs makes it fail, and returns once it has.
func (e *Engine) Start(ctx context.Context) (err error) {
	e.life.Lock()
	if e.begun {
		e.life.Unlock()
		return errors.New("switchyard: Start: the engine was started or stopped already; make a new one with New")
	}
	e.begun = true
	ctx, cancel := context.WithCancelCause(ctx)
	starting := make(chan struct{})
	e.starting, e.cancelStart = starting, func() { cancel(errStoppedWhileStarting) }
	e.life.Unlock()
	defer close(starting) // last: after the failed start's stop below
	defer cancel(nil)
	defer func() {
		switch {
		case context.Cause(ctx) != errStoppedWhileStarting:
		case err == nil: // it came after the last step that heeds ctx
			err = errStoppedWhileStarting
		default:
			err = fmt.Errorf("%w (it was at: %v)", errStoppedWhileStarting, err)
		}
		if err != nil {
			sctx, cancel := context.WithTimeout(context.Background(), e.cfg.ShutdownGrace.D()+stopMargin)
			defer cancel()
			if serr := e.stop(sctx); serr != nil {
				e.log.Warn("stopping what a failed start had started", zap.Error(serr))
			}
		}
	}()
	if err := e.CheckHandlers(); err != nil {
		return err
	}
	if err := e.startTracing(ctx); err != nil {
		return err
	}
	store, err := pgstore.Open(ctx, pgstore.Config{URL: e.cfg.Postgres.URL, Schema: e.cfg.Postgres.Schema,
		MaxConns: e.cfg.Postgres.MaxConns})
	if err != nil {
		return err
	}
	e.store = store
	if err := store.RequireCurrent(ctx); err != nil {
		return err
	}
	if e.attemptKey, err = store.AttemptKey(ctx); err != nil {
		return fmt.Errorf("postgres: read the attempt key: %w", err)
	}
	if err := publishRoutes(ctx, store, e.cfg); err != nil {
		return err
	}
	kopts, err := ingest.ClientOpts(e.cfg.Kafka, e.opts.OAuthToken)
	if err != nil {
		return err
	}
	e.dlq = dlq.New(store, e.compiled, ingest.NewRereader(append(kopts, e.opts.KafkaOpts...)))
	e.lag = ingest.NewLagReader(append(kopts, e.opts.KafkaOpts...), store, e.cfg.Kafka.Group, e.cfg.Kafka.Reset)
	e.opened.Store(true)
	if err := e.startFlow(ctx); err != nil {
		return err
	}
	if e.opts.Role != RoleIngest {
		if err := e.startDispatch(ctx); err != nil {
			return err
		}
	}
	if e.opts.Role != RoleWork {
		if err := e.startIngest(ctx); err != nil {
			return err
		}
	}
	// HTTP last: its handlers read the components started above.
	if e.cfg.HTTP.Listen != "off" {
		if err := e.startHTTP(); err != nil {
			return err
		}
	}
	sc := sampler.Config{Queues: e.cfg.QueueNames(), Groups: admin.GroupsOf(e.cfg), Interval: e.opts.StatsInterval}
	for _, r := range e.cfg.Routes {
		if r.Ordered {
			sc.OrderedRoutes = append(sc.OrderedRoutes, r.Name)
		}
	}
	if e.consumer != nil {
		sc.Lag = e.consumer.Lag
	}
	e.sampler = sampler.New(sc, e.store, e.metrics, e.log)
	if err := e.sampler.Start(ctx); err != nil {
		return err
	}
	// Re-read pauses and depths from now on; the first read, before the
	// components started, is what they started with.
	flowCtx, stopFlow := context.WithCancel(context.WithoutCancel(ctx))
	e.stopFlow, e.flowDone = stopFlow, make(chan struct{})
	go func() { defer close(e.flowDone); e.flow.Run(flowCtx) }()
	return nil
}

// errStoppedWhileStarting is Start's error when Stop was called before
// it had returned: what it had started is stopped again.
var errStoppedWhileStarting = errors.New("switchyard: Start: Stop was called while the engine was starting")

// flowInterval is how often every process re-reads the pauses and the
// depths of the queues with a max_depth: SPEC §6's "within 1 s".
const flowInterval = 500 * time.Millisecond

// startFlow reads the pauses and depths once, so that the consumer and
// the pools start with them: a route paused before a restart fetches
// nothing after it.
func (e *Engine) startFlow(ctx context.Context) error {
	fc := flow.Config{Interval: flowInterval, MaxDepth: e.maxDepths(), RouteQueue: map[string]string{},
		OnChange: e.flowChanged}
	if e.opts.Role != RoleWork {
		for _, r := range e.cfg.Routes {
			fc.RouteQueue[r.Name] = r.Queue
			// Series that exist from the start, so that a dashboard's
			// expression never reads an absent one as "no problem".
			for _, cause := range flow.Causes {
				e.metrics.IngestPaused.WithLabelValues(r.Name, cause).Set(0)
				e.metrics.IngestTopicPaused.WithLabelValues(r.Topic, cause).Set(0)
			}
			e.metrics.IngestErrors.WithLabelValues(r.Topic).Add(0)
		}
	}
	w, err := flow.New(e.store, fc, e.log)
	if err != nil {
		return err
	}
	if err := w.Refresh(ctx); err != nil {
		return fmt.Errorf("postgres: read pauses: %w", err)
	}
	e.flow = w
	return nil
}

// flowChanged applies what a read of the pauses and depths changed: the
// consumer holds or resumes routes, and resumed pools claim at once
// rather than at their next poll.
func (e *Engine) flowChanged() {
	if e.consumer != nil {
		e.consumer.ApplyHolds()
	}
	if e.dispatcher != nil {
		for _, q := range e.cfg.QueueNames() {
			if !e.flow.QueuePaused(q) {
				e.dispatcher.Wake(q)
			}
		}
	}
}

// CheckHandlers reports what of the config nothing would run: a route
// with target go: true, or a schedule whose kind has no route, without a
// registered handler. Start checks it; called after the Register calls,
// it tells a config's problem from a failure to start.
func (e *Engine) CheckHandlers() error {
	if e.opts.Role == RoleIngest {
		return nil
	}
	var missing []string
	for _, r := range e.cfg.Routes {
		if r.Target.Go {
			if _, ok := e.registry.Lookup(r.Kind); !ok {
				missing = append(missing, r.Kind)
			}
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("routes with target go: true need a registered handler; missing kinds: %v", missing)
	}
	for i, sc := range e.cfg.Schedules {
		if _, ok := e.cfg.RouteOfKind(sc.Kind, ""); ok {
			continue
		}
		if _, ok := e.registry.Lookup(sc.Kind); !ok {
			return fmt.Errorf("schedules[%d].kind: %q has no route and no registered Go handler to run it", i, sc.Kind)
		}
	}
	return nil
}

func (e *Engine) startHTTP() error {
	var tokens []admin.Token
	for _, t := range e.cfg.Admin.Tokens {
		tokens = append(tokens, admin.Token{Name: t.Name, Secret: t.Token, Operate: t.Role == config.RoleOperate})
	}
	listing := admin.ListingOf(e.cfg)
	enqueuer := ingest.NewEnqueuer(e.store, e.compiled, e.maxDepths())
	enqueuer.Flow = e.metrics.Flow
	srv := admin.New(admin.Config{
		Token:        e.cfg.HTTP.Token,
		Tokens:       tokens,
		AllowedHosts: e.cfg.HTTP.AllowedHosts,
		Queues:       listing.Queues,
		Concurrency:  listing.Concurrency,
		Schedules:    listing.Schedules,
		Routes:       listing.Routes,
		Groups:       listing.Groups,
		Metrics:      promhttp.HandlerFor(e.opts.Registry, promhttp.HandlerOpts{}),
		Ready:        e.kafkaReady,
		DLQ:          e.dlq,
		Enqueue:      enqueuer,
		Lag:          e.lag.Lag,
		AttemptKey:   e.attemptKey,
		Tracer:       e.tracer,
	}, e.store, e.log)
	ln, err := net.Listen("tcp", e.cfg.HTTP.Listen)
	if err != nil {
		return fmt.Errorf("http.listen: %w", err)
	}
	e.listener = ln
	e.server = admin.NewHTTPServer(e.cfg.HTTP.Listen, srv.Handler())
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		if err := e.server.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.fail(fmt.Errorf("admin server: %w", err))
		}
	}()
	e.log.Info("admin API listening", zap.String("addr", ln.Addr().String()))
	return nil
}

// kafkaReady is the Kafka part of /readyz: a broker answers and ingest
// is not stuck on a batch it cannot store. A work-only process has no
// consumer and does not need Kafka.
//
// /readyz has no token (probes carry none), so a failed ping is said as
// Kafka's error code when the broker answered with one (a refused SASL
// handshake), and otherwise as a phrase, logged in full: a dial error
// names the brokers' hosts and ports, which are not the caller's to see.
func (e *Engine) kafkaReady(ctx context.Context) error {
	if e.opts.Role == RoleWork {
		return nil
	}
	if e.consumer == nil {
		return errors.New("kafka consumer not started yet")
	}
	if err := e.consumer.Ready(); err != nil {
		return err
	}
	err := e.consumer.Ping(ctx)
	if err == nil {
		return nil
	}
	if ke := (*kerr.Error)(nil); errors.As(err, &ke) {
		return ke
	}
	e.log.Warn("readyz: no Kafka broker answered", zap.Error(err))
	return errors.New("no broker answered (see the log)")
}

func (e *Engine) startDispatch(ctx context.Context) error {
	dc := dispatch.Config{Resolve: e.resolve, Grace: e.cfg.ShutdownGrace.D(), Backoff: map[string]dispatch.Backoff{},
		Retention: map[string]time.Duration{}, Paused: e.flow.QueuePaused, Limits: map[string]map[string]pgstore.FlowLimit{},
		ResultMaxBytes: map[string]int{}, AttemptKey: e.attemptKey, Tracer: e.tracer}
	for state, keep := range e.cfg.Retention {
		switch state {
		case config.RetentionAudit:
			dc.AuditRetention = keep.D()
			continue
		case config.RetentionVersions:
			dc.VersionRetention = keep.D()
			continue
		}
		dc.Retention[state] = keep.D()
	}
	for _, name := range e.cfg.QueueNames() {
		q := e.cfg.Queues[name]
		dc.Queues = append(dc.Queues, dispatch.Queue{Name: name, Concurrency: q.Concurrency,
			Lease: q.Lease.D(), MaxRuntime: q.MaxRuntime.D(), PollInterval: q.PollInterval.D(), Prefetch: q.Prefetch,
			StealFrom: q.StealFrom, AllLimited: e.allLimited(name)})
	}
	for _, r := range e.cfg.Routes {
		e.metrics.DeclareKinds(r.Kind)
		dc.Backoff[r.Name] = dispatch.Backoff{Initial: r.Backoff.Initial.D(), Max: r.Backoff.Max.D()}
		dc.ResultMaxBytes[r.Name] = r.ResultLimit()
		if l := flowLimit(r); l.Limited() {
			for _, limit := range l.Names() {
				e.metrics.FlowThrottled.WithLabelValues(r.Name, limit).Add(0)
			}
			if dc.Limits[r.Queue] == nil {
				dc.Limits[r.Queue] = map[string]pgstore.FlowLimit{}
			}
			dc.Limits[r.Queue][r.Name] = l
		}
	}
	for _, sc := range e.cfg.Schedules {
		e.metrics.DeclareKinds(sc.Kind)
	}
	for _, r := range e.ownScheduleRoutes() {
		dc.Backoff[r.own] = dc.Backoff[r.of]
		dc.ResultMaxBytes[r.own] = dc.ResultMaxBytes[r.of]
	}
	var limited []string
	for _, routes := range dc.Limits {
		limited = append(limited, slices.Collect(maps.Keys(routes))...)
	}
	if n, err := e.store.FlowGroupsAssign(ctx, limited); err != nil {
		return fmt.Errorf("flow limits: %w", err)
	} else if n > 0 {
		e.log.Info("jobs of routes that became flow-limited joined their routes' limits", zap.Int64("jobs", n))
	}
	d, err := dispatch.New(dc, e.store, e.log, e.metrics)
	if err != nil {
		return err
	}
	e.dispatcher = d
	return d.Start(ctx)
}

func (e *Engine) startIngest(ctx context.Context) error {
	ic := ingest.Config{Kafka: e.cfg.Kafka, OAuthToken: e.opts.OAuthToken, Routes: e.compiled,
		ResetOffsets: e.opts.ResetOffsets, Opts: e.opts.KafkaOpts, Holds: e.flow, Tracer: e.tracer}
	if e.dispatcher != nil { // started first: its pools claim what this process stores at once
		ic.Wake = e.dispatcher.Wake
		ic.Claims, ic.Claimed = e.dispatcher.IngestClaims, e.dispatcher.IngestClaimed
	}
	c, err := ingest.New(ic, e.store, e.log, e.metrics)
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	e.consumer = c
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		if err := c.Err(); err != nil {
			e.fail(fmt.Errorf("ingest stopped: %w", err))
		}
	}()
	return e.startSchedules(ctx)
}

// schedules are the config's schedules with what their jobs take from the
// route of their kind.
func (e *Engine) schedules() []schedule.Schedule { return schedule.Of(e.cfg) }

// startSchedules runs the cron schedules in every ingesting process; each
// slot becomes one job however many run them (see internal/schedule).
func (e *Engine) startSchedules(ctx context.Context) error {
	if len(e.cfg.Schedules) == 0 {
		return nil
	}
	s, err := schedule.New(e.store, e.log, e.schedules(), e.flow.SchedulePaused)
	if err != nil {
		return err
	}
	e.scheduler = s
	return s.Start(ctx)
}

func (e *Engine) fail(err error) {
	e.log.Error("fatal", zap.Error(err))
	select {
	case e.fatal <- err:
	default:
	}
}

// routeRows are the config's routes as the SQL function enqueue() takes
// their settings.
func routeRows(cfg *config.Config) ([]pgstore.RouteRow, error) {
	var out []pgstore.RouteRow
	for i, r := range cfg.Routes {
		cr, err := ingest.CompileRoute(r)
		if err != nil {
			return nil, fmt.Errorf("routes[%d]: %w", i, err)
		}
		out = append(out, pgstore.RouteRow{Queue: r.Queue, Kind: r.Kind, Route: r.Name, MaxAttempts: r.MaxAttempts,
			TTL: r.TTL.D(), Lane: cr.Lane, OnDead: r.OnDead, Limited: flowLimit(r).Limited(),
			Grouped: r.Group != nil, Coalesce: r.CoalesceLatest(), MaxDepth: cfg.Queues[r.Queue].MaxDepth})
	}
	return out, nil
}

// publishRoutes replaces the routes enqueue() follows with cfg's.
func publishRoutes(ctx context.Context, store *pgstore.Store, cfg *config.Config) error {
	rows, err := routeRows(cfg)
	if err == nil {
		err = store.RoutesPublish(ctx, rows)
	}
	if err != nil {
		return fmt.Errorf("postgres: publish the routes for enqueue(): %w", err)
	}
	return nil
}

// maxDepths is every configured queue's max_depth (0: no limit).
func (e *Engine) maxDepths() map[string]int {
	m := map[string]int{}
	for name, q := range e.cfg.Queues {
		m[name] = q.MaxDepth
	}
	return m
}

// Stop shuts down in order: stop fetching (the batch in hand commits),
// stop claiming and let in-flight jobs finish within the grace period,
// release the rest, then close the HTTP server and the database pool.
// Idempotent. ctx bounds all of it, and ends the grace period early when
// it ends: give it shutdown_grace and a margin, from a context of its
// own (not one a signal has just cancelled), for I7's clean stop.
func (e *Engine) Stop(ctx context.Context) error {
	e.life.Lock()
	e.begun = true // no Start after it
	starting, cancelStart := e.starting, e.cancelStart
	e.life.Unlock()
	if starting != nil {
		// A Start in progress fails and stops what it started; one that
		// returned already has closed starting.
		cancelStart()
		select {
		case <-starting:
		case <-ctx.Done():
			return fmt.Errorf("switchyard: Stop: waiting for Start to give up: %w", ctx.Err())
		}
	}
	return e.stop(ctx)
}

// stopMargin is what a Start that failed gives its stop beyond
// shutdown_grace: releasing leases and the final commits.
const stopMargin = 30 * time.Second

func (e *Engine) stop(ctx context.Context) error {
	e.stopOnce.Do(func() {
		var errs []error
		if e.stopFlow != nil {
			// First, and waited for: a read in flight would otherwise
			// resume a route of a consumer being closed.
			e.stopFlow()
			<-e.flowDone
		}
		if e.scheduler != nil {
			errs = append(errs, e.scheduler.Stop(ctx))
		}
		if e.consumer != nil {
			errs = append(errs, e.consumer.Stop(ctx))
		}
		if e.dispatcher != nil {
			errs = append(errs, e.dispatcher.Stop(ctx))
		}
		if e.sampler != nil {
			errs = append(errs, e.sampler.Stop(ctx))
		}
		if e.server != nil {
			errs = append(errs, e.server.Shutdown(ctx))
		}
		e.wg.Wait()
		// Last of the components: every span has ended.
		e.stopTracing(ctx)
		e.stopped.Store(true)
		if e.store != nil {
			e.store.Close()
		}
		e.stopErr = errors.Join(errs...)
	})
	return e.stopErr
}

// tracingFlush bounds the flush of the spans still buffered at shutdown,
// within Stop's own deadline: a receiver that is down must not hold a
// stopping process for the exporter's retries.
const tracingFlush = 5 * time.Second

// stopTracing flushes and ends the provider the engine built. Lost spans
// are logged, not a failed shutdown: the work itself is done.
func (e *Engine) stopTracing(ctx context.Context) {
	if !e.tracing.Enabled() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, tracingFlush)
	defer cancel()
	if err := e.tracing.Shutdown(ctx); err != nil {
		e.log.Warn("tracing: flushing spans at shutdown failed", zap.Error(err))
	}
}

// flowLimit is a config route's fleet-wide limits as the claim takes them.
func flowLimit(r config.Route) pgstore.FlowLimit {
	l := pgstore.FlowLimit{MaxRunning: r.MaxRunning}
	if r.Group != nil {
		l.GroupMaxRunning = r.Group.MaxRunning
	}
	if r.RateLimit != nil {
		l.RateInterval, l.RateBurst = r.RateLimit.Interval(), r.RateLimit.Burst
	}
	return l
}
