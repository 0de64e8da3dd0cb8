package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/admin"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/schedule"
)

// runQueues, runRoutes and runSchedules list the configured queues,
// routes or schedules with whether they are paused, and pause or resume
// one (and trigger a schedule). A pause is a row in Postgres: it holds
// for every process of the deployment, within a second, and across
// restarts, until it is resumed.
func runQueues(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runPauses(ctx, "queues", pgstore.PauseQueue, pausable{
		names: func(c *config.Config) []string { return c.QueueNames() },
		items: func(ctx context.Context, store *pgstore.Store, l admin.Listing) (any, error) {
			return l.QueueItems(ctx, store)
		},
		table: printQueues,
	}, args, stdout, stderr)
}

func runRoutes(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runPauses(ctx, "routes", pgstore.PauseRoute, pausable{
		names: routeNames,
		// Without lag: the CLI reads no consumer positions (GET /v1/routes
		// has them).
		items: func(ctx context.Context, store *pgstore.Store, l admin.Listing) (any, error) {
			return l.RouteItems(ctx, store, nil, zap.NewNop())
		},
		table: printRoutes,
	}, args, stdout, stderr)
}

func runSchedules(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runPauses(ctx, "schedules", pgstore.PauseSchedule, pausable{
		names: func(c *config.Config) []string {
			var out []string
			for _, sc := range c.Schedules {
				out = append(out, sc.Name)
			}
			slices.Sort(out)
			return out
		},
		items: func(ctx context.Context, store *pgstore.Store, l admin.Listing) (any, error) {
			return l.ScheduleItems(ctx, store, time.Now())
		},
		table:   printSchedules,
		trigger: triggerSchedule,
	}, args, stdout, stderr)
}

// triggerSchedule makes one job of the schedule named now, for the CLI's
// user (audited). runPauses has checked that the config names it.
func triggerSchedule(ctx context.Context, store *pgstore.Store, cfg *config.Config, name string) (pgstore.Enqueued, error) {
	scs := schedule.Of(cfg)
	i := slices.IndexFunc(scs, func(sc schedule.Schedule) bool { return sc.Name == name })
	return schedule.Trigger(ctx, store, scs[i], cliActor(), time.Now())
}

// pauseAbout is what queues, routes and schedules subcommands' --help says.
var pauseAbout = map[string]string{
	"queues list": `
Lists the config's queues: the jobs waiting for a lane, queued, reserved
(claimed, not started), running and retrying, the dead ones, the age of
the oldest job that could run now, and whether an operator paused the
queue (and since when).`,
	"queues pause": `
Pauses a queue for every process, within a second and across restarts:
nothing of it is claimed; running jobs finish; new jobs wait.

example:
  switchyard queues pause bulk`,
	"queues resume": `
Resumes a paused queue: its jobs are claimed again, within a second.`,
	"routes list": `
Lists the config's routes by name, with their topic, queue, filter, limits
and whether an operator paused them (GET /v1/routes also shows lag and
which other route of the topic holds it).`,
	"routes pause": `
Pauses a route for every process, within a second and across restarts:
its topic is not fetched, so records wait in Kafka. The routes of one
topic share its offsets, so the topic's other routes wait too.

example:
  switchyard routes pause order-refund`,
	"routes resume": `
Resumes a paused route: its topic is fetched again, within a second.`,
	"schedules list": `
Lists the config's schedules: cron and time zone, the kind, queue and route
of their jobs, the next slot, the last slot that made a job and that job,
and whether an operator paused the schedule (and since when).`,
	"schedules pause": `
Pauses a schedule for every process, within a second and across restarts:
its slots pass without jobs, and resuming does not catch up on them.

example:
  switchyard schedules pause nightly-reconcile`,
	"schedules resume": `
Resumes a paused schedule: its next slot makes a job again.`,
	"schedules trigger": `
Makes one job of a schedule now, whatever its cron, pause or overlap say,
beside its slots (the next slot still makes its own). Audited as yours.

example:
  switchyard schedules trigger nightly-reconcile`,
}

// pausable is what runPauses needs of queues, routes or schedules.
type pausable struct {
	// names are the configured ones, which alone can be paused.
	names func(*config.Config) []string
	// items are their list with --json: the admin API's items.
	items func(ctx context.Context, store *pgstore.Store, l admin.Listing) (any, error)
	// table prints their list for people.
	table func(ctx context.Context, w io.Writer, now time.Time, store *pgstore.Store, cfg *config.Config,
		paused map[string]time.Time) error
	// trigger makes a job of the one named now (schedules only).
	trigger func(ctx context.Context, store *pgstore.Store, cfg *config.Config, name string) (pgstore.Enqueued, error)
}

func runPauses(ctx context.Context, verb string, kind pgstore.PauseKind, p pausable, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return missingSub(verb)
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "-h", "-help", "--help", "help":
		subHelp(stdout, verb)
		return nil
	case "list", "pause", "resume":
	case "trigger":
		if p.trigger == nil {
			return unknownSub(verb, sub)
		}
	default:
		return unknownSub(verb, sub)
	}
	synopsis := verb + " " + sub + " [--config FILE] [--json]"
	if sub != "list" {
		synopsis += " NAME"
	}
	fs, cfgPath := newFlags(verb+" "+sub, synopsis, pauseAbout[verb+" "+sub], stdout)
	asJSON := jsonFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	want := 1
	if sub == "list" {
		want = 0
	}
	if fs.NArg() != want {
		return usagef("%s %s takes %d argument(s), got %d", verb, sub, want, fs.NArg())
	}
	cfg, err := loadConfig(fs, *cfgPath, true, stderr)
	if err != nil {
		return err
	}
	known := p.names(cfg)
	if sub != "list" && !slices.Contains(known, fs.Arg(0)) {
		name := fs.Arg(0)
		if len(known) == 0 {
			// A file was read that has none (loadConfig reads one when it
			// was named or is there), or there is no file to name any.
			if _, err := os.Stat(*cfgPath); configNamed(fs) || err == nil {
				return usagef("no such %s in the config: %q (%s names no %s)", kind, name, *cfgPath, verb)
			}
			return usagef("no such %s in the config: %q (no config file names any: pass --config)", kind, name)
		}
		return usagef("no such %s in the config: %q%s (known: %s)", kind, name, didYouMean(name, known), strings.Join(known, ", "))
	}
	store, err := connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer store.Close()
	if sub == "trigger" {
		name := fs.Arg(0)
		enq, err := p.trigger(ctx, store, cfg, name)
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdout, map[string]any{"name": name, "job_id": enq.ID, "created": enq.Created})
		}
		fmt.Fprintf(stdout, "triggered %s %s: job %d, to run now (switchyard jobs get %d)\n", kind, name, enq.ID, enq.ID)
		return nil
	}
	if sub != "list" {
		name := fs.Arg(0)
		change := store.Resume
		if sub == "pause" {
			change = store.Pause
		}
		changed, err := change(ctx, kind, name, cliActor())
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(stdout, map[string]any{"name": name, "paused": sub == "pause"})
		}
		switch {
		case !changed && sub == "pause":
			fmt.Fprintf(stdout, "%s %s was already paused\n", kind, name)
		case !changed:
			fmt.Fprintf(stdout, "%s %s was not paused\n", kind, name)
		case sub == "pause" && kind == pgstore.PauseQueue:
			fmt.Fprintf(stdout, "paused queue %s: nothing of it is claimed, by any process, until switchyard queues resume %s\n", name, name)
		case sub == "pause" && kind == pgstore.PauseSchedule:
			fmt.Fprintf(stdout, "paused schedule %s: its slots pass without jobs, in every process, until switchyard schedules resume %s\n", name, name)
		case sub == "pause":
			fmt.Fprintf(stdout, "paused route %s: its topic is not fetched, by any process, until switchyard routes resume %s\n", name, name)
		default:
			fmt.Fprintf(stdout, "resumed %s %s\n", kind, name)
		}
		return nil
	}
	if *asJSON {
		items, err := p.items(ctx, store, admin.ListingOf(cfg))
		if err != nil {
			return err
		}
		return printJSON(stdout, map[string]any{"items": items, "next": ""})
	}
	pauses, err := store.Pauses(ctx)
	if err != nil {
		return err
	}
	return p.table(ctx, stdout, time.Now(), store, cfg, pauses[kind])
}

// noneConfigured says that the config names no queues, routes or
// schedules: where no file was read (a verb reads only the database's
// settings from the environment without one), which file to pass.
func noneConfigured(what string, cfg *config.Config) string {
	if len(cfg.Queues) == 0 {
		return fmt.Sprintf("no %s: no config file was read, and the config names them (pass --config)", what)
	}
	return fmt.Sprintf("no %s in the config", what)
}

// pausedCell is "no", or since when.
func pausedCell(now time.Time, paused map[string]time.Time, name string) string {
	at, ok := paused[name]
	if !ok {
		return "no"
	}
	return "since " + ago(now, at)
}

func printQueues(ctx context.Context, w io.Writer, now time.Time, store *pgstore.Store, cfg *config.Config,
	paused map[string]time.Time) error {
	names := cfg.QueueNames()
	if len(names) == 0 {
		_, err := fmt.Fprintln(w, noneConfigured("queues", cfg))
		return err
	}
	stats, err := store.QueueStats(ctx, admin.GroupsOf(cfg))
	if err != nil {
		return err
	}
	tw := newTable(w, "QUEUE", "WAITING", "QUEUED", "RESERVED", "RUNNING", "RETRYING", "DEAD", "OLDEST RUNNABLE", "CONCURRENCY", "PAUSED")
	for _, name := range names {
		st := stats[name]
		if st == nil {
			st = &pgstore.QueueStat{Jobs: map[string]int64{}}
		}
		oldest := "-"
		if st.OldestRunnableAgeSeconds > 0 {
			oldest = ago(now, now.Add(-time.Duration(st.OldestRunnableAgeSeconds*float64(time.Second))))
		}
		q := cfg.Queues[name]
		row(tw, name, fmt.Sprint(st.Jobs["waiting"]), fmt.Sprint(st.Jobs["queued"]), fmt.Sprint(st.Jobs[pgstore.Reserved]),
			fmt.Sprint(st.Running), fmt.Sprint(st.Jobs["retrying"]), fmt.Sprint(st.Dead), oldest,
			fmt.Sprint(q.Concurrency), pausedCell(now, paused, name))
	}
	return tw.Flush()
}

func printRoutes(_ context.Context, w io.Writer, now time.Time, _ *pgstore.Store, cfg *config.Config,
	paused map[string]time.Time) error {
	routes := slices.Clone(cfg.Routes)
	if len(routes) == 0 {
		_, err := fmt.Fprintln(w, noneConfigured("routes", cfg))
		return err
	}
	slices.SortFunc(routes, func(a, b config.Route) int { return strings.Compare(a.Name, b.Name) })
	tw := newTable(w, "ROUTE", "TOPIC", "QUEUE", "KIND", "FILTER", "LIMITS", "PAUSED")
	for _, r := range routes {
		filter := "all records"
		if f := r.Filter; f != nil {
			where := "field " + f.Field
			if f.Header != "" {
				where = "header " + f.Header
			}
			filter = where + " in " + strings.Join(f.In, ",")
		}
		var limits []string
		if r.MaxRunning > 0 {
			limits = append(limits, fmt.Sprintf("max_running %d", r.MaxRunning))
		}
		if g := r.Group; g != nil {
			by := g.Field
			if g.Header != "" {
				by = "header " + g.Header
			}
			limits = append(limits, fmt.Sprintf("%d per %s", g.MaxRunning, by))
		}
		if rl := r.RateLimit; rl != nil {
			l := fmt.Sprintf("%d/%s", rl.Limit, rl.Per)
			if rl.Burst > 0 {
				l += fmt.Sprintf(" burst %d", rl.Burst)
			}
			limits = append(limits, l)
		}
		row(tw, r.Name, r.Topic, r.Queue, r.Kind, filter, orDash(strings.Join(limits, ", ")), pausedCell(now, paused, r.Name))
	}
	return tw.Flush()
}

func printSchedules(ctx context.Context, w io.Writer, now time.Time, store *pgstore.Store, cfg *config.Config,
	paused map[string]time.Time) error {
	scs := schedule.Of(cfg)
	if len(scs) == 0 {
		_, err := fmt.Fprintln(w, noneConfigured("schedules", cfg))
		return err
	}
	slices.SortFunc(scs, func(a, b schedule.Schedule) int { return strings.Compare(a.Name, b.Name) })
	tw := newTable(w, "SCHEDULE", "CRON", "TIMEZONE", "KIND", "QUEUE", "ROUTE", "NEXT SLOT", "LAST SLOT", "LAST JOB", "PAUSED")
	for _, sc := range scs {
		_, isPaused := paused[sc.Name]
		st, err := schedule.StatusOf(ctx, store, sc, isPaused, now)
		if err != nil {
			return err
		}
		last := "-"
		if st.LastJobID != nil {
			last = fmt.Sprintf("%d %s", *st.LastJobID, *st.LastJobState)
		}
		row(tw, sc.Name, sc.Cron, sc.Timezone, sc.Kind, sc.Queue, sc.Route, ago(now, st.NextSlot), agoPtr(now, st.LastSlot),
			last, pausedCell(now, paused, sc.Name))
	}
	return tw.Flush()
}
