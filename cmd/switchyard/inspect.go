package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/admin"
	"github.com/switchyard-dev/switchyard/internal/bulk"
	"github.com/switchyard-dev/switchyard/internal/dlq"
	"github.com/switchyard-dev/switchyard/internal/ingest"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/schedule"
	"github.com/switchyard-dev/switchyard/jobstate"
)

// openStore loads the config (the database part is enough) and connects.
func openStore(ctx context.Context, fs *flag.FlagSet, cfgPath string, stderr io.Writer) (*pgstore.Store, *config.Config, error) {
	cfg, err := loadConfig(fs, cfgPath, true, stderr)
	if err != nil {
		return nil, nil, err
	}
	store, err := connect(ctx, cfg)
	return store, cfg, err
}

// openListStore is openStore for a list filtered by queue and route. A
// name the config does not know is listed anyway, with a note on stderr
// (and the names it does know): the jobs and entries of a renamed or
// removed route or queue stay behind, and a typo shows as an empty list
// beside the note.
func openListStore(ctx context.Context, fs *flag.FlagSet, cfgPath string, stderr io.Writer, queue, route string) (*pgstore.Store, error) {
	cfg, err := loadConfig(fs, cfgPath, true, stderr)
	if err != nil {
		return nil, err
	}
	if err := checkQueueAndRoute(cfg, queue, route); err != nil {
		fmt.Fprintf(stderr, "switchyard: note: %v; listing it anyway\n", err)
	}
	return connect(ctx, cfg)
}

// open opens the store of a verb, whatever its schema holds (migrate).
func open(ctx context.Context, cfg *config.Config) (*pgstore.Store, error) {
	return pgstore.Open(ctx, pgstore.Config{URL: cfg.Postgres.URL, Schema: cfg.Postgres.Schema, MaxConns: 2})
}

// connect opens the store of a verb that reads or changes jobs, once its
// schema is known to be this binary's: an unmigrated one would answer
// with a missing table's SQL error.
func connect(ctx context.Context, cfg *config.Config) (*pgstore.Store, error) {
	store, err := open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := store.RequireCurrent(ctx); err != nil {
		store.Close()
		return nil, err
	}
	return store, nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func parseID(what, s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(s, "-") {
		return 0, usagef("%s: %s is larger than any id (at most %d)", what, s, int64(math.MaxInt64))
	}
	if err != nil || id <= 0 {
		return 0, usagef("%s: %q is not a positive integer id", what, s)
	}
	return id, nil
}

func notFoundAs(err error, what string, id int64) error {
	switch {
	case errors.Is(err, pgstore.ErrNotFound):
		return fmt.Errorf("%s %d not found", what, id)
	case err == pgstore.ErrConflict:
		// Bare, the conflict says nothing of its own. One that wraps it
		// says why (pgstore.ErrRedriven names the job the entry made), as
		// the admin API's 409 does, and is shown as it is.
		return fmt.Errorf("%s %d is not in a state that allows this", what, id)
	}
	return err
}

// checkOneOf is the usage error of a filter value that matches nothing
// that can exist: it names the valid values, and the nearest. An empty
// valid list is not known (no config file): nothing is checked.
func checkOneOf(flagName, what, value string, valid []string) error {
	if value == "" || len(valid) == 0 || slices.Contains(valid, value) {
		return nil
	}
	return usagef("--%s: %q is not %s%s (valid: %s)", flagName, value, what, didYouMean(value, valid), strings.Join(valid, ", "))
}

// checkPage checks a listing's --limit (a page holds 1 to 1000 rows) and
// --after (an id from the page before, or 0 for the first).
func checkPage(limit int, after int64) error {
	if limit < 1 || limit > 1000 {
		return usagef("--limit: %d is not between 1 and 1000", limit)
	}
	if after < 0 {
		return usagef("--after: %d is not an id: give the last id of the page before (0, the default, for the first)", after)
	}
	return nil
}

// routeNames are the config's route names, sorted.
func routeNames(cfg *config.Config) []string {
	var out []string
	for _, r := range cfg.Routes {
		out = append(out, r.Name)
	}
	slices.Sort(out)
	return out
}

// checkQueueAndRoute checks --queue and --route against the config: its
// routes and its schedules' own (schedule/NAME), which hold their jobs.
func checkQueueAndRoute(cfg *config.Config, queue, route string) error {
	if err := checkOneOf("queue", "a queue of the config", queue, cfg.QueueNames()); err != nil {
		return err
	}
	routes := routeNames(cfg)
	for _, sc := range schedule.Of(cfg) {
		if !slices.Contains(routes, sc.Route) {
			routes = append(routes, sc.Route)
		}
	}
	return checkOneOf("route", "a route of the config", route, routes)
}

// jobsAbout is what each jobs subcommand's --help says beside its flags.
var jobsAbout = map[string]string{
	"get": `
Shows a job: its state, route, key, attempts and last error; when it may
run (a run_at, delay or retry moves it); and its result once it succeeded
(up to the route's result_max_bytes of a 2xx body, or what a Go handler
kept), decoded: JSON pretty-printed, else text, else a hex dump. --json
prints it as GET /v1/jobs/{id} answers it (the result in base64).

example:
  switchyard jobs get 4711`,
	"cancel": `
Cancels a job that has not finished: it ends cancelled and never runs
again. A running attempt is cancelled within a second on whichever process
runs it: an HTTP request is aborted, a Go handler's context ends with
workers.ErrCancelled. A job that already finished is an error (exit 1).

--all-matching cancels every unfinished job (waiting, queued, running,
retrying) that existed when it starts and that the filter matches, each
as above. Nothing undoes a cancel, so it takes --expect N, the number that
match (--dry-run counts them and prints the command), and cancels none
unless N match. A job that finishes on its own first is listed as failed.
` + bulkNote + `
examples:
  switchyard jobs cancel 4711
  switchyard jobs cancel --all-matching queue=email,state=queued --dry-run
  switchyard jobs cancel --all-matching queue=email,state=queued --expect 48210`,
	"retry": `
Runs a job that waits for its time now: a retry waiting out its backoff,
or a job whose run_at or delay is ahead. Audited as yours, as the
dashboard's and the API's retry are. A job that is not waiting for its
time (queued, running, finished) is an error (exit 1).

example:
  switchyard jobs retry 4711`,
	"list": `
Lists the jobs that match every filter given, in id order, a page at a
time: when there are more, the last line says how to read the next page
(--after the last id shown).

examples:
  switchyard jobs list --state dead --queue bulk
  switchyard jobs list --route order-refund --key c42
  switchyard jobs list --state queued --json | jq '.items[].id'`,
}

func runJobs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return missingSub("jobs")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "-h", "-help", "--help", "help":
		subHelp(stdout, "jobs")
		return nil
	case "cancel":
		return runJobsCancel(ctx, args, stdout, stderr)
	case "get", "retry":
		fs, cfgPath := newFlags("jobs "+sub, "jobs "+sub+" [--config FILE] [--json] ID", jobsAbout[sub], stdout)
		asJSON := jsonFlag(fs)
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		if fs.NArg() != 1 {
			return usagef("jobs %s takes exactly one job id", sub)
		}
		id, err := parseID("job id", fs.Arg(0))
		if err != nil {
			return err
		}
		store, cfg, err := openStore(ctx, fs, *cfgPath, stderr)
		if err != nil {
			return err
		}
		defer store.Close()
		done := ""
		if sub == "retry" {
			if err := store.JobRetryNow(ctx, id, cliActor()); err != nil {
				if errors.Is(err, pgstore.ErrConflict) {
					return errors.New(pgstore.NotWaiting(id))
				}
				return notFoundAs(err, "job", id)
			}
			done = fmt.Sprintf("job %d runs now", id)
		}
		return printJobAfter(ctx, store, cfg, id, done, *asJSON, stdout)
	case "list":
		fs, cfgPath := newFlags("jobs list", "jobs list [--config FILE] [--state S] [--queue Q] [--route R] [--key K] [--limit N] [--after ID] [--json]",
			jobsAbout[sub], stdout)
		var f pgstore.JobFilter
		state := fs.String("state", "", "only jobs in this `STATE` ("+jobstate.Join(jobstate.All)+")")
		fs.StringVar(&f.Queue, "queue", "", "only jobs of this `QUEUE`")
		fs.StringVar(&f.Route, "route", "", "only jobs of this `ROUTE` (by name)")
		fs.StringVar(&f.Key, "key", "", "only jobs of this `KEY`")
		fs.IntVar(&f.Limit, "limit", 50, "at most `N` jobs (1-1000)")
		fs.Int64Var(&f.After, "after", 0, "start after this job `ID`")
		asJSON := jsonFlag(fs)
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		if fs.NArg() != 0 {
			return usagef("unexpected argument %q", fs.Arg(0))
		}
		if err := checkPage(f.Limit, f.After); err != nil {
			return err
		}
		if err := checkOneOf("state", "a job state", *state, jobstate.Strings(jobstate.All)); err != nil {
			return err
		}
		f.State = jobstate.State(*state)
		store, err := openListStore(ctx, fs, *cfgPath, stderr, f.Queue, f.Route)
		if err != nil {
			return err
		}
		defer store.Close()
		// One more than asked for says whether there is a next page. (A
		// copy: f.Limit is the flag's, which the hint repeats.)
		page := f
		page.Limit++
		jobs, err := store.JobList(ctx, page)
		if err != nil {
			return err
		}
		return printList(listOut{stdout, stderr, *asJSON, fs, "jobs list"}, jobs, f.Limit,
			func(j pgstore.JobRow) int64 { return j.ID }, printJobs)
	}
	return unknownSub("jobs", sub)
}

// runJobsCancel cancels one job, or every unfinished job matching a
// filter such as "queue=email,state=queued".
func runJobsCancel(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cfgPath := newFlags("jobs cancel",
		"jobs cancel [--config FILE] [--json] ID | --all-matching state=S,queue=Q,route=NAME,key=K (--expect N | --dry-run)",
		jobsAbout["cancel"], stdout)
	bf := addBulkFlags(fs, cancelVerb)
	asJSON := jsonFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	matching, err := bf.parse(fs, true)
	if err != nil {
		return err
	}
	f := pgstore.JobFilter{State: jobstate.State(matching["state"]), Queue: matching["queue"], Route: matching["route"], Key: matching["key"]}
	if err := checkOneOf("state", "a state a job leaves on its own", string(f.State), jobstate.Strings(jobstate.Unfinished)); err != nil {
		return usagef("--all-matching: %v", strings.TrimPrefix(err.Error(), "--"))
	}
	var id int64
	if matching == nil {
		if id, err = parseID("job id", fs.Arg(0)); err != nil {
			return err
		}
	}
	store, cfg, err := openStore(ctx, fs, *cfgPath, stderr)
	if err != nil {
		return err
	}
	defer store.Close()
	if matching != nil {
		if err := checkQueueAndRoute(cfg, f.Queue, f.Route); err != nil {
			return usagef("--all-matching: %v", strings.TrimPrefix(err.Error(), "--"))
		}
		return bf.run(ctx, fs,
			func(ctx context.Context) (int64, error) { return store.JobCountUnfinished(ctx, f) },
			func(ctx context.Context, opt bulk.Options) (bulk.Result, error) {
				return store.JobCancelMatching(ctx, f, cliActor(), opt)
			}, *asJSON, stdout, stderr)
	}
	if err := store.JobCancel(ctx, id, cliActor()); err != nil {
		// A finished job's conflict says how it ended.
		return notFoundAs(err, "job", id)
	}
	return printJobAfter(ctx, store, cfg, id, fmt.Sprintf("cancelled job %d", id), *asJSON, stdout)
}

// printJobAfter prints a job after an action on it: the line that says
// what was done (none: ""), then the job as jobs get shows it.
func printJobAfter(ctx context.Context, store *pgstore.Store, cfg *config.Config, id int64, done string, asJSON bool, stdout io.Writer) error {
	j, err := store.JobGetDetail(ctx, id, admin.GroupsOf(cfg))
	if err != nil {
		return notFoundAs(err, "job", id)
	}
	if asJSON {
		return printJSON(stdout, j)
	}
	if done != "" {
		fmt.Fprintf(stdout, "%s\n\n", done)
	}
	return printJob(stdout, time.Now(), j)
}

// printJobs is the table of jobs list.
func printJobs(w io.Writer, now time.Time, jobs []pgstore.JobRow) error {
	if len(jobs) == 0 {
		_, err := fmt.Fprintln(w, "no jobs")
		return err
	}
	tw := newTable(w, "ID", "STATE", "QUEUE", "ROUTE", "KEY", "ATTEMPTS", "CREATED", "SCHEDULED", "LAST ERROR")
	for _, j := range jobs {
		scheduled := "-"
		if !j.State.IsFinal() {
			scheduled = ago(now, j.ScheduledAt)
		}
		lastErr := "-"
		if j.LastError != nil && *j.LastError != "" {
			lastErr = clip(*j.LastError, 60)
		}
		row(tw, fmt.Sprint(j.ID), string(j.State), j.Queue, orDash(j.Route), clip(orDash(j.Key), 24),
			fmt.Sprintf("%d/%d", j.Attempts, j.MaxAttempts), ago(now, j.CreatedAt), scheduled, lastErr)
	}
	return tw.Flush()
}

// printJob is the detail view of jobs get and cancel.
func printJob(w io.Writer, now time.Time, j pgstore.JobDetail) error {
	v := &kv{w: w}
	v.add("id", fmt.Sprint(j.ID))
	v.add("state", string(j.State))
	v.add("kind", j.Kind)
	v.add("queue", j.Queue)
	v.add("route", orDash(j.Route))
	v.add("key", orDash(j.Key))
	if j.Version != nil {
		v.add("version", fmt.Sprint(*j.Version))
	}
	v.add("attempts", fmt.Sprintf("%d of %d", j.Attempts, j.MaxAttempts))
	v.add("created", stamp(now, j.CreatedAt))
	if !j.State.IsFinal() {
		v.add("scheduled", stamp(now, j.ScheduledAt))
	}
	if j.StartedAt != nil {
		v.add("started", stamp(now, *j.StartedAt))
	}
	if j.FinishedAt != nil {
		v.add("finished", stamp(now, *j.FinishedAt))
	}
	if j.Source != nil {
		v.add("source", fmt.Sprintf("%s/%d/%d", j.Source.Topic, j.Source.Partition, j.Source.Offset))
	}
	if l := j.Lane; l != nil {
		v.add("lane", lanePlace(j.ID, *l))
		if g := l.Gap; g != nil {
			then := "parks its next job (gap_policy park)"
			if g.Policy == "proceed" {
				then = "runs its next job anyway (gap_policy proceed)"
			}
			v.add("lane gap", fmt.Sprintf("version %d missing; held until %s, then the lane %s", g.Awaited, stamp(now, g.Until), then))
		}
		if l.LastApplied != nil {
			v.add("lane applied", fmt.Sprintf("version %d (a job of a version not newer is skipped)", *l.LastApplied))
		}
	}
	if g := j.Group; g != nil {
		line := fmt.Sprintf("%s (%d running, max_running %d)", clip(g.Value, 60), g.Running, g.MaxRunning)
		if g.Held {
			line += ": held by the group's cap until one of them ends"
		}
		v.add("group", line)
	}
	if e := j.DLQEntryID; e != nil {
		v.add("dlq entry", fmt.Sprintf("%d: `switchyard dlq redrive %d` runs the job again, `dlq discard %d` drops it", *e, *e, *e))
	}
	if j.LastError != nil && *j.LastError != "" {
		v.add("last error", *j.LastError)
	}
	if block := attemptErrors(now, j); block != "" {
		v.add("errors", block)
	}
	if r := j.Result; r != nil {
		what, text := decodeBytes(r.Base64)
		if r.ContentType != "" {
			what += ", " + r.ContentType
		}
		if text == "" {
			// A 2xx with no body: said on the line, not as an empty block.
			v.add("result", what)
		} else {
			v.add("result ("+what+")", text+"\n")
		}
	}
	return v.flush()
}

// lanePlace says where job id stands in its lane, as the console's Lane
// section does. A waiting job with nothing ahead of it is not the head:
// its lane has none, which is a strict lane holding on a missing version
// (until gap_timeout: printJob's "lane gap" line says which and until
// when) or, briefly, a lane whose next job was cancelled as its head
// ended (the rescuer promotes it). Saying "the head" there sent people
// looking for a job that was not running.
func lanePlace(id int64, l pgstore.LanePosition) string {
	head := l.HeadJobID != nil && *l.HeadJobID == id
	var place string
	switch {
	case head:
		place = "the head of its lane"
	case l.Position == 1:
		place = "1 job ahead of it"
	case l.Position > 1:
		place = fmt.Sprintf("%d jobs ahead of it", l.Position)
	default:
		place = "next in its lane"
	}
	switch {
	case l.HeadJobID == nil && l.Gap != nil:
		place += fmt.Sprintf(", %d waiting; the lane has no head: it holds for a missing version", l.Waiting)
	case l.HeadJobID == nil:
		place += fmt.Sprintf(", %d waiting; the lane has no head: the rescuer's next pass over the lanes promotes its next job", l.Waiting)
	case head:
		place += fmt.Sprintf(", %d waiting behind it", l.Waiting)
	default:
		place += fmt.Sprintf(" (head: job %d), %d waiting behind the head", *l.HeadJobID, l.Waiting)
	}
	if l.Blocked && head {
		place += "; dead, it blocks its lane until it is re-driven or discarded"
	} else if l.Blocked {
		place += "; blocked by its dead head until it is re-driven or discarded"
	}
	return place
}

// attemptErrors is a job's errors, one line each, with its re-drives
// where they fell among them: a re-drive counts the attempts from 1
// again, and without the marker the list reads 1, 2, 3, 1, 2, 3.
func attemptErrors(now time.Time, j pgstore.JobDetail) string {
	var errs []struct {
		Attempt int       `json:"attempt"`
		At      time.Time `json:"at"`
		Error   string    `json:"error"`
	}
	if len(j.Errors) > 0 && json.Unmarshal(j.Errors, &errs) != nil {
		errs = nil // shown by --json as stored
	}
	if len(errs) == 0 && len(j.Redrives) == 0 {
		return ""
	}
	var b strings.Builder
	redrives := j.Redrives
	// marks writes the re-drives that came before the first `before` errors.
	marks := func(before int) {
		for len(redrives) > 0 && redrives[0].ErrorsBefore <= before {
			r := redrives[0]
			fmt.Fprintf(&b, "-- re-driven from DLQ entry %d %s by %s: attempts count from 1 again\n", r.EntryID, ago(now, r.At), r.By)
			redrives = redrives[1:]
		}
	}
	for i, e := range errs {
		marks(i)
		fmt.Fprintf(&b, "attempt %d, %s: %s\n", e.Attempt, ago(now, e.At), clip(e.Error, 120))
	}
	marks(math.MaxInt) // and any the list does not reach
	return b.String()
}

const dlqListAbout = `
Lists the dead-letter entries that match every filter given, in id order,
a page at a time: when there are more, the last line says how to read the
next page. Reasons: decode, missing_field, too_large (the record never
became a job), permanent, max_attempts (its job died), gap.

examples:
  switchyard dlq list --reason max_attempts --queue bulk
  switchyard dlq list --route order-refund --json`

const dlqShowAbout = `
Shows a dead-letter entry: why it was parked, its record's position, the
errors of its attempts, its headers and key, and its payload decoded: JSON
pretty-printed, else text, else a hex dump. --json prints it as
GET /v1/dlq/{id} answers it (the bytes in base64).

example:
  switchyard dlq show 17`

func runDLQ(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return missingSub("dlq")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "redrive", "discard":
		return runDLQAction(ctx, sub, args, stdout, stderr)
	case "-h", "-help", "--help", "help":
		subHelp(stdout, "dlq")
		return nil
	case "show":
		fs, cfgPath := newFlags("dlq show", "dlq show [--config FILE] [--json] ID", dlqShowAbout, stdout)
		asJSON := jsonFlag(fs)
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		if fs.NArg() != 1 {
			return usagef("dlq show takes exactly one entry id")
		}
		id, err := parseID("entry id", fs.Arg(0))
		if err != nil {
			return err
		}
		store, _, err := openStore(ctx, fs, *cfgPath, stderr)
		if err != nil {
			return err
		}
		defer store.Close()
		e, err := store.DLQGet(ctx, id)
		if err != nil {
			return notFoundAs(err, "DLQ entry", id)
		}
		if *asJSON {
			return printJSON(stdout, e)
		}
		return printDLQEntry(stdout, time.Now(), e)
	case "list":
		fs, cfgPath := newFlags("dlq list", "dlq list [--config FILE] [--reason R] [--queue Q] [--route R] [--state S] [--limit N] [--after ID] [--json]",
			dlqListAbout, stdout)
		var f pgstore.DLQFilter
		fs.StringVar(&f.State, "state", pgstore.DLQParked, "`STATE`: parked (still to handle), redriven (their history) or all")
		fs.StringVar(&f.Reason, "reason", "", "only entries parked for this `REASON` ("+strings.Join(dlq.Reasons, ", ")+")")
		fs.StringVar(&f.Queue, "queue", "", "only entries of this `QUEUE`")
		fs.StringVar(&f.Route, "route", "", "only entries of this `ROUTE` (by name)")
		fs.IntVar(&f.Limit, "limit", 50, "at most `N` entries (1-1000)")
		fs.Int64Var(&f.After, "after", 0, "start after this entry `ID`")
		asJSON := jsonFlag(fs)
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		if fs.NArg() != 0 {
			return usagef("unexpected argument %q", fs.Arg(0))
		}
		if err := checkPage(f.Limit, f.After); err != nil {
			return err
		}
		if err := checkOneOf("reason", "a DLQ reason", f.Reason, dlq.Reasons); err != nil {
			return err
		}
		if err := checkOneOf("state", "a DLQ state", f.State, pgstore.DLQStates); err != nil {
			return err
		}
		store, err := openListStore(ctx, fs, *cfgPath, stderr, f.Queue, f.Route)
		if err != nil {
			return err
		}
		defer store.Close()
		page := f
		page.Limit++
		es, err := store.DLQList(ctx, page)
		if err != nil {
			return err
		}
		return printList(listOut{stdout, stderr, *asJSON, fs, "dlq list"}, es, f.Limit,
			func(e pgstore.DLQEntry) int64 { return e.ID }, printDLQ)
	}
	return unknownSub("dlq", sub)
}

func source(s *pgstore.SourceRow) string {
	if s == nil {
		return "-"
	}
	return fmt.Sprintf("%s/%d/%d", s.Topic, s.Partition, s.Offset)
}

// printDLQ is the table of dlq list.
func printDLQ(w io.Writer, now time.Time, es []pgstore.DLQEntry) error {
	if len(es) == 0 {
		_, err := fmt.Fprintln(w, "no DLQ entries")
		return err
	}
	tw := newTable(w, "ID", "REASON", "ROUTE", "QUEUE", "JOB", "SOURCE", "ATTEMPTS", "PARKED", "RE-DRIVEN", "LAST ERROR")
	for _, e := range es {
		job := "-"
		if e.JobID != nil {
			job = fmt.Sprint(*e.JobID)
		}
		row(tw, fmt.Sprint(e.ID), e.Reason, orDash(e.Route), orDash(e.Queue), job, source(e.Source),
			fmt.Sprint(e.Attempts), ago(now, e.CreatedAt), redriven(now, e.Redriven), clip(orDash(e.LastError), 60))
	}
	return tw.Flush()
}

// redriven says what became of a re-driven entry: when, by whom, its
// job and that job's state; "-" while it is parked.
func redriven(now time.Time, r *pgstore.Redrive) string {
	if r == nil {
		return "-"
	}
	state := "pruned"
	if r.JobState != nil {
		state = string(*r.JobState)
	}
	return fmt.Sprintf("%s by %s: job %d %s", ago(now, r.At), r.By, r.JobID, state)
}

// printDLQEntry is the detail view of dlq show.
func printDLQEntry(w io.Writer, now time.Time, e pgstore.DLQEntry) error {
	v := &kv{w: w}
	v.add("id", fmt.Sprint(e.ID))
	v.add("reason", e.Reason)
	v.add("route", orDash(e.Route))
	v.add("queue", orDash(e.Queue))
	if e.JobID != nil {
		v.add("job", fmt.Sprintf("%d (switchyard jobs get %d)", *e.JobID, *e.JobID))
	} else {
		v.add("job", "none: the record never became a job")
	}
	v.add("source", source(e.Source))
	v.add("attempts", fmt.Sprint(e.Attempts))
	v.add("parked", stamp(now, e.CreatedAt))
	if e.Redriven != nil {
		v.add("re-driven", redriven(now, e.Redriven))
	}
	v.add("last error", orDash(e.LastError))
	var history []struct {
		Attempt *int      `json:"attempt"`
		Error   string    `json:"error"`
		At      time.Time `json:"at"`
	}
	if len(e.Errors) > 0 && json.Unmarshal(e.Errors, &history) == nil && len(history) > 0 {
		var b strings.Builder
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		for _, h := range history {
			// A parked record had no attempt; a dead job's errors say which.
			n := ""
			if h.Attempt != nil {
				n = fmt.Sprintf("attempt %d\t", *h.Attempt)
			}
			fmt.Fprintf(tw, "%s\t%s%s\n", ago(now, h.At), n, clip(h.Error, 200))
		}
		tw.Flush()
		v.add("errors", b.String())
	}
	if e.RecordKey != nil {
		v.add("record key", shortBytes(e.RecordKey))
	}
	if len(e.Headers) > 0 {
		var b strings.Builder
		for _, h := range e.Headers {
			fmt.Fprintf(&b, "%s: %s\n", h.Key, shortBytes(h.Value))
		}
		v.add("headers", b.String())
	}
	what, text := decodeBytes(e.Payload)
	if e.Truncated {
		n := "?"
		if e.RecordBytes != nil {
			n = fmt.Sprint(*e.RecordBytes)
		}
		what += fmt.Sprintf(", the first of the record's %s bytes; a re-drive reads it whole from Kafka", n)
	}
	if text == "" {
		v.add("payload", what)
	} else {
		v.add("payload ("+what+")", text+"\n")
	}
	return v.flush()
}

// runDLQAction re-drives or discards one entry, or every entry matching
// a filter such as "reason=max_attempts,queue=bulk".
func runDLQAction(ctx context.Context, sub string, args []string, stdout, stderr io.Writer) error {
	verb := discardVerb
	synopsis := "dlq discard [--config FILE] [--json] ID | --all-matching reason=R,queue=Q,route=NAME (--expect N | --dry-run)"
	about := `
Drops a DLQ entry for good: its record is not made a job again (it is
still in Kafka until the topic's retention ends). An entry re-driven
already is refused: it answers for the job it made, which is what to act
on now.

--all-matching discards every entry parked when it starts that the filter
matches. It drops them for good, so it takes --expect N, the number that
match (--dry-run counts them and prints the command), and discards none
unless N match.
` + bulkNote + `
examples:
  switchyard dlq discard 17
  switchyard dlq discard --all-matching reason=decode,route=orders --dry-run
  switchyard dlq discard --all-matching reason=decode,route=orders --expect 5000`
	if sub == "redrive" {
		verb = redriveVerb
		synopsis = "dlq redrive [--config FILE] [--json] ID | --all-matching reason=R,queue=Q,route=NAME [--expect N | --dry-run]"
		about = `
Puts a DLQ entry back to work. A dead job runs again with fresh attempts
(in its lane's order). A parked record is decoded again with the current
config's route it was parked for, by name — so fixing that route's field
names, or raising its max_record_bytes, makes it a job.

--all-matching re-drives every entry parked when it starts that the
filter matches, each once (a job that dies again is parked anew, for a
later re-drive); --expect N re-drives them only if N match (the count
you confirmed: --dry-run counts them), else nothing.
` + bulkNote + `
examples:
  switchyard dlq redrive 17
  switchyard dlq redrive --all-matching reason=missing_field,route=order-refund
  switchyard dlq redrive --all-matching reason=max_attempts,queue=bulk --dry-run
  switchyard dlq redrive --all-matching reason=max_attempts,queue=bulk --expect 20000`
	}
	fs, cfgPath := newFlags("dlq "+sub, synopsis, about, stdout)
	bf := addBulkFlags(fs, verb)
	asJSON := jsonFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	matching, err := bf.parse(fs, sub == "discard")
	if err != nil {
		return err
	}
	filter := pgstore.DLQFilter{Reason: matching["reason"], Queue: matching["queue"], Route: matching["route"]}
	if filter.Reason != "" && !slices.Contains(dlq.Reasons, filter.Reason) {
		return usagef("--all-matching: reason %q is not a DLQ reason%s (valid: %s)", filter.Reason, didYouMean(filter.Reason, dlq.Reasons),
			strings.Join(dlq.Reasons, ", "))
	}
	var id int64
	if matching == nil {
		if id, err = parseID("entry id", fs.Arg(0)); err != nil {
			return err
		}
	}
	cfg, err := loadConfig(fs, *cfgPath, true, stderr)
	if err != nil {
		return err
	}
	if err := checkQueueAndRoute(cfg, filter.Queue, filter.Route); err != nil {
		return usagef("--all-matching: %v", strings.TrimPrefix(err.Error(), "--"))
	}
	store, err := connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer store.Close()
	var routes []*ingest.Route
	for _, r := range cfg.Routes {
		cr, err := ingest.CompileRoute(r)
		if err != nil {
			return err
		}
		routes = append(routes, cr)
	}
	// Entries that keep only part of their record are read again from
	// Kafka; without brokers (a database-only invocation) they cannot be.
	var rereader dlq.Rereader
	if len(cfg.Kafka.Brokers) > 0 {
		kopts, err := ingest.ClientOpts(cfg.Kafka, nil)
		if err != nil {
			return err
		}
		rereader = ingest.NewRereader(kopts)
	}
	svc := dlq.New(store, routes, rereader)
	if matching != nil {
		act := svc.RedriveMatching
		if sub == "discard" {
			act = svc.DiscardMatching
		}
		return bf.run(ctx, fs,
			func(ctx context.Context) (int64, error) { return store.DLQCount(ctx, filter) },
			func(ctx context.Context, opt bulk.Options) (bulk.Result, error) {
				return act(ctx, dlq.Bulk{Filter: filter, By: cliActor(), Options: opt})
			}, *asJSON, stdout, stderr)
	}
	if sub == "discard" {
		if err := svc.Discard(ctx, id, cliActor()); err != nil {
			return notFoundAs(err, "DLQ entry", id)
		}
		if *asJSON {
			return printJSON(stdout, map[string]any{"id": id, "discarded": true})
		}
		fmt.Fprintf(stdout, "discarded DLQ entry %d\n", id)
		return nil
	}
	jobID, err := svc.Redrive(ctx, id, cliActor())
	if err != nil {
		return notFoundAs(err, "DLQ entry", id)
	}
	if *asJSON {
		return printJSON(stdout, map[string]any{"id": id, "job_id": jobID})
	}
	// The re-drive's own transaction puts a job of a lane back in the
	// lane's order, where a version the lane has passed (applied, or
	// a strict lane's dead or gap-parked version) ends skipped at
	// once. "re-drove" alone read as if the job would run.
	if j, err := store.JobGet(ctx, jobID); err == nil && j.State == jobstate.Skipped && j.LastError != nil {
		fmt.Fprintf(stdout, "re-drove DLQ entry %d as job %d, which its lane skipped at once, never delivered: %s\n",
			id, jobID, visible(*j.LastError, false))
		return nil
	}
	fmt.Fprintf(stdout, "re-drove DLQ entry %d as job %d\n", id, jobID)
	return nil
}

func nonNilSlice[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
