package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// runSwitchyard runs `switchyard bench --only work,ordered` with the same
// sizes: work is the figure compared, ordered the same burn-down through
// lanes.
func runSwitchyard(ctx context.Context, c config) (map[string]float64, error) {
	cmd := exec.CommandContext(ctx, c.switchyard, "bench", "--only", "work,ordered",
		"--jobs", strconv.Itoa(c.jobs), "--concurrency", strconv.Itoa(c.concurrency),
		"--max-conns", strconv.Itoa(c.maxConns))
	cmd.Env = os.Environ()
	return figures(cmd, "work_jobs_per_s", "ordered_jobs_per_s")
}

// runGraphile runs graphile/bench.mjs on the Node that graphile-worker
// supports.
func runGraphile(ctx context.Context, c config) (map[string]float64, error) {
	cmd := exec.CommandContext(ctx, c.node, "bench.mjs")
	cmd.Dir = c.graphileDir
	cmd.Env = append(os.Environ(), "DATABASE_URL="+c.databaseURL, "SCHEMA="+schemaName("peers_graphile"),
		"JOBS="+strconv.Itoa(c.jobs), "CONCURRENCY="+strconv.Itoa(c.concurrency),
		"MAX_CONNS="+strconv.Itoa(c.maxConns), "MODE=batched", "NOTE="+note(c.payload))
	return figures(cmd, "graphile_jobs_per_s", "graphile_insert_jobs_per_s")
}

// figures runs cmd and picks the named `name value unit` lines out of
// its stdout; a missing one is an error, with the command's output.
func figures(cmd *exec.Cmd, names ...string) (map[string]float64, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %w\n%s%s", cmd.Path, err, stdout.String(), stderr.String())
	}
	got := map[string]float64{}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			got[f[0]] = v
		}
	}
	out := map[string]float64{}
	for _, n := range names {
		v, ok := got[n]
		if !ok {
			return nil, fmt.Errorf("%s printed no %s:\n%s%s", cmd.Path, n, stdout.String(), stderr.String())
		}
		out[n] = v
	}
	return out, nil
}
