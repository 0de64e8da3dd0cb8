package main

import (
	"io"
	"testing"

	"github.com/switchyard-dev/switchyard/internal/bench"
)

// bench --max-conns sizes the engine's pool; a config file's
// postgres.max_conns is only the default, as the flag's help says: the
// config's value won over the flag given, whenever a config file was
// found, so that a run asked for 40 connections measured 20.
func TestBenchMaxConnsFlagWinsOverTheConfig(t *testing.T) {
	t.Parallel()
	file := writeFile(t, "kafka: {brokers: [\"127.0.0.1:19092\"]}\npostgres: {url: \"postgres://x@127.0.0.1/db\", max_conns: 7}\n"+validQueuesAndRoute)
	for _, tc := range []struct {
		args []string
		want int32
	}{
		{[]string{"--config", file, "--max-conns", "40"}, 40},
		{[]string{"--config", file}, 7},
	} {
		fs, cfgPath := newFlags("bench", "bench", "", io.Discard)
		maxConns := fs.Int("max-conns", 20, "")
		if err := parseFlags(fs, tc.args); err != nil {
			t.Fatal(err)
		}
		c := bench.Config{MaxConns: int32(*maxConns)}
		if err := benchTargets(fs, *cfgPath, &c, io.Discard); err != nil {
			t.Fatal(err)
		}
		if c.MaxConns != tc.want {
			t.Errorf("bench %q: pool of %d connections, want %d", tc.args, c.MaxConns, tc.want)
		}
	}
}
