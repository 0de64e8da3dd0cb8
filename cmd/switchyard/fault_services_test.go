package main

// Fault tests of the services Switchyard stands on: Postgres restarted
// under a running process, its connections killed, the Kafka broker
// restarted, and the database replaced by an empty one. The process under
// test is never restarted (except where the scenario is about restarting
// it): it must recover by itself, and the invariants of SPEC §2 are
// checked from the outside at the end. Each scenario prints one
// FAULT-SUMMARY line.
//
// Scenarios that restart a service start a private instance of it with
// the deploy/local scripts; the shared services are never touched.

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// The load of every scenario: 100 records/s over 3 partitions and 24 keys,
// each job held 0–20ms by the target.
const (
	loadPartitions = 3
	loadKeys       = 24
	loadBurst      = 5
	loadTick       = 50 * time.Millisecond
	loadHold       = 20 * time.Millisecond
)

// scenarioConfig completes the config of a scenario: dedupe on the
// payload's "id", retries backing off to 500ms, a pool of 10 connections
// and the (default) 10s session timeout written out.
func scenarioConfig(c testConfig) testConfig {
	c.Dedupe = true
	c.BackoffMax = 500 * time.Millisecond
	c.MaxConns = 10
	c.KafkaExtra = ", session_timeout: 10s"
	return c
}

// TestFaultPostgresRestart restarts the process's Postgres (pg_ctl stop
// -m fast, then start: every session is cut) while records arrive and
// jobs run on an ordered route. The process must notice (ingest and the
// claim loop both fail while it is down), carry on by itself once it is
// back, and in the end have one succeeded job per record, stored offsets
// at the end offsets, and per-key order kept.
func TestFaultPostgresRestart(t *testing.T) {
	t.Parallel()
	cycles := faultCycles(t, 2)
	pg := testenv.StartPostgres(t)
	svc := testenv.Services{DatabaseURL: pg.URL, Brokers: testenv.Brokers(t)}
	schema := svc.Schema(t)
	store := svc.Store(t, schema)
	topic := svc.Topic(t, loadPartitions)
	group := testenv.Name("g")
	watch := newDeliveryWatch(loadHold)
	tg := newTarget(t)
	tg.setBehaviour(watch.behaviour)
	// Each outage can cost a job an attempt (its lease expires while the
	// completion cannot be written); never enough to make it dead.
	cfg := writeConfig(t, scenarioConfig(testConfig{Services: svc, Topic: topic, Group: group, Schema: schema,
		TargetURL: tg.URL(), Ordered: true, MaxAttempts: cycles + 10}))

	p := start(t, "run", svc.Env(), "run", "--config", cfg)
	pr := startProducer(t, svc.Brokers, topic, "r", loadPartitions, loadKeys, loadBurst, loadTick)
	waitThrough(t, p, pr, store, time.Minute)
	for i := 1; i <= cycles; i++ {
		pr.waitProduced(t, pr.count(), 50, 30*time.Second)
		mark := p.logMark()
		down := time.Now()
		pg.Stop()
		// Both halves of the process hit the outage before it ends: ingest
		// retries its batch, the rescuer (every lease/3) fails. Every other
		// outage outlasts the 2s lease, so that leases expire meanwhile and
		// completions wait for the database or are given up.
		rescues := 1
		if i%2 == 0 {
			rescues = 6
		}
		p.waitLogCount(mark, 30*time.Second, "storing batch failed", 1)
		p.waitLogCount(mark, 30*time.Second, `"rescue failed"`, rescues)
		pg.Start()
		up := time.Now()
		through := waitThrough(t, p, pr, store, time.Minute)
		t.Logf("restart %d/%d: postgres down for %s; a new record went through %s after it was back",
			i, cycles, up.Sub(down).Round(time.Millisecond), through.Round(time.Millisecond))
	}
	// Records keep coming after the last restart.
	pr.waitProduced(t, pr.count(), 50, 30*time.Second)
	recs := pr.stop(t)

	sum := finalCheck{p: p, store: store, adm: svc.Admin(t), group: group, topic: topic, tg: tg, watch: watch, ordered: true}.
		verify(t, recs, 2*time.Minute)
	term(t, p, 30*time.Second)
	sum.report(t, "postgres_restart")
}

// TestFaultConnectionsKilled terminates the process's Postgres backends
// (pg_terminate_backend) again and again while records arrive, on the
// shared server. Only this process's backends are terminated: other test
// packages connect with the same user and application_name (the store
// sets application_name=switchyard itself, overriding one in the URL),
// so they are picked by their TCP connection. backendPorts reads, from
// /proc, the local ports of the process's own sockets connected to the
// server; a backend's (client_addr, client_port) is exactly that socket's
// address. To guard against a port freed and reused by another client
// between the read and the kill, the backend must also have started after
// the process did and belong to this database and user.
func TestFaultConnectionsKilled(t *testing.T) {
	t.Parallel()
	rounds := 4 * faultCycles(t, 3)
	svc := testenv.Shared(t)
	schema := svc.Schema(t)
	store := svc.Store(t, schema)
	topic := svc.Topic(t, loadPartitions)
	group := testenv.Name("g")
	watch := newDeliveryWatch(loadHold)
	tg := newTarget(t)
	tg.setBehaviour(watch.behaviour)
	cfg := writeConfig(t, scenarioConfig(testConfig{Services: svc, Topic: topic, Group: group, Schema: schema,
		TargetURL: tg.URL(), Ordered: true, MaxAttempts: rounds + 10}))

	var startedAt time.Time
	if err := store.Pool().QueryRow(context.Background(), `SELECT now()`).Scan(&startedAt); err != nil {
		t.Fatal(err)
	}
	p := start(t, "run", svc.Env(), "run", "--config", cfg)
	pr := startProducer(t, svc.Brokers, topic, "r", loadPartitions, loadKeys, loadBurst, loadTick)
	waitThrough(t, p, pr, store, time.Minute)
	pr.waitProduced(t, pr.count(), 50, 30*time.Second)
	pgPort := urlPort(t, svc.DatabaseURL) // on 127.0.0.1, checked by urlPort
	mark := p.logMark()
	killed := 0
	for i := 1; i <= rounds; i++ {
		// At a random moment, so that kills land mid-transaction too.
		<-time.After(rand.N(400 * time.Millisecond))
		ports, err := backendPorts(p.cmd.Process.Pid, pgPort)
		if err != nil {
			t.Fatalf("find the process's connections: %v", err)
		}
		var n int
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = store.Pool().QueryRow(ctx, `
			SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE client_addr = '127.0.0.1'::inet AND client_port = ANY($1) AND backend_start >= $2
			  AND usename = current_user AND datname = current_database() AND pid <> pg_backend_pid()`,
			ports, startedAt).Scan(&n)
		cancel()
		if err != nil {
			t.Fatalf("terminate backends: %v", err)
		}
		killed += n
		// It recovers: new records go through before the next round.
		waitThrough(t, p, pr, store, time.Minute)
	}
	if killed == 0 {
		t.Fatal("no backend of the process was ever terminated: the test tested nothing")
	}
	failures := strings.Count(p.log.String()[mark:], "failed")
	t.Logf("%d rounds terminated %d backends; the process logged %d failures and recovered from each", rounds, killed, failures)
	pr.waitProduced(t, pr.count(), 50, 30*time.Second)
	recs := pr.stop(t)

	sum := finalCheck{p: p, store: store, adm: svc.Admin(t), group: group, topic: topic, tg: tg, watch: watch, ordered: true}.
		verify(t, recs, 2*time.Minute)
	term(t, p, 30*time.Second)
	sum.report(t, "connections_killed")
}

// TestFaultKafkaRestart stops the process's Kafka broker (SIGTERM, a
// controlled shutdown) while records arrive, and starts it again. The
// process must ride it out: fetches and commits fail meanwhile, the group
// session is re-established, positions come from Postgres again, and
// nothing is lost or doubled.
func TestFaultKafkaRestart(t *testing.T) {
	t.Parallel()
	cycles := faultCycles(t, 1)
	k := testenv.StartKafka(t)
	svc := testenv.Services{DatabaseURL: testenv.DatabaseURL(t), Brokers: k.Brokers}
	adm := svc.Admin(t)
	topic := svc.Topic(t, loadPartitions)
	schema := svc.Schema(t)
	store := svc.Store(t, schema)
	group := testenv.Name("g")
	watch := newDeliveryWatch(loadHold)
	tg := newTarget(t)
	tg.setBehaviour(watch.behaviour)
	cfg := writeConfig(t, scenarioConfig(testConfig{Services: svc, Topic: topic, Group: group, Schema: schema,
		TargetURL: tg.URL(), Ordered: true, MaxAttempts: cycles + 10}))

	p := start(t, "run", svc.Env(), "run", "--config", cfg)
	pr := startProducer(t, svc.Brokers, topic, "r", loadPartitions, loadKeys, loadBurst, loadTick)
	waitThrough(t, p, pr, store, time.Minute)
	for i := 1; i <= cycles; i++ {
		pr.waitProduced(t, pr.count(), 50, 30*time.Second)
		mark := p.logMark()
		down := time.Now()
		k.Stop()
		// The consumer noticed the broker is gone.
		p.waitLogCount(mark, 30*time.Second, "connection refused", 1)
		k.Start()
		up := time.Now()
		through := waitThrough(t, p, pr, store, 2*time.Minute)
		t.Logf("restart %d/%d: kafka down for %s; a new record went through %s after it was back",
			i, cycles, up.Sub(down).Round(time.Millisecond), through.Round(time.Millisecond))
	}
	pr.waitProduced(t, pr.count(), 50, time.Minute)
	recs := pr.stop(t)

	sum := finalCheck{p: p, store: store, adm: adm, group: group, topic: topic, tg: tg, watch: watch, ordered: true}.
		verify(t, recs, 2*time.Minute)
	term(t, p, 30*time.Second)
	sum.report(t, "kafka_restart")
}

// TestFaultDatabaseReplaced: the process consumed records (stored offsets
// in Postgres, committed offsets in Kafka) and stopped; its schema is then
// dropped and migrated again, as a lost database restored empty would be.
// A plain `run` must refuse to resume — silently starting from Kafka's
// offsets would skip whatever the old database held — exit non-zero with
// an error naming the missing stored offsets and --reset-offsets, and
// create nothing. `run --reset-offsets` then resumes from Kafka's
// committed offsets: jobs for the records produced since, none for the
// ones before. The route is unordered: order is not what this is about,
// so order_violations is 0 by construction.
func TestFaultDatabaseReplaced(t *testing.T) {
	t.Parallel()
	svc := testenv.Shared(t)
	schema := svc.Schema(t)
	store := svc.Store(t, schema)
	topic := svc.Topic(t, loadPartitions)
	adm := svc.Admin(t)
	group := testenv.Name("g")
	watch := newDeliveryWatch(loadHold)
	tg := newTarget(t)
	tg.setBehaviour(watch.behaviour)
	cfg := writeConfig(t, scenarioConfig(testConfig{Services: svc, Topic: topic, Group: group, Schema: schema,
		TargetURL: tg.URL(), MaxAttempts: 10}))

	// 1. Consume some records; Postgres and Kafka both hold positions.
	p := start(t, "run-0", svc.Env(), "run", "--config", cfg)
	pr := startProducer(t, svc.Brokers, topic, "a", loadPartitions, loadKeys, loadBurst, loadTick)
	pr.waitProduced(t, 0, 100, 30*time.Second)
	before := pr.stop(t)
	run := finalCheck{p: p, store: store, adm: adm, group: group, topic: topic, tg: tg, watch: watch}
	sum := run.verify(t, before, time.Minute)
	end := endOffsets(t, adm, topic)
	testenv.Eventually(t, 30*time.Second, "Kafka's committed offsets to reach the end offsets", func() bool {
		return offsetsCovered(committedOffsets(t, adm, group, topic), end)
	})
	term(t, p, 30*time.Second)

	// 2. The database is replaced by an empty one; records arrive meanwhile.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := store.DropSchema(ctx); err != nil {
		t.Fatalf("drop schema: %v", err)
	}
	if _, err := store.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	pr = startProducer(t, svc.Brokers, topic, "b", loadPartitions, loadKeys, loadBurst, loadTick)
	pr.waitProduced(t, 0, 50, 30*time.Second)
	after := pr.stop(t)

	// 3. A plain run refuses.
	refused := start(t, "run-1", svc.Env(), "run", "--config", cfg)
	if code := refused.wait(30 * time.Second); code != exitFailure {
		t.Errorf("run on the replaced database: exit code %d, want %d", code, exitFailure)
	}
	msg := refused.log.String()
	t.Logf("the refusal: %s", lastLine(msg))
	for _, want := range []string{"Postgres has no stored offset", "--reset-offsets", topic, group} {
		if !strings.Contains(msg, want) {
			t.Errorf("run on the replaced database: the error does not mention %q:\n%s", want, tail(msg, 4<<10))
		}
	}
	for what, q := range map[string]string{"jobs": `SELECT count(*) FROM all_jobs`,
		"DLQ entries": `SELECT count(*) FROM dlq_entries`, "stored offsets": `SELECT count(*) FROM kafka_offsets`} {
		if n := testenv.Count(t, store, q); n != 0 {
			t.Errorf("the refused run left %d %s, want none", n, what)
		}
	}

	// 4. --reset-offsets resumes from Kafka's committed offsets. Job ids
	// start again at 1 in the new schema, so a new target tells the
	// deliveries of its jobs from those of the old ones.
	watch = newDeliveryWatch(loadHold)
	tg = newTarget(t)
	tg.setBehaviour(watch.behaviour)
	cfg = writeConfig(t, scenarioConfig(testConfig{Services: svc, Topic: topic, Group: group, Schema: schema,
		TargetURL: tg.URL(), MaxAttempts: 10}))
	resumed := start(t, "run-2", svc.Env(), "run", "--config", cfg, "--reset-offsets")
	pr = startProducer(t, svc.Brokers, topic, "c", loadPartitions, loadKeys, loadBurst, loadTick)
	pr.waitProduced(t, 0, 50, 30*time.Second)
	after = append(after, pr.stop(t)...)
	run.p, run.tg, run.watch = resumed, tg, watch
	sum.add(run.verify(t, after, time.Minute))
	term(t, resumed, 30*time.Second)
	sum.report(t, "database_replaced")
}

// committedOffsets returns the group's committed offsets in Kafka.
func committedOffsets(t *testing.T, adm *kadm.Client, group, topic string) map[int32]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatalf("fetch committed offsets: %v", err)
	}
	out := map[int32]int64{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.Err == nil {
			out[o.Partition] = o.At
		}
	})
	return out
}
