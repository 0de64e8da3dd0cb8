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
	"os"
	"sort"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/switchyard-dev/switchyard/config"
)

// Exit codes per SPEC §4.
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
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func verbs() map[string]verb {
	vs := []verb{
		{"migrate", "create or upgrade the schema (safe to run concurrently)", runMigrate},
		{"run", "run the dispatcher: ingest, workers, admin API", runRun},
		{"dev", "everything on one machine: embedded broker, throwaway Postgres, example target", runDev},
		{"produce", "write a record to a topic", runProduce},
		{"jobs", "inspect jobs: jobs get ID | jobs list [--state S] [--queue Q] [--key K]", runJobs},
		{"dlq", "the dead-letter store: dlq list | show ID | redrive ID|--all-matching F | discard ID", runDLQ},
		{"queues", "queues list | pause Q | resume Q: a paused queue claims nothing, fleet-wide", runQueues},
		{"routes", "routes list | pause R | resume R: a paused route fetches nothing, fleet-wide", runRoutes},
		{"audit", "audit list: who cancelled, re-drove, discarded, paused or resumed what, and when", runAudit},
		{"replay", "re-read a topic range into jobs: replay (--topic T | --route R) (--from-time T | --from-offset N)", runReplay},
		{"bench", "run the benchmark suite (SPEC §9)", runBench},
	}
	m := map[string]verb{}
	for _, v := range vs {
		m[v.name] = v
	}
	return m
}

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	vs := verbs()
	if len(args) == 0 {
		printUsage(stderr, vs)
		return exitUsage
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage(stdout, vs)
		return exitOK
	}
	v, ok := vs[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "switchyard: unknown verb %q\n\n", args[0])
		printUsage(stderr, vs)
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

func printUsage(w io.Writer, vs map[string]verb) {
	fmt.Fprintln(w, "usage: switchyard <verb> [flags]")
	fmt.Fprintln(w)
	names := make([]string, 0, len(vs))
	for n := range vs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, vs[n].summary)
	}
	fmt.Fprintln(w, "\nEvery verb takes --config FILE and reads SWITCHYARD_DATABASE_URL,")
	fmt.Fprintln(w, "SWITCHYARD_KAFKA_BROKERS and SWITCHYARD_ADMIN_TOKEN. `switchyard <verb> --help` for flags.")
}

// newFlags makes a verb's flag set with the shared --config flag. Parse
// errors are returned as usage errors; --help prints and exits 0.
// newFlags makes a verb's flag set; its --help prints the synopsis, then
// about (what the verb does, with examples; may be empty), then the flags.
func newFlags(name, synopsis, about string, stderr io.Writer) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", envOr("SWITCHYARD_CONFIG", "switchyard.yaml"), "config file (env SWITCHYARD_CONFIG)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: switchyard %s\n\n", synopsis)
		if about != "" {
			fmt.Fprintf(fs.Output(), "%s\n\n", strings.TrimSpace(about))
		}
		fmt.Fprintln(fs.Output(), "flags:")
		fs.PrintDefaults()
	}
	return fs, cfgPath
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	return nil
}

// loadConfig reads the config file. Verbs that only need the database
// (migrate, jobs, dlq) also work without a file when none was named and
// SWITCHYARD_DATABASE_URL is set.
func loadConfig(fs *flag.FlagSet, path string, dbOnly bool) (*config.Config, error) {
	if dbOnly && !configNamed(fs) {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return dbOnlyConfig()
		}
	}
	cfg, err := config.Load(path, os.Getenv)
	if err != nil {
		return nil, usageError{err.Error()}
	}
	return cfg, nil
}

// configNamed reports whether the user named a config file, by flag or
// environment, rather than relying on the default path.
func configNamed(fs *flag.FlagSet) bool {
	named := os.Getenv("SWITCHYARD_CONFIG") != ""
	fs.Visit(func(f *flag.Flag) { named = named || f.Name == "config" })
	return named
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
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(stderr), level)
	return zap.New(core), nil
}
