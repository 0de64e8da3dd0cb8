// Package schedule enqueues the jobs of the config's cron schedules.
//
// Every process that ingests runs a Scheduler; none is elected. A slot (a
// minute the expression names) becomes at most one job however many
// processes see it: its dedupe key is the slot, under a route of the
// schedule's own ("schedule/<name>"), so the second insert is a no-op
// (I2). Where a schedule left off survives restarts in the jobs
// themselves: the greatest slot among its retained jobs.
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

// Route is the job route of a schedule's jobs.
func Route(name string) string { return "schedule/" + name }

// Schedule is one schedule with what its jobs inherit from the route of
// the same kind, if any.
type Schedule struct {
	config.Schedule
	// MaxAttempts of its jobs.
	MaxAttempts int
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
		last, err := LastSlot(ctx, s.store, e.Name)
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
		if err := s.fire(ctx, e, slot); err != nil {
			return err
		}
		e.cursor = slot
	}
	e.cursor = due[len(due)-1]
	return nil
}

// fire enqueues the job of one slot, unless overlap: skip and the
// schedule's previous job has not finished.
func (s *Scheduler) fire(ctx context.Context, e *entry, slot time.Time) error {
	if e.Overlap == "skip" {
		active, err := s.store.RouteActive(ctx, Route(e.Name))
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
	enq, err := enqueue(ctx, s.store, e.Schedule, slotKey(slot), slot, runAt, "")
	if err == nil && enq.Created {
		s.log.Info("scheduled job enqueued", zap.String("schedule", e.Name), zap.Time("slot", slot))
	}
	return err
}

// enqueue makes the job of a schedule's slot (or, for a trigger, of
// now), runnable at runAt, under dedupe; by is the operator of a
// trigger, "" for a slot.
func enqueue(ctx context.Context, store *pgstore.Store, sc Schedule, dedupe string, slot, runAt time.Time, by string) (pgstore.Enqueued, error) {
	payload, err := json.Marshal(map[string]string{"schedule": sc.Name, "slot": slot.UTC().Format(time.RFC3339)})
	if err != nil {
		return pgstore.Enqueued{}, err
	}
	return store.JobEnqueue(ctx, pgstore.NewJob{Route: Route(sc.Name), Kind: sc.Kind, Queue: sc.Queue,
		Origin: pgstore.OriginSchedule, DedupeKey: dedupe, Payload: payload, MaxAttempts: sc.MaxAttempts,
		HeaderKeys: []string{"content-type"}, HeaderVals: [][]byte{[]byte("application/json")}, RunAt: &runAt}, by)
}

// Trigger enqueues one job of a schedule now, for by, whatever its cron,
// pause or overlap say: an operator asked for a run. Its payload's slot
// is now; its dedupe key is its own (manual/<ns>), so it never takes a
// slot's place, and LastSlot never reads it (slot/ keys sort after).
func Trigger(ctx context.Context, store *pgstore.Store, sc Schedule, by string, now time.Time) (pgstore.Enqueued, error) {
	return enqueue(ctx, store, sc, fmt.Sprintf("manual/%020d", now.UnixNano()), now, now, by)
}

// Status is what GET /v1/schedules shows of a schedule.
type Status struct {
	Name     string    `json:"name"`
	Cron     string    `json:"cron"`
	Timezone string    `json:"timezone"`
	Kind     string    `json:"kind"`
	Queue    string    `json:"queue"`
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
	st := Status{Name: sc.Name, Cron: sc.Cron, Timezone: sc.Timezone, Kind: sc.Kind, Queue: sc.Queue, Paused: paused}
	cr, err := cron.Parse(sc.Cron)
	if err != nil {
		return st, fmt.Errorf("schedule %s: %w", sc.Name, err)
	}
	loc, err := time.LoadLocation(sc.Timezone)
	if err != nil {
		return st, fmt.Errorf("schedule %s: %w", sc.Name, err)
	}
	st.NextSlot = cr.Next(now.In(loc))
	last, err := LastSlot(ctx, store, sc.Name)
	if err != nil || last.IsZero() {
		return st, err
	}
	st.LastSlot = &last
	job, err := store.JobFind(ctx, Route(sc.Name), pgstore.OriginSchedule, slotKey(last))
	switch {
	case errors.Is(err, pgstore.ErrNotFound):
		return st, nil
	case err != nil:
		return st, err
	}
	st.LastJobID, st.LastJobState = &job.ID, &job.State
	return st, nil
}

// slotKey is a slot's dedupe key; zero-padded so that the greatest key is
// the latest slot.
func slotKey(slot time.Time) string { return fmt.Sprintf("slot/%020d", slot.Unix()) }

// LastSlot is the latest slot of a schedule among its retained jobs; zero
// when it has none.
func LastSlot(ctx context.Context, store *pgstore.Store, name string) (time.Time, error) {
	k, err := store.RouteLastDedupeKey(ctx, Route(name))
	if err != nil || k == "" {
		return time.Time{}, err
	}
	sec, err := strconv.ParseInt(strings.TrimPrefix(k, "slot/"), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("job dedupe key %q of route %s is not a slot", k, Route(name))
	}
	return time.Unix(sec, 0), nil
}
