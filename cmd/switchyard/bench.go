package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/bench"
)

const benchAbout = `
Runs the benchmark suite against the Kafka and Postgres of the config
file (when there is one) or of SWITCHYARD_KAFKA_BROKERS and
SWITCHYARD_DATABASE_URL, in a schema and topics of its own, removed at
the end (Ctrl-C too). It prints one line per figure, "name value unit",
so that runs can be compared, with the targets each is held to as
comments; the default sizes take about 8 minutes on 2 cores, and the
flags scale them. --scale runs the cost curves instead.

examples:
  switchyard bench
  switchyard bench --only work,ordered --repeat 3
  switchyard bench --jobs 20000 --history 1000000`

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cfgPath := newFlags("bench", "bench [--config FILE] [--scale] [--only NAME,...] [sizes]", benchAbout, stdout)
	var c bench.Config
	fs.IntVar(&c.Records, "records", 200_000, "records for ingest_records_per_s and copy_rows_per_s")
	fs.IntVar(&c.Jobs, "jobs", 200_000, "jobs burnt down by raw_claim, work and ordered")
	fs.IntVar(&c.HTTPJobs, "http-jobs", 200_000, "jobs burnt down through the HTTP target (and requests of the bare loop)")
	fs.IntVar(&c.Keys, "keys", 10_000, "distinct record keys (lanes of the ordered route)")
	fs.IntVar(&c.History, "history", 10_000_000, "finished jobs retained for the second claim latency figure")
	fs.IntVar(&c.Future, "future", 1_000_000, "jobs scheduled a day ahead for the third claim latency figure")
	fs.IntVar(&c.Concurrency, "concurrency", 64, "worker pool size of work, http, ordered and e2e")
	fs.IntVar(&c.RawLoops, "raw-loops", 2, "concurrent claim+complete loops of raw_claim")
	fs.IntVar(&c.Rate, "rate", 1000, "e2e offered load, records/s (with --scale: the processes curve's, jobs/s)")
	fs.DurationVar(&c.Duration, "duration", 20*time.Second, "how long e2e offers its load")
	fs.IntVar(&c.Samples, "samples", 2000, "claims timed per claim latency figure")
	fs.BoolVar(&c.Scale, "scale", false, "run the scale curves (queues, lanes, future, leases, payload, processes) instead of the figures")
	fs.IntVar(&c.PointJobs, "point-jobs", 50_000, "jobs burnt down by each point of a scale curve")
	fs.DurationVar(&c.SlowJob, "slow-job", time.Second, "how long a job of the leases curve takes")
	fs.IntVar(&c.Rounds, "rounds", 2, "how many times each scale curve runs (each figure is its best round)")
	fs.IntVar(&c.Repeat, "repeat", 1, "run the selected figures N times over, in turn, and report each one's median (ratios of medians)")
	maxConns := fs.Int("max-conns", 20, "the engine's Postgres pool size (without it, a config file's postgres.max_conns)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to `FILE` (go tool pprof)")
	memProfile := fs.String("memprofile", "", "write a profile of the whole run's allocations to `FILE` at its end (go tool pprof -sample_index=alloc_space)")
	only := fs.String("only", "", "comma-separated `NAMES` of the figures or groups to run (default all): "+strings.Join(bench.Names(), ", ")+
		"; with --scale, curves: "+strings.Join(bench.ScaleNames(), ", "))
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if *maxConns < 1 || *maxConns > 10_000 {
		return usagef("--max-conns: %d is not between 1 and 10000", *maxConns)
	}
	c.MaxConns = int32(*maxConns)
	if *only != "" {
		for _, name := range strings.Split(*only, ",") {
			if name = strings.TrimSpace(name); name != "" {
				c.Only = append(c.Only, name)
			}
		}
	}
	c.GC = paceGC(ctx)
	if c.Scale {
		// The processes curve starts this binary with `run`.
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("--scale: the processes curve needs this executable: %w", err)
		}
		c.Executable = exe
	}
	if err := benchTargets(fs, *cfgPath, &c, stderr); err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return usageError{err.Error()}
	}
	log, err := newLogger(stderr)
	if err != nil {
		return err
	}
	if os.Getenv("SWITCHYARD_LOG_LEVEL") == "" {
		// The figures are the output; the engine's info logs are noise.
		log = log.WithOptions(zap.IncreaseLevel(zap.WarnLevel))
	}
	defer log.Sync() //nolint:errcheck // best effort at exit
	c.Log, c.Out = log, stdout

	// Ctrl-C cancels the run, which then removes its schema and topics; a
	// second Ctrl-C exits at once.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); stop() }()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return usagef("--cpuprofile: %v", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if *memProfile != "" {
		f, err := os.Create(*memProfile)
		if err != nil {
			return usagef("--memprofile: %v", err)
		}
		defer f.Close()
		// Written as runBench returns, after the run and its teardown:
		// the profile counts every allocation they made.
		defer func() {
			if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
				fmt.Fprintf(stderr, "--memprofile: %v\n", err)
			}
		}()
	}
	err = bench.Run(ctx, c)
	if errors.Is(err, context.Canceled) {
		return errors.New("interrupted; the bench schema and topics were removed")
	}
	return err
}

// benchTargets fills the database and brokers from the config file when
// one is named or present, else from SWITCHYARD_DATABASE_URL and
// SWITCHYARD_KAFKA_BROKERS. The bench never uses the file's schema, only
// its servers.
func benchTargets(fs *flag.FlagSet, path string, c *bench.Config, stderr io.Writer) error {
	if _, err := os.Stat(path); configNamed(fs) || err == nil {
		cfg, err := loadConfig(fs, path, false, stderr)
		if err != nil {
			return err
		}
		c.DatabaseURL, c.Brokers = cfg.Postgres.URL, cfg.Kafka.Brokers
		// The config's pool size is the default; --max-conns, given, is
		// what the run was asked to measure.
		if !given(fs, "max-conns") {
			c.MaxConns = cfg.Postgres.MaxConns
		}
		return nil
	}
	c.DatabaseURL = os.Getenv(config.EnvDatabaseURL)
	for _, b := range strings.Split(os.Getenv(config.EnvKafkaBrokers), ",") {
		if b = strings.TrimSpace(b); b != "" {
			c.Brokers = append(c.Brokers, b)
		}
	}
	return nil
}
