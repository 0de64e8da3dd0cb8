package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/admin"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

// runQueues and runRoutes list the configured queues or routes with
// whether they are paused, and pause or resume one (SPEC §4). A pause is
// a row in Postgres: it holds for every process of the deployment, within
// a second, and across restarts, until it is resumed.
func runQueues(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runPauses(ctx, "queues", pgstore.PauseQueue, func(c *config.Config) []listed {
		var out []listed
		for _, name := range c.QueueNames() {
			out = append(out, listed{name: name})
		}
		return out
	}, args, stdout, stderr)
}

func runRoutes(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runPauses(ctx, "routes", pgstore.PauseRoute, func(c *config.Config) []listed {
		var out []listed
		for _, r := range c.Routes {
			// Its topic, filter and limits as the API shows them.
			l := listed{name: r.Name, extra: map[string]any{"topic": r.Topic}}
			if f := admin.NewRouteFilter(r); f != nil {
				l.extra["filter"] = f
			}
			if limits := admin.NewRouteLimits(r); limits != nil {
				l.extra["limits"] = limits
			}
			out = append(out, l)
		}
		slices.SortFunc(out, func(a, b listed) int { return strings.Compare(a.name, b.name) })
		return out
	}, args, stdout, stderr)
}

// pauseAbout is what queues and routes subcommands' --help says.
var pauseAbout = map[string]string{
	"queues pause": `
Pauses a queue for every process, within a second and across restarts:
nothing of it is claimed; running jobs finish; new jobs wait.`,
	"routes list": `
Lists the config's routes by name, with their topic, filter, limits and
whether an operator paused them (GET /v1/routes also shows lag and which
other route of the topic holds it).`,
	"routes pause": `
Pauses a route for every process, within a second and across restarts:
its topic is not fetched, so records wait in Kafka. The routes of one
topic share its offsets, so the topic's other routes wait too.

example:
  switchyard routes pause order-refund`,
}

// listed is one configured queue or route, with what its list line says
// beside its name and pause.
type listed struct {
	name  string
	extra map[string]any
}

func runPauses(ctx context.Context, verb string, kind pgstore.PauseKind, list func(*config.Config) []listed,
	args []string, stdout, stderr io.Writer) error {
	usage := fmt.Sprintf("%s list | %s pause NAME | %s resume NAME", verb, verb, verb)
	if len(args) == 0 {
		return usagef("missing subcommand: %s", usage)
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "-h", "-help", "--help", "help":
		fmt.Fprintf(stdout, "usage: switchyard %s\n\n`switchyard %s <subcommand> --help` for flags.\n", usage, verb)
		return nil
	case "list", "pause", "resume":
	default:
		return usagef("unknown subcommand %q: want list, pause or resume", sub)
	}
	synopsis := verb + " " + sub + " [--config FILE]"
	if sub != "list" {
		synopsis += " NAME"
	}
	fs, cfgPath := newFlags(verb+" "+sub, synopsis, pauseAbout[verb+" "+sub], stderr)
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
	store, cfg, err := openStore(ctx, fs, *cfgPath)
	if err != nil {
		return err
	}
	defer store.Close()
	all := list(cfg)
	var known []string
	for _, l := range all {
		known = append(known, l.name)
	}
	if sub != "list" {
		name := fs.Arg(0)
		if !slices.Contains(known, name) {
			return usagef("no such %s in the config: %q (known: %v)", kind, name, known)
		}
		change := store.Resume
		if sub == "pause" {
			change = store.Pause
		}
		if _, err := change(ctx, kind, name, cliActor()); err != nil {
			return err
		}
		return printJSON(stdout, map[string]any{"name": name, "paused": sub == "pause"})
	}
	pauses, err := store.Pauses(ctx)
	if err != nil {
		return err
	}
	items := []map[string]any{}
	for _, l := range all {
		_, paused := pauses[kind][l.name]
		item := map[string]any{"name": l.name, "paused": paused}
		maps.Copy(item, l.extra)
		items = append(items, item)
	}
	return printJSON(stdout, map[string]any{"items": items})
}
