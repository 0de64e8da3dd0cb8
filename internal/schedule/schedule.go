// Package schedule enqueues the jobs of the config's cron schedules.
//
// Every process that ingests runs a Scheduler; none is elected. A slot (a
// minute the expression names) becomes at most one job however many
// processes see it: its dedupe key is the slot and the schedule (origin
// schedule), so the second insert is a no-op (I2). Where a schedule left
// off survives restarts in the jobs themselves: the greatest slot among
// its retained jobs.
//
// The jobs are stored under the route of their kind in their queue, if
// there is one, as that route's own jobs: its flow limits (max_running,
// a group's, rate_limit) count them with its records' jobs, which a
// schedule's own route would not. Else under the schedule's own route,
// "schedule/<name>" (Schedule.Route).
//
// After downtime (or a tick that came late) the slots missed are handled
// by the schedule's misfire policy: run_once enqueues the latest of them,
// skip none, catch_up all (up to maxCatchUp). A slot is missed when it is
// more than misfireGrace old when seen. overlap: skip enqueues nothing
// while the schedule's previous job has not finished. jitter delays each
// job by a random amount up to it.
//
// An operator may pause a schedule (a row of the paused table, read by
// every process through Config.Paused): its slots pass without jobs, and
// resuming does not catch up on them — a pause means "not these runs". A
// trigger (Trigger) enqueues one job now, beside the slots, under a
// dedupe key of its own.
package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/cron"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/startstop"
	"github.com/switchyard-dev/switchyard/jobstate"
)

const (
	// misfireGrace is how late a slot may be seen and still count as on
	// time (a slow tick, a short restart).
	misfireGrace = time.Minute
	// maxCatchUp bounds the slots one tick enqueues under catch_up.
	maxCatchUp = 1000
	// tickEvery is how often due slots are looked for.
	tickEvery = time.Second
)

// Route is a schedule's own route, which its jobs are stored under when
// no route of their kind takes their queue; also the schedule's name in
// the audit log and its jobs' group value under a grouped route.
func Route(name string) string { return "schedule/" + name }

// Schedule is one schedule with what its jobs take from the route of
// their kind.
type Schedule struct {
	config.Schedule
	// Route is the route its jobs are stored under. The route of their
	// kind in their queue (config.RouteOfKind), if there is one: they are
	// then that route's jobs, with its target, attempts, backoff and flow
	// limits, counted with its records' jobs. Else the schedule's own,
	// Route(Name) (also when empty): it takes target, attempts and
	// backoff from the first route of the kind in any queue, if any (the
	// engine maps them), and has no limits (config validation refuses a
	// limited one).
	Route string
	// Group is its jobs' group value when Route is flow-limited: the
	// route's one group (pgstore.GroupAll) or, where the route has
	// groups, a group of the schedule's own, Route(Name); "" otherwise.
	Group string
	// TTL is the route's ttl under a route of its kind: a job not
	// started that long after its run time expires. 0: none.
	TTL time.Duration
	// Like is the route whose target, attempts and backoff its jobs take:
	// the first route of its kind in any queue ("" when none: a Go
	// handler runs them). Under a route of its kind, Route itself.
	Like string
	// MaxAttempts of its jobs.
	MaxAttempts int
}

// Of resolves a validated config's schedules.
func Of(cfg *config.Config) []Schedule {
	var out []Schedule
	for _, sc := range cfg.Schedules {
		s := Schedule{Schedule: sc, Route: Route(sc.Name), MaxAttempts: config.DefaultMaxAttempts}
		if r, ok := cfg.RouteOfKind(sc.Kind, ""); ok {
			s.Like, s.MaxAttempts = r.Name, r.MaxAttempts
		}
		if r, ok := cfg.RouteOfKind(sc.Kind, sc.Queue); ok {
			s.Route, s.Like, s.MaxAttempts, s.TTL = r.Name, r.Name, r.MaxAttempts, r.TTL.D()
			switch {
			case r.Group != nil:
				s.Group = Route(sc.Name)
			case r.FlowLimited():
				s.Group = pgstore.GroupAll
			}
		}
		out = append(out, s)
	}
	return out
}

// Own reports whether its jobs are stored under the schedule's own route.
func (sc Schedule) Own() bool { return sc.Route == "" || sc.Route == Route(sc.Name) }

// keys names the schedule's jobs in the store. Under its own route a
// job's dedupe key is its slot's or trigger's (slotKey, Trigger); under
// a route of its kind, which other schedules may share, the schedule's
// name follows it. A schedule that ran under its own route before
// (Legacy) keeps what it left off there.
func (sc Schedule) keys() pgstore.ScheduleKeys {
	if sc.Own() {
		return pgstore.ScheduleKeys{Route: Route(sc.Name), Legacy: Route(sc.Name)}
	}
	return pgstore.ScheduleKeys{Route: sc.Route, Suffix: "/" + sc.Name, Legacy: Route(sc.Name)}
}

// Scheduler enqueues due slots of its schedules.
type Scheduler struct {
	store   *pgstore.Store
	log     *zap.Logger
	now     func() time.Time
	paused  func(name string) bool
	entries []*entry
	loop    startstop.Loop
}

// Start runs the schedules (Run) until Stop. It returns at once.
func (s *Scheduler) Start(ctx context.Context) error {
	s.loop.Start(ctx, s.Run)
	return nil
}

// Stop ends Run and waits for a tick in progress, or until ctx ends.
// Idempotent.
func (s *Scheduler) Stop(ctx context.Context) error {
	if err := s.loop.Stop(ctx); err != nil {
		return fmt.Errorf("schedule: stopped before enqueuing finished: %w", err)
	}
	return nil
}

type entry struct {
	Schedule
	cron   *cron.Expr
	loc    *time.Location
	cursor time.Time // the last slot handled; zero until the first tick
}

// New compiles the schedules (validated config: errors here are bugs).
// paused says whether an operator paused a schedule (nil: never).
func New(store *pgstore.Store, log *zap.Logger, schedules []Schedule, paused func(name string) bool) (*Scheduler, error) {
	if paused == nil {
		paused = func(string) bool { return false }
	}
	s := &Scheduler{store: store, log: log.Named("schedule"), now: time.Now, paused: paused}
	for _, sc := range schedules {
		cr, err := cron.Parse(sc.Cron)
		if err != nil {
			return nil, fmt.Errorf("schedule %s: %w", sc.Name, err)
		}
		loc, err := time.LoadLocation(sc.Timezone)
		if err != nil {
			return nil, fmt.Errorf("schedule %s: %w", sc.Name, err)
		}
		s.entries = append(s.entries, &entry{Schedule: sc, cron: cr, loc: loc})
	}
	return s, nil
}

// Run ticks until ctx ends. Errors are logged and retried on the next
// tick: a slot is only marked handled once its job is stored.
func (s *Scheduler) Run(ctx context.Context) {
	t := time.NewTicker(tickEvery)
	defer t.Stop()
	for {
		if err := s.Tick(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("enqueuing scheduled jobs failed; retrying", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Tick enqueues every schedule's due slots.
func (s *Scheduler) Tick(ctx context.Context) error {
	now := s.now()
	for _, e := range s.entries {
		if err := s.tick(ctx, e, now); err != nil {
			return fmt.Errorf("schedule %s: %w", e.Name, err)
		}
	}
	return nil
}

func (s *Scheduler) tick(ctx context.Context, e *entry, now time.Time) error {
	if e.cursor.IsZero() {
		last, _, err := lastSlot(ctx, s.store, e.Schedule)
		if err != nil {
			return err
		}
		if last.IsZero() {
			last = now // a new schedule starts now: nothing to catch up
		}
		e.cursor = last
	}
	var due []time.Time
	for t := e.cron.Next(e.cursor.In(e.loc)); !t.IsZero() && !t.After(now); t = e.cron.Next(t) {
		due = append(due, t)
		if len(due) > maxCatchUp {
			due = due[1:]
		}
	}
	if len(due) == 0 {
		return nil
	}
	if s.paused(e.Name) {
		s.log.Info("slots passed: the schedule is paused", zap.String("schedule", e.Name), zap.Int("slots", len(due)))
		e.cursor = due[len(due)-1]
		return nil
	}
	var fire []time.Time
	onTime := func(t time.Time) bool { return now.Sub(t) <= misfireGrace }
	switch e.Misfire {
	case "catch_up":
		fire = due
	case "skip":
		for _, t := range due {
			if onTime(t) {
				fire = append(fire, t)
			}
		}
	default: // run_once
		fire = due[len(due)-1:]
	}
	for _, slot := range fire {
		if err := s.fire(ctx, e, slot, now); err != nil {
			return err
		}
		e.cursor = slot
	}
	e.cursor = due[len(due)-1]
	return nil
}

// fire enqueues the job of one slot, unless overlap: skip and the
// schedule's previous job has not finished.
func (s *Scheduler) fire(ctx context.Context, e *entry, slot, now time.Time) error {
	if e.Overlap == "skip" {
		active, err := s.store.ScheduleActive(ctx, e.keys())
		if err != nil {
			return err
		}
		if active {
			s.log.Info("slot skipped: the previous run has not finished (overlap: skip)",
				zap.String("schedule", e.Name), zap.Time("slot", slot))
			return nil
		}
	}
	runAt := slot
	if j := e.Jitter.D(); j > 0 {
		runAt = runAt.Add(rand.N(j))
	}
	enq, err := enqueue(ctx, s.store, e.Schedule, slotKey(slot), slot, runAt, now, "")
	if err == nil && enq.Created {
		s.log.Info("scheduled job enqueued", zap.String("schedule", e.Name), zap.Time("slot", slot))
	}
	return err
}

// enqueue makes the job of a schedule's slot (or, for a trigger, of
// now), runnable at runAt, under dedupe, at now; by is the operator of a
// trigger, "" for a slot.
func enqueue(ctx context.Context, store *pgstore.Store, sc Schedule, dedupe string, slot, runAt, now time.Time, by string) (pgstore.Enqueued, error) {
	payload, err := json.Marshal(map[string]string{"schedule": sc.Name, "slot": slot.UTC().Format(time.RFC3339)})
	if err != nil {
		return pgstore.Enqueued{}, err
	}
	k := sc.keys()
	j := pgstore.NewJob{Route: k.Route, Kind: sc.Kind, Queue: sc.Queue, Group: sc.Group,
		Origin: pgstore.OriginSchedule, DedupeKey: dedupe + k.Suffix, Payload: payload, MaxAttempts: sc.MaxAttempts,
		HeaderKeys: []string{"content-type"}, HeaderVals: [][]byte{[]byte("application/json")}, RunAt: &runAt}
	if sc.TTL > 0 {
		// From when it may run, as a record's: a slot run late after
		// downtime gets the whole ttl.
		start := runAt
		if now.After(start) {
			start = now
		}
		deadline := start.Add(sc.TTL)
		j.Deadline = &deadline
	}
	return store.JobEnqueue(ctx, j, pgstore.Actor{By: by, Target: Route(sc.Name)})
}

// Trigger enqueues one job of a schedule now, for by, whatever its cron,
// pause or overlap say: an operator asked for a run. Its payload's slot
// is now; its dedupe key is its own (manual/<ns>), so it never takes a
// slot's place, and lastSlot never reads it (it reads slot/ keys only).
func Trigger(ctx context.Context, store *pgstore.Store, sc Schedule, by string, now time.Time) (pgstore.Enqueued, error) {
	return enqueue(ctx, store, sc, fmt.Sprintf("manual/%020d", now.UnixNano()), now, now, now, by)
}

// Status is what GET /v1/schedules shows of a schedule.
type Status struct {
	Name     string `json:"name"`
	Cron     string `json:"cron"`
	Timezone string `json:"timezone"`
	Kind     string `json:"kind"`
	Queue    string `json:"queue"`
	// Route is the route its jobs are stored under (Schedule.Route).
	Route    string    `json:"route"`
	Paused   bool      `json:"paused"`
	NextSlot time.Time `json:"next_slot"`
	// The last slot that made a job, and that job; nil before the first
	// (or once retention pruned them).
	LastSlot     *time.Time      `json:"last_slot"`
	LastJobID    *int64          `json:"last_job_id"`
	LastJobState *jobstate.State `json:"last_job_state"`
}

// StatusOf reads a schedule's status at now.
func StatusOf(ctx context.Context, store *pgstore.Store, sc Schedule, paused bool, now time.Time) (Status, error) {
	st := Status{Name: sc.Name, Cron: sc.Cron, Timezone: sc.Timezone, Kind: sc.Kind, Queue: sc.Queue,
		Route: sc.keys().Route, Paused: paused}
	cr, err := cron.Parse(sc.Cron)
	if err != nil {
		return st, fmt.Errorf("schedule %s: %w", sc.Name, err)
	}
	loc, err := time.LoadLocation(sc.Timezone)
	if err != nil {
		return st, fmt.Errorf("schedule %s: %w", sc.Name, err)
	}
	st.NextSlot = cr.Next(now.In(loc))
	last, id, err := lastSlot(ctx, store, sc)
	if err != nil || last.IsZero() {
		return st, err
	}
	st.LastSlot = &last
	job, err := store.JobGet(ctx, id)
	switch {
	case errors.Is(err, pgstore.ErrNotFound):
		return st, nil
	case err != nil:
		return st, err
	}
	st.LastJobID, st.LastJobState = &job.ID, &job.State
	return st, nil
}

// slotKey is a slot's dedupe key (before keys' suffix); zero-padded so
// that the greatest key is the latest slot.
func slotKey(slot time.Time) string { return fmt.Sprintf("slot/%020d", slot.Unix()) }

// lastSlot is the latest slot of a schedule among its retained jobs, and
// the id of its job; zero when it has none.
func lastSlot(ctx context.Context, store *pgstore.Store, sc Schedule) (time.Time, int64, error) {
	k, id, err := store.ScheduleLastSlot(ctx, sc.keys())
	if err != nil || k == "" {
		return time.Time{}, 0, err
	}
	sec, err := strconv.ParseInt(strings.TrimPrefix(k, "slot/"), 10, 64)
	if err != nil {
		return time.Time{}, 0, fmt.Errorf("job %d of schedule %s: dedupe key %q is not a slot", id, sc.Name, k)
	}
	return time.Unix(sec, 0), id, nil
}
