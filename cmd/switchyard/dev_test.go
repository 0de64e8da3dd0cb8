package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// devEnv is the environment of a dev process whose temporary folder is
// tmp: the test's own service variables are cleared, so that dev starts
// its embedded broker and throwaway Postgres, unless extra sets them.
func devEnv(tmp string, extra ...string) []string {
	return append([]string{"TMPDIR=" + tmp, "SWITCHYARD_DATABASE_URL=", "SWITCHYARD_KAFKA_BROKERS=",
		"DATABASE_URL=", "SWITCHYARD_ADMIN_TOKEN=", "SWITCHYARD_CONFIG="}, extra...)
}

// devTemp is a TMPDIR for dev that the postgres user (who owns the
// throwaway cluster when the tests run as root) can walk through.
func devTemp(t *testing.T) string {
	t.Helper()
	tmp := t.TempDir()
	for _, dir := range []string{filepath.Dir(tmp), tmp} {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return tmp
}

// freeAddr is a loopback address nothing listens on, for --http.
func freeAddr(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", testenv.FreePorts(t, 1)[0])
}

// leftovers lists what a stopped dev left behind: entries of its
// TMPDIR, and processes (a Postgres server) whose command line names it.
func leftovers(t *testing.T, tmp string) []string {
	t.Helper()
	var left []string
	entries, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		left = append(left, "file "+e.Name())
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), tmp) {
			left = append(left, "process "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return left
}

// Ctrl-C at any moment of dev's start-up (while Postgres is being made,
// a little later, once it serves) stops everything it started and
// removes its folder, and dev exits 0.
func TestDevStopsWhatItStartedOnCtrlC(t *testing.T) {
	t.Parallel()
	for _, moment := range []string{"starting a throwaway Postgres", "after 1.5s", "Ctrl-C stops everything"} {
		t.Run(moment, func(t *testing.T) {
			tmp := devTemp(t)
			p := start(t, "dev", devEnv(tmp), "dev", "--kafka-port", "0", "--http", freeAddr(t))
			switch moment {
			case "after 1.5s":
				time.Sleep(1500 * time.Millisecond) // a moment of start-up, not a synchronisation
			case "Ctrl-C stops everything":
				testenv.Eventually(t, 60*time.Second, "the banner", func() bool { return strings.Contains(p.out.String(), moment) })
			default:
				p.waitLog(60*time.Second, moment)
			}
			p.signal(syscall.SIGINT)
			if code := p.wait(60 * time.Second); code != 0 {
				t.Fatalf("dev exited %d after Ctrl-C", code)
			}
			if left := leftovers(t, tmp); len(left) > 0 {
				t.Fatalf("dev left behind: %v", left)
			}
		})
	}
}

// dev reads the SWITCHYARD_* variables like every other verb: the
// database named replaces the throwaway one, and a token is required on
// the API.
func TestDevReadsTheEnvironment(t *testing.T) {
	t.Parallel()
	tmp := devTemp(t)
	addr := freeAddr(t)
	p := start(t, "dev", devEnv(tmp, "SWITCHYARD_DATABASE_URL="+testenv.DatabaseURL(t), "SWITCHYARD_ADMIN_TOKEN=dev-secret"),
		"dev", "--kafka-port", "0", "--http", addr)
	testenv.Eventually(t, 60*time.Second, "the banner", func() bool { return strings.Contains(p.out.String(), "Ctrl-C stops everything") })
	if strings.Contains(p.log.String(), "starting a throwaway Postgres") {
		t.Error("dev started a throwaway Postgres although SWITCHYARD_DATABASE_URL was set")
	}
	if !strings.Contains(p.out.String(), "Authorization: Bearer $SWITCHYARD_ADMIN_TOKEN") {
		t.Error("the banner's curl example does not send the token")
	}
	get := func(token string) int {
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/queues", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		var res *http.Response
		testenv.Eventually(t, 30*time.Second, "the admin API", func() bool {
			var err error
			res, err = http.DefaultClient.Do(req)
			return err == nil
		})
		res.Body.Close()
		return res.StatusCode
	}
	if code := get(""); code != http.StatusUnauthorized {
		t.Errorf("without the token: %d, want 401", code)
	}
	if code := get("dev-secret"); code != http.StatusOK {
		t.Errorf("with the token: %d, want 200", code)
	}
	p.signal(syscall.SIGINT)
	if code := p.wait(60 * time.Second); code != 0 {
		t.Fatalf("dev exited %d", code)
	}
}

// The throwaway Postgres lets in only who knows its password, which dev
// keeps in its own config file: on a shared machine any local user can
// reach a loopback port, and its superuser can run programs as the user
// that runs the server (COPY ... TO PROGRAM).
func TestDevPostgresNeedsItsPassword(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pg := &throwawayPostgres{dir: filepath.Join(devTemp(t), "pg"), log: zap.NewNop()}
	t.Cleanup(pg.stop)
	if err := pg.start(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, pg.url)
	if err != nil {
		t.Fatalf("with dev's own URL: %v", err)
	}
	conn.Close(ctx)
	u, err := url.Parse(pg.url)
	if err != nil {
		t.Fatal(err)
	}
	for what, user := range map[string]*url.Userinfo{"no password": url.User("postgres"),
		"password postgres": url.UserPassword("postgres", "postgres")} {
		u.User = user
		if conn, err := pgx.Connect(ctx, u.String()); err == nil {
			conn.Close(ctx)
			t.Errorf("connected to the throwaway Postgres with %s", what)
		}
	}
}

// A busy --http port is found before anything starts, with a hint.
// dev's help lists the flags it takes, not the --config every other verb
// has and dev refuses; given anyway, --config is an error that says why.
func TestDevHelpLeavesOutConfig(t *testing.T) {
	t.Parallel()
	code, stdout, _ := runCLI("dev", "--help")
	if code != exitOK || strings.Contains(stdout, "--config") || !strings.Contains(stdout, "--kafka-port N") {
		t.Errorf("dev --help: exit %d\n%s", code, stdout)
	}
	if code, _, stderr := runCLI("dev", "--config", "x.yaml"); code != exitUsage || !strings.Contains(stderr, "dev runs its own example config") {
		t.Errorf("dev --config: exit %d, %s", code, stderr)
	}
}

func TestDevChecksItsPortFirst(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tmp := devTemp(t)
	p := start(t, "dev", devEnv(tmp), "dev", "--kafka-port", "0", "--http", ln.Addr().String())
	if code := p.wait(30 * time.Second); code != exitUsage {
		t.Fatalf("exit %d, want %d", code, exitUsage)
	}
	if msg := p.log.String(); !strings.Contains(msg, "--http "+ln.Addr().String()) || !strings.Contains(msg, "make dev ARGS=") {
		t.Errorf("message %q does not name the flag and the way to change it", msg)
	}
	if left := leftovers(t, tmp); len(left) > 0 {
		t.Fatalf("dev started things before checking its port: %v", left)
	}
}

// dev's log is what a person follows: when it is running and when it has
// stopped, the example target's calls, each record parked, each job that
// dies, and no Kafka client chatter; with --verbose, everything. The tour's steps are run as the banner prints
// them, with the config it writes.
func TestDevLogsWhatAPersonFollows(t *testing.T) {
	t.Parallel()
	for _, verbose := range []bool{false, true} {
		t.Run(fmt.Sprintf("verbose=%v", verbose), func(t *testing.T) {
			t.Parallel()
			tmp := devTemp(t)
			args := []string{"dev", "--kafka-port", "0", "--http", freeAddr(t)}
			if verbose {
				args = append(args, "--verbose")
			}
			p := start(t, "dev", devEnv(tmp), args...)
			testenv.Eventually(t, 60*time.Second, "the banner", func() bool { return strings.Contains(p.out.String(), "Ctrl-C stops everything") })
			p.waitLog(60*time.Second, "dev\tswitchyard running")
			_, cfg, ok := strings.Cut(p.out.String(), "export SWITCHYARD_CONFIG=")
			if !ok {
				t.Fatalf("no config in the banner:\n%s", p.out.String())
			}
			cfg, _, _ = strings.Cut(cfg, "\n")
			for _, value := range []string{`{"customer_id":"c-1","event_id":"e-1"}`, `not json`,
				`{"customer_id":"c-2","event_id":"e-2","reject":true}`} {
				if out, errOut, code := runCmd(t, time.Minute, devEnv(tmp), "produce", "--config", cfg, "--topic", "orders", value); code != 0 {
					t.Fatalf("produce %s: exit %d %s %s", value, code, out, errOut)
				}
			}
			p.waitLog(60*time.Second, "job dead")
			p.waitLog(10*time.Second, "record parked")
			log := p.log.String()
			if !strings.Contains(log, "example-target\treceived") {
				t.Errorf("the target's calls are not in the log:\n%s", log)
			}
			if chatter := strings.Contains(log, "joining group") || strings.Contains(log, "heartbeat"); chatter != verbose {
				t.Errorf("Kafka client chatter in the log: %v, want %v:\n%s", chatter, verbose, log)
			}
			p.signal(syscall.SIGINT)
			if code := p.wait(60 * time.Second); code != 0 {
				t.Fatalf("dev exited %d", code)
			}
			if !strings.Contains(p.log.String(), "dev\tstopped cleanly") {
				t.Errorf("dev did not say it stopped:\n%s", p.log.String())
			}
		})
	}
}
