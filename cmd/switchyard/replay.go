package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/ingest"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

// runReplay re-reads a range of a topic through its routes (or the one
// route named) into jobs. The
// consumer group and its stored positions are not touched: replay reads
// the partitions directly, up to their end offsets as they were when it
// started, so it always ends. Dedupe keys make it idempotent (I2); with
// --rerun, finished jobs of the replayed records run again.
const replayAbout = `
Re-reads a range of a topic into jobs, through every route of the topic
(--topic) or one of them (--route), without touching the consumer group.
A record whose job still exists makes no new one; --rerun runs finished
jobs again. On a terminal it shows its progress (records/s, share of the
range, time left). It ends with what it did: records read, new jobs,
jobs already there, re-run, records newly parked and already parked in
the DLQ, and records filtered out (taken by none of the routes).

Ctrl-C (or SIGTERM) stops it: it says what it did and, per partition it
did not finish, the command that resumes where its stored jobs end (a
second Ctrl-C exits at once).

examples:
  switchyard replay --topic orders --from-time 2026-11-30T08:00:00Z --to-time 2026-11-30T09:00:00Z
  switchyard replay --route order-refund --from-offset 0 --rerun`

func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cfgPath := newFlags("replay",
		"replay [--config FILE] (--topic T | --route R) (--from-time RFC3339 | --from-offset N) [--to-time RFC3339 | --to-offset N] [--partition P] [--rerun] [--json]",
		replayAbout, stdout)
	topic := fs.String("topic", "", "`TOPIC` to re-read, through every route of it")
	routeName := fs.String("route", "", "re-read the topic of this `ROUTE`, for this route only (the other routes of the topic are left alone)")
	fromTime := fs.String("from-time", "", "start at the first record at or after this `TIME` (RFC3339)")
	fromOffset := fs.Int64("from-offset", -1, "start at this `OFFSET` of every partition replayed")
	toTime := fs.String("to-time", "", "stop before the first record after this `TIME` (RFC3339); default: the end when replay starts")
	toOffset := fs.Int64("to-offset", -1, "stop before this `OFFSET` of every partition replayed (what a resumed replay ends at)")
	partition := fs.Int("partition", -1, "replay only partition `P`")
	rerun := fs.Bool("rerun", false, "run the replayed records' finished jobs again (default: existing jobs stay as they are)")
	asJSON := jsonFlag(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if *topic == "" && *routeName == "" {
		return usagef("--topic or --route: one is required")
	}
	if (*fromTime == "") == (*fromOffset < 0) {
		return usagef("exactly one of --from-time and --from-offset (≥ 0) is required")
	}
	var from, to time.Time
	var err error
	if *fromTime != "" {
		if from, err = time.Parse(time.RFC3339, *fromTime); err != nil {
			return usagef("--from-time: %q is not an RFC3339 time (e.g. 2026-11-30T08:00:00Z)", *fromTime)
		}
	}
	if *toTime != "" {
		if to, err = time.Parse(time.RFC3339, *toTime); err != nil {
			return usagef("--to-time: %q is not an RFC3339 time (e.g. 2026-11-30T09:00:00Z)", *toTime)
		}
		if !from.IsZero() && !to.After(from) {
			return usagef("--to-time: %s is not after --from-time %s", *toTime, *fromTime)
		}
	}
	if *toOffset < 0 && given(fs, "to-offset") {
		return usagef("--to-offset: %d is not an offset", *toOffset)
	}
	if *toOffset >= 0 && *toTime != "" {
		return usagef("--to-offset and --to-time: give one of them")
	}
	if *toOffset >= 0 && *fromOffset >= 0 && *toOffset <= *fromOffset {
		return usagef("--to-offset: %d is not after --from-offset %d", *toOffset, *fromOffset)
	}
	if *partition < 0 && given(fs, "partition") {
		return usagef("--partition: %d is not a partition number", *partition)
	}
	cfg, err := loadConfig(fs, *cfgPath, false, stderr)
	if err != nil {
		return err
	}
	rcs := cfg.RoutesOfTopic(*topic)
	if *routeName != "" {
		rc, ok := cfg.RouteNamed(*routeName)
		switch {
		case !ok:
			return usagef("--route: no route is named %q%s (routes: %s)", *routeName, didYouMean(*routeName, routeNames(cfg)),
				strings.Join(routeNames(cfg), ", "))
		case *topic != "" && rc.Topic != *topic:
			return usagef("--route: route %s reads topic %s, not %s (leave --topic out)", rc.Name, rc.Topic, *topic)
		}
		*topic, rcs = rc.Topic, []config.Route{rc}
	}
	if len(rcs) == 0 {
		var topics []string
		for _, r := range cfg.Routes {
			if !slices.Contains(topics, r.Topic) {
				topics = append(topics, r.Topic)
			}
		}
		slices.Sort(topics)
		return usagef("--topic: no route consumes %q%s (topics read: %s)", *topic, didYouMean(*topic, topics), strings.Join(topics, ", "))
	}
	var routes []*ingest.Route
	for _, rc := range rcs {
		route, err := ingest.CompileRoute(rc)
		if err != nil {
			return err
		}
		routes = append(routes, route)
	}
	opts, err := ingest.ClientOpts(cfg.Kafka, nil)
	if err != nil {
		return usageError{err.Error()}
	}
	admin, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	defer admin.Close()
	ranges, err := ingest.ReplayRanges(ctx, kadm.NewClient(admin), *topic, int32(*partition), *fromOffset, *toOffset, from, to)
	var in *ingest.ReplayInputError
	if errors.As(err, &in) {
		return usageError{in.Error()}
	}
	if err != nil {
		return err
	}
	store, err := connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer store.Close()
	var progress func(ingest.ReplayProgress)
	bar := newProgressLine(stderr)
	if bar != nil {
		progress = func(r ingest.ReplayProgress) {
			bar.draw(func(elapsed time.Duration) string { return replayLine(*topic, r, elapsed) })
		}
	}
	// The first SIGINT or SIGTERM ends the replay (a batch it was storing
	// rolls back), so that it can say what it did and where to resume:
	// its jobs commit batch by batch, and ingest.ReplayRange.Resume is
	// the first offset not committed. stop() gives the next signal its
	// default effect, exiting at once.
	sigCtx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	sum, err := ingest.Replay(sigCtx, store, opts, routes, ranges, *rerun, progress)
	interrupted := sigCtx.Err() != nil && ctx.Err() == nil
	stop()
	if interrupted {
		err = errors.New("interrupted")
	}
	if bar != nil {
		bar.clear()
	}
	var stopped []map[string]int64
	resume := []map[string]int64{}
	for _, r := range ranges {
		if r.Stopped >= 0 && r.Stopped < r.End {
			stopped = append(stopped, map[string]int64{"partition": int64(r.Partition), "offset": r.Stopped, "end": r.End})
		}
		if err != nil && r.Resume() < r.End {
			resume = append(resume, map[string]int64{"partition": int64(r.Partition), "from_offset": r.Resume(), "to_offset": r.End})
		}
	}
	summary := map[string]any{"topic": *topic, "records": sum.Records, "new_jobs": sum.Inserted,
		"already_there": sum.Jobs - sum.Inserted, "rerun": sum.Rerun, "newly_parked": sum.NewlyParked,
		"already_parked": sum.Parked - sum.NewlyParked, "filtered": sum.Filtered, "complete": err == nil,
		"stopped_short": nonNilSlice(stopped), "resume": resume}
	// The audit log has the replay as it went, failed or not (its jobs
	// committed batch by batch); a Ctrl-C that ended it does not stop
	// the entry.
	if aerr := auditReplay(ctx, store, *routeName, summary, replayAsked(fs), err); aerr != nil {
		fmt.Fprintf(stderr, "switchyard replay: the audit log did not take the replay: %v\n", aerr)
	}
	if *asJSON {
		if jerr := printJSON(stdout, summary); jerr != nil {
			return jerr
		}
		return err
	}
	// Said even when the replay failed: what it did before is done.
	records := "records"
	if sum.Records == 1 {
		records = "record"
	}
	fmt.Fprintf(stdout, "replayed %d %s of %s: %d new jobs, %d already there, %d re-run, %d newly parked, %d already parked, %d filtered out\n",
		sum.Records, records, *topic, sum.Inserted, sum.Jobs-sum.Inserted, sum.Rerun, sum.NewlyParked, sum.Parked-sum.NewlyParked, sum.Filtered)
	for _, r := range stopped {
		fmt.Fprintf(stdout, "partition %d: stopped at offset %d of %d (nothing more to read: transaction markers)\n",
			r["partition"], r["offset"], r["end"])
	}
	if len(resume) > 0 {
		partitions := "partitions"
		if len(resume) == 1 {
			partitions = "partition"
		}
		fmt.Fprintf(stdout, "stopped before the end of %d %s; to resume where it stopped (the records before are done):\n",
			len(resume), partitions)
		for _, r := range resume {
			fmt.Fprintf(stdout, "  %s\n", resumeCommand(fs, r["partition"], r["from_offset"], r["to_offset"]))
		}
	}
	return err
}

// resumeCommand is the replay command that reads on where one partition
// stopped: the flags that chose the records and what to do with them,
// for that partition, from the first offset not done to the end the
// replay had (an end offset, not a time: the partition's end then, not
// now, which a replay without --to-time would otherwise move).
func resumeCommand(fs *flag.FlagSet, partition, from, to int64) string {
	args := []string{"switchyard", "replay"}
	rerun := false
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "config", "topic", "route":
			args = append(args, "--"+f.Name, shellQuote(f.Value.String()))
		case "rerun":
			rerun = f.Value.String() == "true"
		}
	})
	args = append(args, "--partition", fmt.Sprint(partition), "--from-offset", fmt.Sprint(from), "--to-offset", fmt.Sprint(to))
	if rerun {
		args = append(args, "--rerun")
	}
	return strings.Join(args, " ")
}

// auditReplay records a replay in the audit log: its target is the
// route replayed, or the topic; its detail what it did (the --json
// summary), the flags that said what to replay, and its error if it
// ended on one.
func auditReplay(ctx context.Context, store *pgstore.Store, route string, summary, asked map[string]any, replayErr error) error {
	target := fmt.Sprintf("topic/%s", summary["topic"])
	if route != "" {
		target = "route/" + route
	}
	detail := maps.Clone(summary)
	detail["flags"] = asked
	if replayErr != nil {
		detail["error"] = replayErr.Error()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return store.Audit(ctx, cliActor(), pgstore.AuditReplay, target, detail)
}

// replayAsked is what a replay's flags asked for, as its audit entry
// says it: the flags given, by name.
func replayAsked(fs *flag.FlagSet) map[string]any {
	asked := map[string]any{}
	fs.Visit(func(f *flag.Flag) {
		if slices.Contains([]string{"from-time", "from-offset", "to-time", "to-offset", "partition", "rerun"}, f.Name) {
			asked[strings.ReplaceAll(f.Name, "-", "_")] = f.Value.String()
		}
	})
	return asked
}

// replayLine is a replay's progress: the share of the range gone past,
// records/s and the time left at that pace.
func replayLine(topic string, r ingest.ReplayProgress, elapsed time.Duration) string {
	share := 100.0
	if r.Total > 0 {
		share = 100 * float64(r.Done) / float64(r.Total)
	}
	line := fmt.Sprintf("replaying %s: %.0f%% of the range (%s of %s offsets), %s records read", topic, share,
		thousands(r.Done), thousands(r.Total), thousands(r.Records))
	return line + pace(r.Records, "records", r.Done, r.Total, elapsed)
}
