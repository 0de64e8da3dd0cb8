package testenv

// Private services: a PostgreSQL cluster or a Kafka broker of one test,
// for a scenario that stops, restarts or kills a service. The shared ones
// serve every test package at once and are never touched; these are
// started with the same deploy/local scripts, on ports and data dirs of
// their own.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// Postgres is a PostgreSQL cluster of one test on its own port and data
// dir, run by deploy/local/postgres.sh.
type Postgres struct {
	t      testing.TB
	script string
	env    []string
	URL    string
}

// StartPostgres starts a cluster that is stopped and deleted when the test
// ends, whatever its outcome.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	dir := serviceDir(t, "switchyard-fault-pg-")
	pg := &Postgres{t: t, script: script(t, "postgres.sh"),
		env: []string{"SWITCHYARD_LOCAL_DIR=" + dir, fmt.Sprintf("PG_PORT=%d", FreePorts(t, 1)[0])}}
	t.Cleanup(func() {
		if _, err := runScript(pg.env, pg.script, "stop", "--clean"); err != nil {
			t.Errorf("stopping the private postgres: %v", err)
		}
		_ = os.RemoveAll(dir)
	})
	out := pg.start()
	if pg.URL = envValue(out, "SWITCHYARD_DATABASE_URL"); pg.URL == "" {
		t.Fatalf("postgres.sh start printed no SWITCHYARD_DATABASE_URL:\n%s", out)
	}
	return pg
}

// Start starts the cluster again after Stop.
func (pg *Postgres) Start() {
	pg.t.Helper()
	pg.start()
}

func (pg *Postgres) start() string {
	pg.t.Helper()
	out, err := runScript(pg.env, pg.script, "start")
	if err != nil {
		pg.t.Fatalf("start the private postgres: %v", err)
	}
	return out
}

// Stop is `pg_ctl stop -m fast`: every session is terminated.
func (pg *Postgres) Stop() {
	pg.t.Helper()
	if _, err := runScript(pg.env, pg.script, "stop"); err != nil {
		pg.t.Fatalf("stop the private postgres: %v", err)
	}
}

// Crash is `pg_ctl stop -m immediate`: every process quits at once,
// flushing nothing, as in a crash; the next Start recovers from the WAL.
func (pg *Postgres) Crash() {
	pg.t.Helper()
	if _, err := runScript(pg.env, pg.script, "stop", "--crash"); err != nil {
		pg.t.Fatalf("crash the private postgres: %v", err)
	}
}

// Kafka is a single-node KRaft broker of one test on its own ports and
// data dir, run by deploy/local/kafka.sh.
type Kafka struct {
	t       testing.TB
	script  string
	env     []string
	Brokers []string
}

// StartKafka starts a broker that is stopped and deleted when the test
// ends, whatever its outcome.
func StartKafka(t testing.TB) *Kafka {
	t.Helper()
	dir := serviceDir(t, "switchyard-fault-kafka-")
	ports := FreePorts(t, 2)
	k := &Kafka{t: t, script: script(t, "kafka.sh"), env: []string{"SWITCHYARD_LOCAL_DIR=" + dir,
		fmt.Sprintf("KAFKA_PORT=%d", ports[0]), fmt.Sprintf("KAFKA_CONTROLLER_PORT=%d", ports[1]),
		// Restarted after kill -9: re-registering waits out the old session.
		"KAFKA_BROKER_SESSION_TIMEOUT_MS=6000"}}
	t.Cleanup(func() {
		if _, err := runScript(k.env, k.script, "stop", "--clean"); err != nil {
			t.Errorf("stopping the private kafka: %v", err)
		}
		_ = os.RemoveAll(dir)
	})
	out := k.start()
	brokers := envValue(out, "SWITCHYARD_KAFKA_BROKERS")
	if brokers == "" {
		t.Fatalf("kafka.sh start printed no SWITCHYARD_KAFKA_BROKERS:\n%s", out)
	}
	k.Brokers = strings.Split(brokers, ",")
	return k
}

// Start starts the broker again after Stop.
func (k *Kafka) Start() {
	k.t.Helper()
	k.start()
}

func (k *Kafka) start() string {
	k.t.Helper()
	out, err := runScript(k.env, k.script, "start")
	if err != nil {
		k.t.Fatalf("start the private kafka: %v", err)
	}
	return out
}

// Stop sends the broker SIGTERM (a controlled shutdown) and waits for it
// to exit.
func (k *Kafka) Stop() {
	k.t.Helper()
	if _, err := runScript(k.env, k.script, "stop"); err != nil {
		k.t.Fatalf("stop the private kafka: %v", err)
	}
}

// FreePorts returns n distinct loopback ports free now, from below the
// kernel's ephemeral range where it can tell: a port of that range may be
// taken, between this check and the service's bind, as the local port of
// any outgoing connection, and the tests make thousands (CI saw a private
// Postgres fail to bind one). Another process may still take one first;
// whatever binds it then fails and says so.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	low := ephemeralLow()
	for tries := 0; len(ports) < n; tries++ {
		if tries == 1000 {
			t.Fatalf("no free port among 1,000 tried below %d", low)
		}
		addr := "127.0.0.1:0"
		if low > minPort {
			addr = fmt.Sprintf("127.0.0.1:%d", minPort+rand.IntN(low-minPort))
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue // taken
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	return ports
}

// minPort is the lowest port FreePorts hands out: above the registered
// ports most services default to.
const minPort = 20000

// ephemeralLow is the first port of the kernel's ephemeral range (Linux),
// or 0 where it cannot be read: FreePorts then lets the kernel choose.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	var low, high int
	if _, err := fmt.Sscan(string(b), &low, &high); err != nil {
		return 0
	}
	return low
}

// script is the path of a deploy/local script, found from this file's
// place in the repository rather than from the working directory, which
// is that of whichever package's test runs. (A -trimpath build has no
// such place to start from, and says so.)
func script(t testing.TB, name string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	p := filepath.Join(filepath.Dir(file), "..", "..", "deploy", "local", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("testenv: no deploy/local/%s beside the source of testenv (%s): %v", name, file, err)
	}
	return p
}

// runScript runs `bash script args…` with extra environment and returns
// its stdout; a failure reports the script's output.
func runScript(env []string, script string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %v\n%s%s", filepath.Base(script), strings.Join(args, " "), err,
			stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// envValue picks NAME=value out of a script's `env` output.
func envValue(out, name string) string {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+"="); ok {
			return v
		}
	}
	return ""
}

// serviceDir makes a data root for a private service. Not t.TempDir:
// Postgres runs as the postgres user, which must traverse the parents,
// and t.TempDir's are 0700.
func serviceDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
