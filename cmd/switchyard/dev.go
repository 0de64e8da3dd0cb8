package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/zap"

	switchyard "github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

const devConfig = `# Written by switchyard dev; a starting point for your own.
kafka:
  brokers: [%q]
  group: switchyard-dev
postgres:
  url: %q
  schema: switchyard_dev
http:
  listen: %q
shutdown_grace: 5s
queues:
  interactive: {concurrency: 8, lease: 30s, max_runtime: 1m, poll_interval: 500ms}
  bulk: {concurrency: 2, lease: 60s, max_runtime: 10m}
routes:
  - topic: orders
    kind: order.sync
    queue: interactive
    key: {field: customer_id}
    dedupe: {field: event_id}
    max_attempts: 3
    backoff: {initial: 1s, max: 10s}
    target:
      http: {url: %q, timeout: 5s}
  - topic: reports
    kind: report.rebuild
    queue: bulk
    target:
      http: {url: %q, timeout: 30s}
`

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, _ := newFlags("dev", "dev [--kafka-port N] [--http ADDR]", stderr)
	kafkaPort := fs.Int("kafka-port", 9092, "port of the embedded Kafka-protocol broker (0 = any free port)")
	httpAddr := fs.String("http", "127.0.0.1:8080", "admin API and dashboard address")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := newLogger(stderr)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "switchyard-dev-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	broker, err := kfake.NewCluster(kfake.Ports(*kafkaPort), kfake.SeedTopics(4, "orders", "reports"), kfake.AllowAutoTopicCreation())
	if err != nil {
		return fmt.Errorf("embedded broker on port %d: %w (try --kafka-port 0)", *kafkaPort, err)
	}
	defer broker.Close()
	brokers := broker.ListenAddrs()[0]

	dbURL := os.Getenv("DATABASE_URL")
	if dbURL == "" {
		pg, err := startThrowawayPostgres(ctx, filepath.Join(dir, "pg"), log)
		if err != nil {
			return err
		}
		defer pg.stop()
		dbURL = pg.url
	}

	target, targetURL, err := startExampleTarget(log)
	if err != nil {
		return err
	}
	defer target.Close()

	cfgPath := filepath.Join(dir, "switchyard.yaml")
	body := fmt.Sprintf(devConfig, brokers, dbURL, *httpAddr, targetURL+"/hooks/orders", targetURL+"/hooks/reports")
	if err := os.WriteFile(cfgPath, []byte(body), 0o600); err != nil {
		return err
	}
	cfg, err := config.Load(cfgPath, func(string) string { return "" })
	if err != nil {
		return err
	}
	store, err := pgstore.Open(ctx, pgstore.Config{URL: cfg.Postgres.URL, Schema: cfg.Postgres.Schema, MaxConns: 2})
	if err != nil {
		return err
	}
	_, err = store.Migrate(ctx)
	store.Close()
	if err != nil {
		return err
	}
	eng, err := switchyard.New(cfg, switchyard.Options{Logger: log})
	if err != nil {
		return err
	}
	env := fmt.Sprintf("SWITCHYARD_CONFIG=%s", cfgPath)
	fmt.Fprintf(stdout, `
Switchyard dev is starting (data in %s, removed on exit).
  embedded Kafka:  %s    Postgres: schema switchyard_dev    example target: %s
  dashboard:       http://%s/

Try, in another terminal:
  export %s
  go run ./cmd/switchyard produce --topic orders '{"customer_id":"c-1","event_id":"e-1"}'
  go run ./cmd/switchyard jobs list
  go run ./cmd/switchyard jobs get 1
  go run ./cmd/switchyard produce --topic orders 'not json'      # poison: parked in the DLQ
  go run ./cmd/switchyard produce --topic orders '{"customer_id":"c-2","event_id":"e-2","reject":true}'  # target answers 400: dead
  go run ./cmd/switchyard dlq list
  curl -s http://%s/v1/queues

Ctrl-C stops everything.
`, dir, brokers, targetURL, *httpAddr, env, *httpAddr)
	return serve(ctx, eng, log, cfg.ShutdownGrace.D())
}

// startExampleTarget serves a tiny HTTP target that logs what it receives
// and answers 400 when the body asks to be rejected, 500 when it asks to
// fail, so that every outcome can be tried by hand.
func startExampleTarget(log *zap.Logger) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	tlog := log.Named("example-target")
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		tlog.Info("received", zap.String("path", r.URL.Path), zap.String("job_id", r.Header.Get("Switchyard-Job-Id")),
			zap.String("attempt", r.Header.Get("Switchyard-Attempt")), zap.String("key", r.Header.Get("Switchyard-Key")),
			zap.ByteString("body", body))
		switch {
		case strings.Contains(string(body), `"reject":true`):
			http.Error(w, "rejected by the example target", http.StatusBadRequest)
		case strings.Contains(string(body), `"fail":true`):
			http.Error(w, "failing on purpose", http.StatusInternalServerError)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	return srv, "http://" + ln.Addr().String(), nil
}

type throwawayPostgres struct {
	dir  string
	url  string
	stop func()
}

// startThrowawayPostgres runs initdb and postgres from PATH into dir on a
// free loopback port. initdb refuses to run as root, so as root the
// cluster belongs to the "postgres" user.
func startThrowawayPostgres(ctx context.Context, dir string, log *zap.Logger) (*throwawayPostgres, error) {
	for _, bin := range []string{"initdb", "pg_ctl"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("no DATABASE_URL set and %s is not on PATH: install PostgreSQL 15 or set DATABASE_URL", bin)
		}
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, errors.New("running as root and there is no postgres user to own the throwaway cluster; set DATABASE_URL instead")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	run := func(name string, args ...string) error {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %w\n%s", name, err, out)
		}
		return nil
	}
	data := filepath.Join(dir, "data")
	log.Info("starting a throwaway Postgres", zap.String("dir", data), zap.Int("port", port))
	if err := run("initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8"); err != nil {
		return nil, err
	}
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1", port, dir)
	if err := run("pg_ctl", "-D", data, "-l", filepath.Join(dir, "postgres.log"), "-o", opts, "-w", "start"); err != nil {
		return nil, err
	}
	return &throwawayPostgres{dir: dir,
		url: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port),
		stop: func() {
			if err := run("pg_ctl", "-D", data, "-m", "fast", "-w", "stop"); err != nil {
				log.Warn("stopping the throwaway Postgres failed", zap.Error(err))
			}
		}}, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
