package main

import (
	"context"
	"errors"
	"fmt"
	"io"
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
jobs again. It prints what it did: records read, new jobs, jobs already
there, re-run, parked and filtered (taken by none of the routes).

examples:
  switchyard replay --topic orders --from-time 2026-11-30T08:00:00Z --to-time 2026-11-30T09:00:00Z
  switchyard replay --route order-refund --from-offset 0 --rerun`

func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cfgPath := newFlags("replay",
		"replay [--config FILE] (--topic T | --route R) (--from-time RFC3339 | --from-offset N) [--to-time RFC3339] [--partition P] [--rerun]",
		replayAbout, stderr)
	topic := fs.String("topic", "", "topic to re-read, through every route of it")
	routeName := fs.String("route", "", "re-read the topic of this route, for this route only (the other routes of the topic are left alone)")
	fromTime := fs.String("from-time", "", "start at the first record at or after this time (RFC3339)")
	fromOffset := fs.Int64("from-offset", -1, "start at this offset of every partition replayed")
	toTime := fs.String("to-time", "", "stop before the first record after this time (RFC3339); default: the end when replay starts")
	partition := fs.Int("partition", -1, "replay only this partition")
	rerun := fs.Bool("rerun", false, "run the replayed records' finished jobs again (default: existing jobs stay as they are)")
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
	if *partition < -1 {
		return usagef("--partition: %d is not a partition number", *partition)
	}
	cfg, err := loadConfig(fs, *cfgPath, false)
	if err != nil {
		return err
	}
	rcs := cfg.RoutesOfTopic(*topic)
	if *routeName != "" {
		rc, ok := cfg.RouteNamed(*routeName)
		switch {
		case !ok:
			return usagef("--route: no route is named %q (switchyard routes list shows them)", *routeName)
		case *topic != "" && rc.Topic != *topic:
			return usagef("--route: route %s reads topic %s, not %s (leave --topic out)", rc.Name, rc.Topic, *topic)
		}
		*topic, rcs = rc.Topic, []config.Route{rc}
	}
	if len(rcs) == 0 {
		return usagef("--topic: no route consumes %q", *topic)
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
	ranges, err := ingest.ReplayRanges(ctx, kadm.NewClient(admin), *topic, int32(*partition), *fromOffset, from, to)
	var in *ingest.ReplayInputError
	if errors.As(err, &in) {
		return usageError{in.Error()}
	}
	if err != nil {
		return err
	}
	store, err := pgstore.Open(ctx, pgstore.Config{URL: cfg.Postgres.URL, Schema: cfg.Postgres.Schema, MaxConns: 2})
	if err != nil {
		return err
	}
	defer store.Close()
	sum, err := ingest.Replay(ctx, store, opts, routes, ranges, *rerun)
	fmt.Fprintf(stdout, "replayed %d records of %s: %d new jobs, %d already there, %d re-run, %d parked, %d filtered\n",
		sum.Records, *topic, sum.Inserted, sum.Jobs-sum.Inserted, sum.Rerun, sum.Parked, sum.Filtered)
	for _, r := range ranges {
		if r.Stopped >= 0 && r.Stopped < r.End {
			fmt.Fprintf(stdout, "partition %d: stopped at offset %d of %d (nothing more to read: transaction markers)\n",
				r.Partition, r.Stopped, r.End)
		}
	}
	return err
}
