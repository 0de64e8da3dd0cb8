package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	switchyard "github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/metrics"
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
    ordered: true                      # lanes: one job per customer at a time, in order
    max_attempts: 3
    backoff: {initial: 1s, max: 10s}
    target:
      http: {url: %q, timeout: 70s}
  - topic: reports
    kind: report.rebuild
    queue: bulk
    group: {field: tenant, max_running: 1}   # one report per tenant at a time, fleet-wide
    target:
      http: {url: %q, timeout: 70s}
`

const devAbout = `
Runs everything on one machine: an embedded Kafka-protocol broker, a
throwaway Postgres, the dispatcher with its dashboard, and an example
HTTP target, with an example config it prints the path of. The example
target answers 400 to a body holding "reject":true (the job is dead at
once), 500 to one holding "fail":true (retried with backoff, then dead),
and sleeps for "sleep_ms" milliseconds (at most 30 s) when the body says so.

The log shows what a person follows — each call the example target
receives, each record parked, each job that dies, and warnings — unless
--verbose.`

// devLogger is dev's log: readable lines rather than JSON, and, unless
// verbose, only warnings and the events a person follows (the example
// target's calls, records parked, jobs dead: the loggers named
// metrics.EventsLogger), not the Kafka client's group chatter.
func devLogger(w io.Writer, verbose bool) *zap.Logger {
	enc := zap.NewDevelopmentEncoderConfig()
	enc.EncodeTime = zapcore.TimeEncoderOfLayout("15:04:05")
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.AddSync(w), zapcore.InfoLevel)
	if !verbose {
		core = eventsOnly{core}
	}
	return zap.New(core)
}

// eventsOnly passes warnings and worse, and info of the events loggers.
type eventsOnly struct{ zapcore.Core }

func (c eventsOnly) With(fields []zapcore.Field) zapcore.Core { return eventsOnly{c.Core.With(fields)} }

func (c eventsOnly) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	name := e.LoggerName
	if e.Level >= zapcore.WarnLevel || strings.HasSuffix(name, metrics.EventsLogger) || name == exampleTarget || name == devSteps {
		return c.Core.Check(e, ce)
	}
	return ce
}

// The loggers of dev's own start-up steps and of its example target.
const (
	devSteps      = "dev"
	exampleTarget = "example-target"
)

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, _ := newFlags("dev", "dev [--kafka-port N] [--http ADDR] [--verbose]", devAbout, stdout)
	// Every verb has --config; dev writes and runs its own example, so
	// its help leaves it out, and giving it is an error below.
	fs.Lookup("config").Usage = ""
	kafkaPort := fs.Int("kafka-port", 9092, "port of the embedded Kafka-protocol broker (0 = any free port)")
	httpAddr := fs.String("http", "127.0.0.1:8080", "admin API and dashboard `ADDR`ess")
	verbose := fs.Bool("verbose", false, "log everything at info (Kafka client, pools, flow control), not only what a person follows")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if given(fs, "config") {
		return usagef("--config: dev runs its own example config (it prints where); `switchyard run --config FILE` runs yours")
	}
	log := devLogger(stderr, *verbose)
	log.Debug("garbage collector", zap.String("pace", paceGC(ctx)))
	// Before anything starts: a port in use would otherwise only show
	// once the broker, Postgres and the banner were up.
	if err := portFree(*httpAddr); err != nil {
		return usagef("--http %s: %v; pick another address, e.g. --http 127.0.0.1:8081 (make dev ARGS='--http 127.0.0.1:8081')", *httpAddr, err)
	}
	// Ctrl-C at any moment of start-up cancels it; every step below that
	// started something has its stop deferred already, so the function
	// returns having stopped all of it and removed its folder.
	// serve's channel listens from here too, so that a Ctrl-C answering
	// the banner reaches serve however soon it comes.
	startCtx, stopStartSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopStartSignals()
	sigs, stopServeSignals := stopSignals()
	defer stopServeSignals()
	err := startDev(startCtx, ctx, sigs, *kafkaPort, *httpAddr, stdout, log)
	if err != nil && startCtx.Err() != nil && ctx.Err() == nil {
		log.Warn("interrupted during start-up; stopped what had started")
		return nil
	}
	return err
}

// startDev starts everything dev runs, then serves until a signal. Start-up
// steps run on startCtx (cancelled by the first Ctrl-C); serving takes
// its signals from sigs, on ctx.
func startDev(startCtx, ctx context.Context, sigs <-chan os.Signal, kafkaPort int, httpAddr string, stdout io.Writer, log *zap.Logger) error {
	dir, err := os.MkdirTemp("", "switchyard-dev-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// Like every verb, dev reads the SWITCHYARD_* variables: the brokers
	// and database they name replace the embedded broker and the
	// throwaway Postgres, and a token protects the API and dashboard.
	brokers := os.Getenv(config.EnvKafkaBrokers)
	if brokers == "" {
		broker, err := kfake.NewCluster(kfake.Ports(kafkaPort), kfake.SeedTopics(4, "orders", "reports"), kfake.AllowAutoTopicCreation())
		if err != nil {
			return fmt.Errorf("embedded broker on port %d: %w (try --kafka-port 0)", kafkaPort, err)
		}
		defer broker.Close()
		brokers = broker.ListenAddrs()[0]
	}
	dbURL := cmp.Or(os.Getenv(config.EnvDatabaseURL), os.Getenv("DATABASE_URL"))
	if dbURL == "" {
		pg := &throwawayPostgres{dir: filepath.Join(dir, "pg"), log: log.Named(devSteps)}
		defer pg.stop()
		if err := pg.start(startCtx); err != nil {
			return err
		}
		dbURL = pg.url
	}
	if err := startCtx.Err(); err != nil {
		return err
	}

	target, targetURL, err := startExampleTarget(log)
	if err != nil {
		return err
	}
	defer target.Close()

	cfgPath := filepath.Join(dir, "switchyard.yaml")
	body := fmt.Sprintf(devConfig, brokers, dbURL, httpAddr, targetURL+"/hooks/orders", targetURL+"/hooks/reports")
	if err := os.WriteFile(cfgPath, []byte(body), 0o600); err != nil {
		return err
	}
	cfg, err := config.Load(cfgPath, os.Getenv)
	if err != nil {
		return usageError{err.Error()}
	}
	if _, err := switchyard.Migrate(startCtx, cfg); err != nil {
		return err
	}
	eng, err := switchyard.New(cfg, switchyard.Options{Logger: log})
	if err != nil {
		return err
	}
	if err := startCtx.Err(); err != nil {
		return err
	}
	// The tour's sy is this binary: a CLI built from other sources would
	// find dev's schema not its own.
	self, err := os.Executable()
	if err != nil {
		self = "go run ./cmd/switchyard"
	}
	auth := ""
	if cfg.HTTP.Token != "" {
		auth = ` -H "Authorization: Bearer $SWITCHYARD_ADMIN_TOKEN"`
	}
	fmt.Fprintf(stdout, `
Switchyard dev is starting (data in %s, removed on exit).
  Kafka:     %s    Postgres: schema switchyard_dev    example target: %s
  dashboard: http://%s/

Try, in another terminal (the README's tour says what each shows):
  export SWITCHYARD_CONFIG=%s
  alias sy=%s
  sy produce --topic orders --key c-1 '{"customer_id":"c-1","event_id":"e-1"}'               # a job, delivered
  sy produce --topic orders --key c-2 '{"customer_id":"c-2","event_id":"e-2","sleep_ms":5000}'
  sy produce --topic orders --key c-2 '{"customer_id":"c-2","event_id":"e-3"}'               # waits in c-2's lane
  sy jobs list --key c-2
  sy produce --topic orders --key c-3 '{"customer_id":"c-3","event_id":"e-4","fail":true}'   # 500s: retried, then dead
  sy produce --topic orders 'not json'                                                        # poison: parked, nothing stops
  sy dlq list
  sy dlq redrive ID                                                                           # the max_attempts entry: it runs again
  sy queues pause interactive
  sy produce --topic orders --key c-4 '{"customer_id":"c-4","event_id":"e-5"}'               # waits, queued
  sy queues resume interactive                                                                # and runs
  sy produce --topic reports '{"tenant":"t-1","sleep_ms":3000}'; sy produce --topic reports '{"tenant":"t-1"}'
  sy jobs list --queue bulk                                                                   # one per tenant at a time
  curl -s%s http://%s/v1/queues

The log below shows each call the example target receives, each record
parked and each job that dies (--verbose for everything).
Ctrl-C stops everything.
`, dir, brokers, targetURL, httpAddr, cfgPath, shellQuote(self), auth, httpAddr)
	// serve's own lines (running, shutting down, stopped) are dev's steps:
	// they tell a person when the tour can start and when it has ended.
	return serve(ctx, eng, log.Named(devSteps), cfg.ShutdownGrace.D(), sigs)
}

// portFree reports whether addr can be listened on now.
func portFree(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Err != nil {
			return op.Err
		}
		return err
	}
	return ln.Close()
}

// startExampleTarget serves a tiny HTTP target that logs what it receives
// and answers 400 when the body asks to be rejected, 500 when it asks to
// fail, so that every outcome can be tried by hand.
func startExampleTarget(log *zap.Logger) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	tlog := log.Named(exampleTarget)
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		tlog.Info("received", zap.String("path", r.URL.Path), zap.String("job_id", r.Header.Get("Switchyard-Job-Id")),
			zap.String("attempt", r.Header.Get("Switchyard-Attempt")), zap.String("key", r.Header.Get("Switchyard-Key")),
			zap.ByteString("body", body))
		if ms := sleepMS(body); ms > 0 {
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
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

// sleepMS reads the "sleep_ms" of a JSON body (at most 30 s), so
// that a slow job can be tried by hand: a lane waits behind it, a pause
// lets it finish.
func sleepMS(body []byte) int {
	var v struct {
		SleepMS int `json:"sleep_ms"`
	}
	if json.Unmarshal(body, &v) != nil {
		return 0
	}
	return min(max(v.SleepMS, 0), 30_000)
}

// throwawayPostgres is a cluster of its own in dir, on a free loopback
// port, made with initdb and pg_ctl from PATH (or Debian's server
// directory). initdb refuses to run as root, so as root the cluster
// belongs to the "postgres" user.
type throwawayPostgres struct {
	dir string
	log *zap.Logger
	url string
	// cred and data are set once start has begun making the cluster:
	// from then on stop has something to stop.
	cred *syscall.Credential
	data string
	bin  string
}

func (pg *throwawayPostgres) start(ctx context.Context) error {
	bin, err := postgresBinDir()
	if err != nil {
		return err
	}
	pg.bin = bin
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return errors.New("running as root and there is no postgres user to own the throwaway cluster; set SWITCHYARD_DATABASE_URL instead")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		pg.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chmod(filepath.Dir(pg.dir), 0o755); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(pg.dir, 0o700); err != nil {
		return err
	}
	if pg.cred != nil {
		if err := os.Chown(pg.dir, int(pg.cred.Uid), int(pg.cred.Gid)); err != nil {
			return err
		}
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	pg.data = filepath.Join(pg.dir, "data")
	pg.log.Info("starting a throwaway Postgres", zap.String("dir", pg.data), zap.Int("port", port))
	// A password, not trust: any local user can reach a loopback port,
	// and the superuser of a trusting cluster can run programs as the
	// user that runs it (COPY ... TO PROGRAM). The password lives in
	// dev's config file (0600) only; its file here goes once initdb read it.
	password, err := randomHex(16)
	if err != nil {
		return err
	}
	pwfile := filepath.Join(pg.dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(password+"\n"), 0o600); err != nil {
		return err
	}
	defer os.Remove(pwfile)
	if pg.cred != nil {
		if err := os.Chown(pwfile, int(pg.cred.Uid), int(pg.cred.Gid)); err != nil {
			return err
		}
	}
	if err := pg.run(ctx, "initdb", "-D", pg.data, "-U", "postgres", "--auth=scram-sha-256", "--pwfile="+pwfile, "-E", "UTF8"); err != nil {
		return err
	}
	// TCP only: a Unix socket path is limited to ~107 bytes, which a
	// deep TMPDIR exceeds, and nothing here needs one.
	opts := fmt.Sprintf("-p %d -k '' -c listen_addresses=127.0.0.1", port)
	if err := pg.run(ctx, "pg_ctl", "-D", pg.data, "-l", filepath.Join(pg.dir, "postgres.log"), "-o", opts, "-w", "start"); err != nil {
		return err
	}
	pg.url = fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/postgres?sslmode=disable", password, port)
	return nil
}

// stop stops the cluster if start got as far as making one. It runs on
// a context of its own: it is what happens after Ctrl-C.
func (pg *throwawayPostgres) stop() {
	if pg.data == "" {
		return
	}
	if _, err := os.Stat(filepath.Join(pg.data, "postmaster.pid")); err != nil {
		return // never started, or already stopped
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pg.run(ctx, "pg_ctl", "-D", pg.data, "-m", "fast", "-w", "stop"); err != nil {
		pg.log.Warn("stopping the throwaway Postgres failed", zap.Error(err))
	}
}

// run runs a Postgres program in a process group of its own: a Ctrl-C
// in the terminal goes to dev alone, which then stops Postgres in order,
// rather than to initdb or the server halfway through.
func (pg *throwawayPostgres) run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(pg.bin, name), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: pg.cred, Setpgid: true}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w\n%s", name, err, out)
	}
	return nil
}

// postgresBinDir finds initdb and pg_ctl: on PATH, else in the newest of
// Debian's /usr/lib/postgresql/*/bin, which keeps them off PATH.
func postgresBinDir() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if _, err := exec.LookPath("initdb"); err == nil {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i], nil
		}
	}
	return "", errors.New("no SWITCHYARD_DATABASE_URL set and initdb/pg_ctl are not on PATH: install PostgreSQL 15 or set SWITCHYARD_DATABASE_URL")
}

// randomHex is n random bytes in hex.
func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
