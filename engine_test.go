package switchyard_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	switchyard "github.com/switchyard-dev/switchyard"
	"github.com/switchyard-dev/switchyard/client"
	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/testenv"
	"github.com/switchyard-dev/switchyard/workers"
)

// An engine's life: its actions say ErrNotStarted before Start rather
// than panic; a Start that fails (here, its admin address is taken)
// stops what it had started — its pools run no job afterwards, and
// TestMain's leak check finds none of their goroutines; and an engine
// starts once, not again and not after Stop.
func TestEngineStartsOnce(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	t.Setenv("SWITCHYARD_DATABASE_URL", testenv.DatabaseURL(t))
	t.Setenv("SWITCHYARD_KAFKA_BROKERS", strings.Join(testenv.Brokers(t), ","))
	cfg, err := config.Parse(fmt.Appendf(nil, `
postgres: {schema: %s}
http: {listen: %q}
shutdown_grace: 1s
queues:
  q: {concurrency: 2, poll_interval: 20ms}
routes:
  - {topic: %s, kind: k, queue: q, target: {go: true}}
`, testenv.Schema(t), taken.Addr().String(), testenv.Name("t")), os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	eng, err := switchyard.New(cfg, switchyard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int64
	if err := eng.Register("k", workers.HandlerFunc(func(context.Context, *workers.Job) error { ran.Add(1); return nil })); err != nil {
		t.Fatal(err)
	}

	if err := eng.Applier().Apply(ctx, &workers.Job{}, func(context.Context, pgx.Tx) error { return nil }); !errors.Is(err, switchyard.ErrNotStarted) {
		t.Errorf("Apply before Start: %v, want ErrNotStarted", err)
	}
	if _, err := eng.RedriveDLQ(ctx, 1); !errors.Is(err, switchyard.ErrNotStarted) {
		t.Errorf("RedriveDLQ before Start: %v, want ErrNotStarted", err)
	}
	if err := eng.DiscardDLQ(ctx, 1); !errors.Is(err, switchyard.ErrNotStarted) {
		t.Errorf("DiscardDLQ before Start: %v, want ErrNotStarted", err)
	}

	if err := eng.Start(ctx); err == nil || !strings.Contains(err.Error(), "http.listen") {
		t.Fatalf("Start on a taken address: %v, want its http.listen error", err)
	}
	cl, err := client.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Enqueue(ctx, client.Job{Queue: "q", Kind: "k", IdempotencyKey: "after-a-failed-start", Payload: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // fifty polls of a pool that still ran
	if n := ran.Load(); n != 0 {
		t.Errorf("a failed Start left its pools running: they ran %d jobs", n)
	}
	if err := eng.Start(ctx); err == nil || !strings.Contains(err.Error(), "started or stopped already") {
		t.Errorf("a second Start: %v, want it refused", err)
	}
	if err := eng.Stop(ctx); err != nil {
		t.Errorf("Stop after a failed Start: %v", err)
	}

	stopped, err := switchyard.New(cfg, switchyard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := stopped.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := stopped.Start(ctx); err == nil || !strings.Contains(err.Error(), "started or stopped already") {
		t.Errorf("Start after Stop: %v, want it refused", err)
	}
}

// The library's entry points answer a nil config, a negative stats
// interval and an unknown role with an error rather than a panic.
func TestEntryPointsRefuseWhatTheyCannotUse(t *testing.T) {
	ctx := context.Background()
	if _, err := switchyard.New(nil, switchyard.Options{}); !errors.Is(err, config.ErrNil) {
		t.Errorf("New(nil): %v, want config.ErrNil", err)
	}
	if _, err := switchyard.Migrate(ctx, nil); !errors.Is(err, config.ErrNil) {
		t.Errorf("Migrate(nil): %v, want config.ErrNil", err)
	}
	// A config built in Go without a database URL: named, rather than
	// a failed dial of pgx's defaults (a local socket). The cancelled
	// context keeps a build without the check from connecting anywhere.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	noURL := &config.Config{}
	noURL.Postgres.Schema = "s"
	if _, err := switchyard.Migrate(cancelled, noURL); err == nil || !strings.Contains(err.Error(), "postgres.url") {
		t.Errorf("Migrate without postgres.url: %v, want it named", err)
	}
	if _, err := client.New(ctx, nil); !errors.Is(err, config.ErrNil) {
		t.Errorf("client.New(nil): %v, want config.ErrNil", err)
	}
	cfg, err := config.Parse([]byte("postgres: {url: \"postgres://u@h/db\"}\nkafka: {brokers: [\"k:9092\"]}\nqueues: {q: {}}\n"+
		"routes: [{topic: t, kind: k, queue: q, target: {go: true}}]\n"), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := switchyard.New(cfg, switchyard.Options{StatsInterval: -time.Second}); err == nil || !strings.Contains(err.Error(), "StatsInterval") {
		t.Errorf("New with a negative StatsInterval: %v, want it refused", err)
	}
	// Named as the Go caller set it, not as the CLI's flag.
	if _, err := switchyard.New(cfg, switchyard.Options{Role: "worker"}); err == nil || !strings.Contains(err.Error(), "Options.Role") {
		t.Errorf("New with an unknown Role: %v, want it refused naming Options.Role", err)
	}
	// One engine per metrics registry: a second is told so.
	reg := prometheus.NewRegistry()
	if _, err := switchyard.New(cfg, switchyard.Options{Registry: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := switchyard.New(cfg, switchyard.Options{Registry: reg}); err == nil || !strings.Contains(err.Error(), "Options.Registry") {
		t.Errorf("a second New on one registry: %v, want it refused", err)
	}
}

// Register takes the kinds a Go handler runs — a route's with target go,
// a schedule's that no route takes — and refuses the rest by name: a
// misspelt kind, or an HTTP route's, would never reach its handler.
func TestRegisterTakesOnlyKindsThatRun(t *testing.T) {
	cfg, err := config.Parse([]byte("postgres: {url: \"postgres://u@h/db\"}\nkafka: {brokers: [\"k:9092\"]}\nqueues: {q: {}}\n"+
		"routes:\n  - {name: a, topic: t, kind: k, queue: q, target: {go: true}}\n"+
		"  - {name: b, topic: t, kind: web, queue: q, target: {http: {url: \"http://127.0.0.1:1/\"}}}\n"+
		"schedules:\n  - {name: nightly, cron: \"0 3 * * *\", kind: report, queue: q}\n"), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	eng, err := switchyard.New(cfg, switchyard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	noop := workers.HandlerFunc(func(context.Context, *workers.Job) error { return nil })
	for _, kind := range []string{"k", "report"} {
		if err := eng.Register(kind, noop); err != nil {
			t.Errorf("Register(%q): %v", kind, err)
		}
	}
	for _, kind := range []string{"kk", "web"} {
		if err := eng.Register(kind, noop); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", kind)) {
			t.Errorf("Register(%q): %v, want it refused by name", kind, err)
		}
	}
}

// A Stop that comes while Start runs (say, a signal during a slow
// connect) makes Start fail and returns only once it has: a Stop that
// returned at once would leave Start to go on and start pools, a
// consumer and the admin server that nothing stops. Here Start waits on
// a "database" that accepts the connection and never answers.
func TestStopDuringStartEndsTheStart(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dialled := make(chan net.Conn, 1)
	go func() {
		c, err := silent.Accept()
		if err == nil {
			dialled <- c
		}
	}()
	cfg, err := config.Parse(fmt.Appendf(nil, `
postgres: {url: "postgres://u@%s/db", schema: s}
kafka: {brokers: ["127.0.0.1:1"]}
http: {listen: "off"}
queues: {q: {}}
routes: [{topic: t, kind: k, queue: q, target: {go: true}}]
`, silent.Addr()), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	eng, err := switchyard.New(cfg, switchyard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Register("k", workers.HandlerFunc(func(context.Context, *workers.Job) error { return nil })); err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	go func() { started <- eng.Start(context.Background()) }()
	conn := <-dialled // Start is connecting to Postgres
	defer conn.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := eng.Stop(ctx); err != nil {
		t.Errorf("Stop during Start: %v", err)
	}
	// Start's last act is to close what Stop waits for; returning its
	// error to the goroutine above comes after, so Start may not have
	// returned yet, but it must be about to: a Start that Stop did not
	// wait for would still be waiting for the silent database.
	select {
	case err := <-started:
		if err == nil || !strings.Contains(err.Error(), "Stop was called") {
			t.Errorf("Start stopped while it ran: %v, want it to say so", err)
		}
	case <-time.After(10 * time.Second):
		silent.Close() // let it end, and the leak check pass
		<-started
		t.Fatal("Stop returned while Start still ran: what Start went on to start would run after it")
	}
	silent.Close()
}
