package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"

	switchyard "github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/gcbudget"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

const migrateAbout = `
Creates the schema, or upgrades it to this build's migrations; safe to
run concurrently and repeatedly (an advisory lock serialises processes).
It also publishes the config's routes for the SQL function enqueue().
With --grant-runtime ROLE, it then grants ROLE what switchyard run needs
and no more: rows, not DDL.

examples:
  switchyard migrate --config switchyard.yaml
  switchyard migrate --grant-runtime switchyard_runtime`

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cfgPath := newFlags("migrate", "migrate [--config FILE] [--grant-runtime ROLE] [--json]", migrateAbout, stdout)
	grantTo := fs.String("grant-runtime", "", "after migrating, grant `ROLE` the DML-only privileges switchyard run needs")
	asJSON := jsonFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	// Checked before anything migrates, and given empty too.
	if given(fs, "grant-runtime") && !pgstore.ValidSchema(*grantTo) {
		return usagef("--grant-runtime: %q is not a role name: want a lower-case identifier ([a-z_][a-z0-9_]*)", *grantTo)
	}
	cfg, err := loadConfig(fs, *cfgPath, true, stderr)
	if err != nil {
		return err
	}
	store, err := open(ctx, cfg)
	if err != nil {
		return err
	}
	defer store.Close()
	applied, err := switchyard.Migrate(ctx, cfg) // and publishes the routes for enqueue()
	if err != nil {
		return err
	}
	if *grantTo != "" {
		if err := store.GrantRuntime(ctx, *grantTo); err != nil {
			return err
		}
	}
	if *asJSON {
		out := map[string]any{"schema": cfg.Postgres.Schema, "version": pgstore.LatestVersion(), "applied": nonNilSlice(applied)}
		if *grantTo != "" {
			out["granted_runtime"] = *grantTo
		}
		return printJSON(stdout, out)
	}
	if len(applied) == 0 {
		fmt.Fprintf(stdout, "schema %s is up to date (migration %d)\n", cfg.Postgres.Schema, pgstore.LatestVersion())
	}
	for _, name := range applied {
		fmt.Fprintf(stdout, "applied %s to schema %s\n", name, cfg.Postgres.Schema)
	}
	if *grantTo != "" {
		fmt.Fprintf(stdout, "granted runtime privileges on schema %s to %s\n", cfg.Postgres.Schema, *grantTo)
	}
	return nil
}

const runAbout = `
Runs the dispatcher: ingest (Kafka records into jobs), the workers of
every queue, schedules, and the admin API, metrics and dashboard on
http.listen. Logs are JSON lines on stderr (SWITCHYARD_LOG_LEVEL). The
first SIGTERM or SIGINT shuts down in order within shutdown_grace; a
second exits at once.

examples:
  switchyard run --config switchyard.yaml
  switchyard run --role work      # workers only; ingest runs elsewhere`

func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cfgPath := newFlags("run", "run [--config FILE] [--role all|ingest|work] [--reset-offsets]", runAbout, stdout)
	role := fs.String("role", switchyard.RoleAll, "which parts run here: `all|ingest|work`")
	reset := fs.Bool("reset-offsets", false, "resume from Kafka's committed offsets for partitions with none stored in Postgres (after a database loss)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	// Checked here: the engine's error names its Options.Role.
	if err := checkOneOf("role", "a role", *role, switchyard.Roles); err != nil {
		return err
	}
	log, err := newLogger(stderr)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // best effort at exit
	// The note of an overriding variable is a log line here, like the
	// rest of what run says: stderr is JSON lines.
	cfg, err := loadConfig(fs, *cfgPath, false, nil)
	if err != nil {
		return err
	}
	for _, o := range envOverrides(*cfgPath, os.Getenv) {
		log.Info("an environment variable overrides the config file",
			zap.String("variable", o.variable), zap.String("field", o.field), zap.String("file", *cfgPath))
	}
	if err := cfg.ServingErrors(); err != nil {
		return usageError{config.InFile(*cfgPath, err).Error()}
	}
	eng, err := switchyard.New(cfg, switchyard.Options{Logger: log, Role: *role, ResetOffsets: *reset})
	if err != nil {
		return usageError{err.Error()}
	}
	// This binary registers no Go handler: a schedule of a kind that no
	// route takes is the file's problem, said before anything starts.
	if err := eng.CheckHandlers(); err != nil {
		return usageError{config.InFile(*cfgPath, err).Error()}
	}
	log.Info("garbage collector", zap.String("pace", paceGC(ctx)))
	sigs, stop := stopSignals()
	defer stop()
	return serve(ctx, eng, log, cfg.ShutdownGrace.D(), sigs)
}

// paceGC paces the garbage collector of a long-running command
// (internal/gcbudget) and says how it runs.
func paceGC(ctx context.Context) string {
	if gcbudget.Start(ctx) {
		return fmt.Sprintf("GOGC %d..%d after each collection, so that the next starts at %d MiB or twice the live heap; "+
			"set GOGC or GOMEMLIMIT to choose", gcbudget.MinPercent, gcbudget.MaxPercent, gcbudget.Floor>>20)
	}
	return fmt.Sprintf("as the environment chose: GOGC=%q GOMEMLIMIT=%q", os.Getenv("GOGC"), os.Getenv("GOMEMLIMIT"))
}

// stopSignals is where SIGTERM and SIGINT arrive from now on, for serve.
// A caller that prints something a person (or a test) answers with
// Ctrl-C, as dev's banner, listens before printing it: a signal sent
// before serve began listening would otherwise be lost, and serve
// would wait for another.
func stopSignals() (<-chan os.Signal, func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	return sigs, func() { signal.Stop(sigs) }
}

// serve starts the engine and stops it on a signal from sigs (I7): the
// first shuts down in order within the grace period and exits 0; a
// second one returns at once, leaving the engine's stop unfinished (the
// caller's own clean-up still runs: dev stops its Postgres).
func serve(ctx context.Context, eng *switchyard.Engine, log *zap.Logger, grace time.Duration, sigs <-chan os.Signal) error {
	if err := eng.Start(ctx); err != nil {
		_ = eng.Stop(context.Background())
		return err
	}
	log.Info("switchyard running", zap.String("admin", eng.Addr()))
	var fatal error
	select {
	case s := <-sigs:
		log.Info("signal received; shutting down (send again to exit at once)", zap.String("signal", s.String()))
	case fatal = <-eng.Done():
	case <-ctx.Done():
	}
	stopped := make(chan error, 1)
	go func() {
		// The grace period bounds in-flight jobs; the extra time is for
		// releasing leases and the final commits.
		sctx, cancel := context.WithTimeout(context.Background(), grace+30*time.Second)
		defer cancel()
		stopped <- eng.Stop(sctx)
	}()
	select {
	case err := <-stopped:
		if fatal != nil {
			return fatal
		}
		if err != nil {
			return fmt.Errorf("shutdown: %w", err)
		}
		log.Info("stopped cleanly")
		return nil
	case s := <-sigs:
		log.Warn("second signal; exiting now", zap.String("signal", s.String()))
		return fmt.Errorf("stopped by a second %s before shutting down cleanly", s)
	}
}
