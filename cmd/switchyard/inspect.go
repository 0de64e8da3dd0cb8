package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/dlq"
	"github.com/switchyard-dev/switchyard/internal/ingest"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/jobstate"
)

// openStore loads the config (the database part is enough) and connects.
func openStore(ctx context.Context, fs *flag.FlagSet, cfgPath string) (*pgstore.Store, *config.Config, error) {
	cfg, err := loadConfig(fs, cfgPath, true)
	if err != nil {
		return nil, nil, err
	}
	store, err := pgstore.Open(ctx, pgstore.Config{URL: cfg.Postgres.URL, Schema: cfg.Postgres.Schema, MaxConns: 2})
	return store, cfg, err
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func parseID(what, s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, usagef("%s: %q is not a positive integer id", what, s)
	}
	return id, nil
}

func notFoundAs(err error, what string, id int64) error {
	switch {
	case errors.Is(err, pgstore.ErrNotFound):
		return fmt.Errorf("%s %d not found", what, id)
	case errors.Is(err, pgstore.ErrConflict):
		return fmt.Errorf("%s %d is not in a state that allows this", what, id)
	}
	return err
}

// jobsAbout is what each jobs subcommand's --help says beside its flags.
var jobsAbout = map[string]string{
	"get": `
Prints a job as GET /v1/jobs/{id} does: its state, route, key, attempts
and last error; scheduled_at (when it may run: a run_at, delay or retry
moves it); and its result once it succeeded (up to the route's
result_max_bytes of a 2xx body, or what a Go handler kept), base64 with its
content type. GET /v1/jobs/{id}/result answers the result raw.

example:
  switchyard jobs get 4711`,
	"cancel": `
Cancels a job that has not finished: it ends cancelled and never runs
again. A running attempt is cancelled within a second on whichever process
runs it: an HTTP request is aborted, a Go handler's context ends with
workers.ErrCancelled. A job that already finished is an error (exit 1).

example:
  switchyard jobs cancel 4711`,
	"list": `
Lists the jobs that match every filter given, in id order, a page at a
time: --after takes the last id of a page to read the next.

examples:
  switchyard jobs list --state dead --queue bulk
  switchyard jobs list --route order-refund --key c42`,
}

func runJobs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("missing subcommand: get ID | list [--state S] [--queue Q] [--key K] | cancel ID")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, "usage: switchyard jobs get ID | jobs list [--state S] [--queue Q] [--key K] | jobs cancel ID\n\n`switchyard jobs <subcommand> --help` for flags.")
		return nil
	case "get", "cancel":
		fs, cfgPath := newFlags("jobs "+sub, "jobs "+sub+" [--config FILE] ID", jobsAbout[sub], stderr)
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
		store, _, err := openStore(ctx, fs, *cfgPath)
		if err != nil {
			return err
		}
		defer store.Close()
		if sub == "cancel" {
			if err := store.JobCancel(ctx, id, cliActor()); err != nil {
				if errors.Is(err, pgstore.ErrConflict) {
					return fmt.Errorf("job %d already finished; nothing to cancel", id)
				}
				return notFoundAs(err, "job", id)
			}
		}
		j, err := store.JobGetDetail(ctx, id)
		if err != nil {
			return notFoundAs(err, "job", id)
		}
		return printJSON(stdout, j)
	case "list":
		fs, cfgPath := newFlags("jobs list", "jobs list [--config FILE] [--state S] [--queue Q] [--route R] [--key K] [--limit N] [--after ID]",
			jobsAbout[sub], stderr)
		var f pgstore.JobFilter
		state := fs.String("state", "", "only jobs in this state")
		fs.StringVar(&f.Queue, "queue", "", "only jobs of this queue")
		fs.StringVar(&f.Route, "route", "", "only jobs of this route (by name)")
		fs.StringVar(&f.Key, "key", "", "only jobs of this key")
		fs.IntVar(&f.Limit, "limit", 50, "at most this many (1-1000)")
		fs.Int64Var(&f.After, "after", 0, "start after this job id")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		if f.Limit < 1 || f.Limit > 1000 {
			return usagef("--limit: %d is not between 1 and 1000", f.Limit)
		}
		if f.State = jobstate.State(*state); f.State != "" && !f.State.Valid() {
			return usagef("--state: %q is not a job state (%s)", *state, jobstate.Join(jobstate.All))
		}
		store, _, err := openStore(ctx, fs, *cfgPath)
		if err != nil {
			return err
		}
		defer store.Close()
		jobs, err := store.JobList(ctx, f)
		if err != nil {
			return err
		}
		return printJSON(stdout, map[string]any{"items": nonNilSlice(jobs)})
	}
	return usagef("unknown subcommand %q: want get, list or cancel", sub)
}

func runDLQ(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("missing subcommand: list [--queue Q] | show ID | redrive ID|--all-matching FILTER | discard ID")
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "redrive", "discard":
		return runDLQAction(ctx, sub, args, stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, "usage: switchyard dlq list [--queue Q] | dlq show ID | dlq redrive ID|--all-matching FILTER | dlq discard ID\n\n`switchyard dlq <subcommand> --help` for flags.")
		return nil
	case "show":
		fs, cfgPath := newFlags("dlq show", "dlq show [--config FILE] ID", "", stderr)
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
		store, _, err := openStore(ctx, fs, *cfgPath)
		if err != nil {
			return err
		}
		defer store.Close()
		e, err := store.DLQGet(ctx, id)
		if err != nil {
			return notFoundAs(err, "DLQ entry", id)
		}
		return printJSON(stdout, e)
	case "list":
		fs, cfgPath := newFlags("dlq list", "dlq list [--config FILE] [--queue Q] [--reason R] [--limit N] [--after ID]", "", stderr)
		var f pgstore.DLQFilter
		fs.StringVar(&f.Queue, "queue", "", "only entries of this queue")
		fs.StringVar(&f.Reason, "reason", "", "only entries with this reason")
		fs.IntVar(&f.Limit, "limit", 50, "at most this many (1-1000)")
		fs.Int64Var(&f.After, "after", 0, "start after this entry id")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		if f.Limit < 1 || f.Limit > 1000 {
			return usagef("--limit: %d is not between 1 and 1000", f.Limit)
		}
		store, _, err := openStore(ctx, fs, *cfgPath)
		if err != nil {
			return err
		}
		defer store.Close()
		es, err := store.DLQList(ctx, f)
		if err != nil {
			return err
		}
		return printJSON(stdout, map[string]any{"items": nonNilSlice(es)})
	}
	return usagef("unknown subcommand %q: want list, show, redrive or discard", sub)
}

// runDLQAction re-drives or discards one entry, or re-drives every entry
// matching a filter such as "reason=max_attempts,queue=bulk".
func runDLQAction(ctx context.Context, sub string, args []string, stdout, stderr io.Writer) error {
	synopsis := "dlq discard [--config FILE] ID"
	if sub == "redrive" {
		synopsis = "dlq redrive [--config FILE] ID | --all-matching reason=R,queue=Q,route=NAME"
	}
	about := ""
	if sub == "redrive" {
		about = `
Puts a DLQ entry back to work. A dead job runs again with fresh attempts
(in its lane's order). A parked record is decoded again with the current
config's route it was parked for, by name — so fixing that route's field
names, or raising its max_record_bytes, makes it a job.

examples:
  switchyard dlq redrive 17
  switchyard dlq redrive --all-matching reason=missing_field,route=order-refund`
	}
	fs, cfgPath := newFlags("dlq "+sub, synopsis, about, stderr)
	matching := ""
	if sub == "redrive" {
		fs.StringVar(&matching, "all-matching", "", "re-drive every entry matching key=value[,key=value] (keys: reason, queue, route)")
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var filter pgstore.DLQFilter
	var id int64
	switch {
	case matching != "" && fs.NArg() == 0:
		f, err := parseDLQFilter(matching)
		if err != nil {
			return err
		}
		filter = f
	case matching == "" && fs.NArg() == 1:
		var err error
		if id, err = parseID("entry id", fs.Arg(0)); err != nil {
			return err
		}
	case sub == "redrive":
		return usagef("want exactly one entry id, or --all-matching")
	default:
		return usagef("want exactly one entry id")
	}
	store, cfg, err := openStore(ctx, fs, *cfgPath)
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
	if sub == "discard" {
		if err := svc.Discard(ctx, id, cliActor()); err != nil {
			return notFoundAs(err, "DLQ entry", id)
		}
		fmt.Fprintf(stdout, "discarded DLQ entry %d\n", id)
		return nil
	}
	if id != 0 {
		jobID, err := svc.Redrive(ctx, id, cliActor())
		if err != nil {
			return notFoundAs(err, "DLQ entry", id)
		}
		fmt.Fprintf(stdout, "re-drove DLQ entry %d as job %d\n", id, jobID)
		return nil
	}
	done, failed, err := svc.RedriveMatching(ctx, filter, cliActor())
	for _, f := range failed {
		fmt.Fprintf(stderr, "DLQ entry %d: %s\n", f.ID, f.Error)
	}
	fmt.Fprintf(stdout, "re-drove %d entries, %d failed\n", done, len(failed))
	if err == nil && len(failed) > 0 {
		err = fmt.Errorf("%d entries could not be re-driven", len(failed))
	}
	return err
}

func parseDLQFilter(s string) (pgstore.DLQFilter, error) {
	var f pgstore.DLQFilter
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || v == "" {
			return f, usagef("--all-matching: %q is not key=value", part)
		}
		switch k {
		case "reason":
			if !slices.Contains(dlq.Reasons, v) {
				return f, usagef("--all-matching: reason %q is not one of %s", v, strings.Join(dlq.Reasons, ", "))
			}
			f.Reason = v
		case "queue":
			f.Queue = v
		case "route":
			f.Route = v
		default:
			return f, usagef("--all-matching: unknown key %q (want reason, queue or route)", k)
		}
	}
	return f, nil
}

func nonNilSlice[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
