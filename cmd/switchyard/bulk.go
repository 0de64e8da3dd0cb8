package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/switchyard-dev/switchyard/internal/bulk"
)

// A bulk action's verb: `dlq redrive`, `dlq discard`, `jobs cancel` with
// --all-matching take every item a filter matches (package bulk).

// bulkVerb is how the output says a bulk action; key is its --json
// summary's count of what it did (as the admin API answers), what the
// items it takes are ("parked" entries, "unfinished" jobs).
type bulkVerb struct {
	cmd                        string // "dlq redrive"
	base, past, ing, done, key string
	noun                       bulk.Noun
	what                       string
	keys                       []string // --all-matching's keys
}

var (
	redriveVerb = bulkVerb{cmd: "dlq redrive", base: "re-drive", past: "re-drove", ing: "re-driving", done: "re-driven",
		key: "redriven", noun: bulk.Entries, what: "parked", keys: []string{"reason", "queue", "route"}}
	discardVerb = bulkVerb{cmd: "dlq discard", base: "discard", past: "discarded", ing: "discarding", done: "discarded",
		key: "discarded", noun: bulk.Entries, what: "parked", keys: []string{"reason", "queue", "route"}}
	cancelVerb = bulkVerb{cmd: "jobs cancel", base: "cancel", past: "cancelled", ing: "cancelling", done: "cancelled",
		key: "cancelled", noun: bulk.Jobs, what: "unfinished", keys: []string{"state", "queue", "route", "key"}}
)

// bulkNote is what the help of every bulk action says of a long one.
const bulkNote = `
On a terminal a bulk action shows its progress; Ctrl-C stops it between
two chunks (up to 100 items each) and says how many it took and the
command for the rest.
`

// bulkFlags are the flags of a verb that acts on one item by id or, with
// --all-matching, on every item a filter matches.
type bulkFlags struct {
	verb     bulkVerb
	matching *string
	expect   *int64
	dryRun   *bool
}

func addBulkFlags(fs *flag.FlagSet, verb bulkVerb) bulkFlags {
	return bulkFlags{
		verb: verb,
		matching: fs.String("all-matching", "", fmt.Sprintf("%s every %s %s matching `FILTER`: key=value[,key=value] (keys: %s)",
			verb.base, verb.what, verb.noun.One, strings.Join(verb.keys, ", "))),
		expect: fs.Int64("expect", -1, fmt.Sprintf("with --all-matching: %s only if `N` %s match (else none)", verb.base, verb.noun.Many)),
		dryRun: fs.Bool("dry-run", false, fmt.Sprintf("with --all-matching: count the %s that match, and print the command that takes them", verb.noun.Many)),
	}
}

// parse checks the flags against the arguments left: it returns the
// filter's key=value pairs for --all-matching (nil: one id is the
// argument). required says the action needs --expect (or --dry-run):
// one that nothing undoes.
func (b bulkFlags) parse(fs *flag.FlagSet, required bool) (map[string]string, error) {
	switch {
	case *b.expect < 0 && given(fs, "expect"):
		return nil, usagef("--expect: %d is not a count", *b.expect)
	case *b.matching == "" && (*b.expect >= 0 || *b.dryRun):
		return nil, usagef("--expect and --dry-run go with --all-matching")
	case *b.matching == "" && fs.NArg() == 1:
		return nil, nil
	case *b.matching == "" || fs.NArg() != 0:
		return nil, usagef("want exactly one %s id, or --all-matching", b.verb.noun.One)
	case *b.dryRun && *b.expect >= 0:
		return nil, usagef("--dry-run counts the %s that match; --expect acts on them: give one", b.verb.noun.Many)
	case required && !*b.dryRun && *b.expect < 0:
		return nil, usagef("--all-matching: nothing undoes a bulk %s, so it takes --expect N, the number of %s that match (--dry-run counts them)",
			b.verb.base, b.verb.noun.Many)
	}
	filter := map[string]string{}
	for _, part := range strings.Split(*b.matching, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		switch {
		case !ok || v == "":
			return nil, usagef("--all-matching: %q is not key=value", part)
		case !slices.Contains(b.verb.keys, k):
			return nil, usagef("--all-matching: unknown key %q (want %s or %s)", k,
				strings.Join(b.verb.keys[:len(b.verb.keys)-1], ", "), b.verb.keys[len(b.verb.keys)-1])
		}
		filter[k] = v
	}
	return filter, nil
}

// run is the bulk action: with --dry-run it prints the count (count) and
// the command that takes them; else it acts (act). Each chunk of items
// is one transaction, so the first SIGINT or SIGTERM stops it between two
// (the one under way completes), and it says how many it took and the
// command that takes the rest; the next signal has its default effect,
// exiting at once.
func (b bulkFlags) run(ctx context.Context, fs *flag.FlagSet, count func(context.Context) (int64, error),
	act func(context.Context, bulk.Options) (bulk.Result, error), asJSON bool, stdout, stderr io.Writer) error {
	verb := b.verb
	if *b.dryRun {
		n, err := count(ctx)
		if err != nil {
			return err
		}
		if asJSON {
			return printJSON(stdout, map[string]any{"matching": n, "command": b.command(fs, n)})
		}
		fmt.Fprintf(stdout, "%s %s matching %s now: %d; to %s them:\n  %s\n", verb.what, verb.noun.Many, *b.matching, n, verb.base, b.command(fs, n))
		return nil
	}
	opt := bulk.Options{Expect: *b.expect}
	bar := newProgressLine(stderr)
	if bar != nil {
		opt.Progress = func(r bulk.Result) {
			bar.draw(func(elapsed time.Duration) string {
				n := int64(r.Done + len(r.Failed))
				return fmt.Sprintf("%s: %s of %s %s, %d failed", verb.ing, thousands(n), thousands(r.Matching), verb.noun.Many, len(r.Failed)) +
					pace(n, verb.noun.Many, n, r.Matching, elapsed)
			})
		}
	}
	sigCtx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	opt.Stop = sigCtx.Done()
	res, err := act(ctx, opt)
	interrupted := errors.Is(err, bulk.ErrStopped)
	stop()
	if bar != nil {
		bar.clear()
	}
	for _, f := range res.Failed {
		fmt.Fprintf(stderr, "%s %d: %s\n", verb.noun.One, f.ID, f.Error)
	}
	if err != nil && !interrupted {
		return err
	}
	// The items not taken are as they were: those it never reached and
	// those that failed.
	left := res.Matching - int64(res.Done)
	switch {
	case asJSON:
		out := map[string]any{verb.key: res.Done, "failed": nonNilSlice(res.Failed), "matching": res.Matching, "complete": !interrupted}
		if interrupted {
			out["rest"] = b.command(fs, left)
		}
		if err := printJSON(stdout, out); err != nil {
			return err
		}
	case interrupted:
		fmt.Fprintf(stdout, "interrupted: %s %d of %s matching, %d failed; the other %d are as they were. To %s them:\n  %s\n",
			verb.past, res.Done, verb.noun.Count(res.Matching), len(res.Failed), left, verb.base, b.command(fs, left))
	default:
		fmt.Fprintf(stdout, "%s %s, %d failed\n", verb.past, verb.noun.Count(int64(res.Done)), len(res.Failed))
	}
	switch {
	case interrupted:
		return errors.New("interrupted")
	case len(res.Failed) > 0:
		return fmt.Errorf("%s could not be %s", verb.noun.Count(int64(len(res.Failed))), verb.done)
	}
	return nil
}

// command is the command that takes the n items matching the action's
// filter: --expect n makes it take none if the number changed meanwhile
// (items that came since match too).
func (b bulkFlags) command(fs *flag.FlagSet, n int64) string {
	args := []string{"switchyard", b.verb.cmd}
	for _, name := range []string{"config", "all-matching"} {
		if given(fs, name) {
			args = append(args, "--"+name, shellQuote(fs.Lookup(name).Value.String()))
		}
	}
	return strings.Join(append(args, "--expect", fmt.Sprint(n)), " ")
}
