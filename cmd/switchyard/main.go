// Command switchyard turns Kafka records into durable jobs in PostgreSQL
// and runs them. This package is CLI wiring only: flags, config loading,
// signals and exit codes; the work happens in the engine's packages.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/switchyard-dev/switchyard/config"
)

// Exit codes: 0 on success, 2 on bad usage (a bad config file included),
// 1 on failure.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// usageError is a bad flag, argument or config: exit 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

type verb struct {
	name    string
	summary string
	// subs are the verb's subcommands, each with its arguments and what
	// it does: the top-level help lists every one, and a mistyped one is
	// answered with the nearest.
	subs []sub
	run  func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

type sub struct{ name, args, summary string }

// verbList is every verb, in the order of the top-level help: the daily
// ones first.
func verbList() []verb {
	return []verb{
		{name: "dev", summary: "everything on one machine: embedded broker, throwaway Postgres, example target", run: runDev},
		{name: "run", summary: "run the dispatcher: ingest, workers, admin API", run: runRun},
		{name: "migrate", summary: "create or upgrade the schema (safe to run concurrently)", run: runMigrate},
		{name: "produce", summary: "write a record to a topic", run: runProduce},
		{name: "jobs", run: runJobs, subs: []sub{
			{"list", "", "list jobs by --state, --queue, --route, --key; a page at a time"},
			{"get", "ID", "show a job, with its result"},
			{"cancel", "ID", "cancel a job that has not finished (or --all-matching F --expect N)"},
			{"retry", "ID", "run a job waiting for a retry or its run_at now"},
		}},
		{name: "dlq", run: runDLQ, subs: []sub{
			{"list", "", "list dead-letter entries by --reason, --queue, --route"},
			{"show", "ID", "show an entry, with its payload decoded"},
			{"redrive", "ID", "put an entry back to work (or --all-matching F)"},
			{"discard", "ID", "drop an entry for good (or --all-matching F --expect N)"},
		}},
		{name: "queues", run: runQueues, subs: []sub{
			{"list", "", "the config's queues: depth, oldest runnable job, paused"},
			{"pause", "Q", "claim nothing from a queue, fleet-wide"},
			{"resume", "Q", "claim from a paused queue again"},
		}},
		{name: "routes", run: runRoutes, subs: []sub{
			{"list", "", "the config's routes: topic, filter, limits, paused"},
			{"pause", "R", "fetch nothing for a route, fleet-wide"},
			{"resume", "R", "fetch for a paused route again"},
		}},
		{name: "schedules", run: runSchedules, subs: []sub{
			{"list", "", "the config's schedules: cron, route, next and last slot, paused"},
			{"pause", "S", "let a schedule's slots pass without jobs, fleet-wide"},
			{"resume", "S", "make jobs of a paused schedule's slots again"},
			{"trigger", "S", "make one job of a schedule now, beside its slots"},
		}},
		{name: "audit", run: runAudit, subs: []sub{
			{"list", "", "who cancelled, re-drove, discarded, paused or resumed what, and when"},
		}},
		{name: "replay", summary: "re-read a range of a topic into jobs, without duplicates", run: runReplay},
		{name: "bench", summary: "run the benchmark suite", run: runBench},
		{name: "version", summary: "print the version of this build (also --version)", run: runVersion},
	}
}

// verbs is verbList by name.
func verbs() map[string]verb {
	m := map[string]verb{}
	for _, v := range verbList() {
		m[v.name] = v
	}
	return m
}

// subNames lists a verb's subcommands, in help order.
func (v verb) subNames() []string {
	var out []string
	for _, s := range v.subs {
		out = append(out, s.name)
	}
	return out
}

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	vs := verbs()
	if len(args) == 0 {
		printUsage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && vs[args[1]].run != nil {
			// help VERB [SUB] is VERB [SUB] --help.
			return run(ctx, append(args[1:], "--help"), stdout, stderr)
		}
		printUsage(stdout)
		return exitOK
	case "-version", "--version":
		args = append([]string{"version"}, args[1:]...)
	}
	v, ok := vs[args[0]]
	if !ok && strings.HasPrefix(args[0], "-") {
		fmt.Fprintf(stderr, "switchyard: %s: flags go after the verb: switchyard <verb> %s ...\n\n", args[0], args[0])
		printUsage(stderr)
		return exitUsage
	}
	if !ok {
		fmt.Fprintf(stderr, "switchyard: unknown verb %q%s\n\n", args[0], didYouMean(args[0], slices.Collect(maps.Keys(vs))))
		printUsage(stderr)
		return exitUsage
	}
	err := v.run(ctx, args[1:], stdout, stderr)
	var ue usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "switchyard %s: %v\n", v.name, err)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "switchyard %s: %v\n", v.name, err)
		return exitFailure
	}
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: switchyard <verb> [flags]")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, v := range verbList() {
		if len(v.subs) == 0 {
			fmt.Fprintf(tw, "  %s\t%s\n", v.name, v.summary)
			continue
		}
		for _, s := range v.subs {
			fmt.Fprintf(tw, "  %s\t%s\n", strings.TrimSpace(v.name+" "+s.name+" "+s.args), s.summary)
		}
	}
	tw.Flush()
	fmt.Fprintln(w, "\nEvery verb but dev and version takes --config FILE (default switchyard.yaml, or")
	fmt.Fprintln(w, "SWITCHYARD_CONFIG) and reads SWITCHYARD_DATABASE_URL, SWITCHYARD_KAFKA_BROKERS and")
	fmt.Fprintln(w, "SWITCHYARD_ADMIN_TOKEN, which win over the file. Lists print a table, and JSON with --json.")
	fmt.Fprintln(w, "`switchyard <verb> --help` for flags.")
}

// subHelp prints a verb's subcommands, for `switchyard jobs --help`.
func subHelp(w io.Writer, verbName string) {
	v := verbs()[verbName]
	fmt.Fprintf(w, "usage: switchyard %s <subcommand> [flags]\n\n", verbName)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, s := range v.subs {
		fmt.Fprintf(tw, "  %s\t%s\n", strings.TrimSpace(verbName+" "+s.name+" "+s.args), s.summary)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n`switchyard %s <subcommand> --help` for flags.\n", verbName)
}

// unknownSub is the usage error of a mistyped subcommand: the nearest
// one when there is one, and all of them.
func unknownSub(verbName, got string) error {
	names := verbs()[verbName].subNames()
	return usagef("unknown subcommand %q%s (want %s)", got, didYouMean(got, names), orList(names))
}

// missingSub is the usage error of a verb given no subcommand.
func missingSub(verbName string) error {
	var forms []string
	for _, s := range verbs()[verbName].subs {
		forms = append(forms, strings.TrimSpace(s.name+" "+s.args))
	}
	return usagef("missing subcommand: %s %s", verbName, strings.Join(forms, " | "))
}

// orList is "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// newFlags makes a verb's flag set with the shared --config flag; its
// --help prints the synopsis, then about (what the verb does, with
// examples; may be empty), then the flags, to help (stdout). Parse
// errors are returned as usage errors (parseFlags); --help prints and
// exits 0.
func newFlags(name, synopsis, about string, help io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	// Its output is the help that --help asks for, which goes to stdout
	// (a pager reads it); parse errors are main's to say, on stderr.
	fs.SetOutput(help)
	cfgPath := fs.String("config", envOr("SWITCHYARD_CONFIG", "switchyard.yaml"), "config `FILE` (env SWITCHYARD_CONFIG)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: switchyard %s\n\n", synopsis)
		if about != "" {
			fmt.Fprintf(fs.Output(), "%s\n\n", strings.TrimSpace(about))
		}
		fmt.Fprintln(fs.Output(), "flags:")
		printFlags(fs)
	}
	return fs, cfgPath
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	// The flag package prints every parse error with the whole usage
	// after it; a mistyped flag deserves one line that names it.
	out := fs.Output()
	fs.SetOutput(io.Discard)
	err := parseInterspersed(fs, args)
	fs.SetOutput(out)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.Usage()
			return err
		}
		// "flag provided but not defined: -stat": name the nearest flag.
		if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: "); ok {
			var known []string
			fs.VisitAll(func(f *flag.Flag) { known = append(known, f.Name) })
			name = strings.TrimLeft(name, "-")
			// A negative number (an id, a record value) is read as a
			// flag; "unknown flag --5" would not say how to pass it.
			if _, err := strconv.ParseFloat(name, 64); err == nil && name[0] >= '0' && name[0] <= '9' {
				return usagef("unknown flag -%s: an argument that starts with \"-\" reads as a flag; put it after \"--\" (switchyard %s … -- -%s)",
					name, fs.Name(), name)
			}
			if s := nearest(name, known); s != "" {
				return usagef("unknown flag --%s; did you mean --%s?", name, s)
			}
			return usagef("unknown flag --%s (`switchyard %s --help` lists the flags)", name, fs.Name())
		}
		return usagef("%s (`switchyard %s --help` lists the flags)", flagProblem(fs, err), fs.Name())
	}
	return nil
}

// reBadFlagValue matches the flag package's errors for a value it could
// not parse: `invalid value "abc" for flag -limit: parse error`, and
// `invalid boolean value "yes" for -json: parse error`.
var reBadFlagValue = regexp.MustCompile(`^invalid (?:boolean )?value (".*") for (?:flag )?-(\S+): `)

// flagProblem says a parse error of the flag package as this tool's
// errors say things: the flag as people type it (--limit), and what it
// takes.
func flagProblem(fs *flag.FlagSet, err error) string {
	if name, ok := strings.CutPrefix(err.Error(), "flag needs an argument: -"); ok {
		return fmt.Sprintf("--%s needs a value", strings.TrimLeft(name, "-"))
	}
	m := reBadFlagValue.FindStringSubmatch(err.Error())
	if m == nil {
		return err.Error()
	}
	want := "a value it takes"
	if f := fs.Lookup(m[2]); f != nil {
		typ := fmt.Sprintf("%T", f.Value)
		// A flag of our own type says itself what is wrong with a value
		// (`"x" is not key=value`); the flag package's own types only
		// say "parse error".
		if why := err.Error()[len(m[0]):]; !strings.HasPrefix(typ, "*flag.") && why != "" {
			return fmt.Sprintf("--%s: %s", m[2], why)
		}
		switch typ {
		case "*flag.intValue", "*flag.int64Value", "*flag.uintValue", "*flag.uint64Value":
			want = "a whole number"
		case "*flag.boolValue":
			want = "true or false (or the flag alone)"
		case "*flag.durationValue":
			want = "a duration such as 30s or 5m"
		}
	}
	return fmt.Sprintf("--%s: %s is not %s", m[2], m[1], want)
}

// parseInterspersed parses flags wherever they are among the arguments,
// as people type them: `jobs get 17 --json` as well as `jobs get --json
// 17`. What follows "--" is arguments only.
func parseInterspersed(fs *flag.FlagSet, args []string) error {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional, args = append(positional, rest[0]), rest[1:]
	}
	// Parsing "--" and the arguments sets nothing and leaves fs.Args()
	// the arguments.
	return fs.Parse(append([]string{"--"}, positional...))
}

// printFlags is flag.PrintDefaults with the double dashes the synopses
// and examples use: "--limit N" rather than "-limit int".
func printFlags(fs *flag.FlagSet) {
	w := fs.Output()
	fs.VisitAll(func(f *flag.Flag) {
		if f.Usage == "" {
			return // a flag the verb has only to refuse (dev's --config)
		}
		arg, usage := flag.UnquoteUsage(f)
		switch arg {
		case "int", "uint", "int64", "uint64":
			arg = "N"
		case "string":
			arg = "VALUE"
		case "duration":
			arg = "DURATION"
		case "float":
			arg = "X"
		}
		line := "  --" + f.Name
		if arg != "" {
			line += " " + arg
		}
		fmt.Fprintf(w, "%s\n    \t%s", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
		if def := f.DefValue; def != "" && def != "0" && def != "false" && def != "-1" && def != "[]" {
			fmt.Fprintf(w, " (default %s)", def)
		}
		fmt.Fprintln(w)
	})
}

// jsonFlag adds --json: print JSON (the admin API's shapes) instead of
// text for people.
func jsonFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("json", false, "print JSON instead of text")
}

// loadConfig reads the config file. Verbs that only need the database
// (migrate, jobs, dlq) also work without a file when none was named and
// SWITCHYARD_DATABASE_URL is set. When notes is not nil, it says there
// which environment variables overrode a value the file set.
func loadConfig(fs *flag.FlagSet, path string, dbOnly bool, notes io.Writer) (*config.Config, error) {
	if dbOnly && !configNamed(fs) {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return dbOnlyConfig()
		}
	}
	cfg, err := config.Load(path, os.Getenv)
	if err != nil {
		return nil, usageError{err.Error()}
	}
	if notes != nil {
		for _, o := range envOverrides(path, os.Getenv) {
			fmt.Fprintf(notes, "switchyard: note: %s overrides %s set in %s\n", o.variable, o.field, path)
		}
	}
	return cfg, nil
}

// configNamed reports whether the user named a config file, by flag or
// environment, rather than relying on the default path.
func configNamed(fs *flag.FlagSet) bool {
	return os.Getenv("SWITCHYARD_CONFIG") != "" || given(fs, "config")
}

// given reports whether the command line set the flag named, even to
// its default or to nothing.
func given(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// dbOnlyConfig is the config of a verb that only needs the database.
func dbOnlyConfig() (*config.Config, error) {
	cfg := &config.Config{Postgres: config.Postgres{URL: os.Getenv("SWITCHYARD_DATABASE_URL")}}
	cfg.SetDefaults()
	if cfg.Postgres.URL == "" {
		return nil, usagef("postgres.url: not set: pass --config or set SWITCHYARD_DATABASE_URL")
	}
	if err := config.CheckPostgresURL(cfg.Postgres.URL); err != nil {
		return nil, usagef("%v (set by SWITCHYARD_DATABASE_URL)", err)
	}
	return cfg, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// newLogger logs JSON to stderr; SWITCHYARD_LOG_LEVEL=debug|info|warn|error.
func newLogger(stderr io.Writer) (*zap.Logger, error) {
	level := zapcore.InfoLevel
	if s := os.Getenv("SWITCHYARD_LOG_LEVEL"); s != "" {
		if err := level.UnmarshalText([]byte(strings.ToLower(s))); err != nil {
			return nil, usagef("SWITCHYARD_LOG_LEVEL: %q is not one of debug, info, warn, error", s)
		}
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	// "grace":"5s" and "backoff":"100ms", not a bare 5 and 0.1 whose
	// unit a reader has to know.
	enc.EncodeDuration = zapcore.StringDurationEncoder
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(stderr), level)
	return zap.New(core), nil
}
