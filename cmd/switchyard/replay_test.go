package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// replay re-reads a topic range into jobs without touching the consumer
// group's positions, never duplicates a job (I2), and with --rerun runs
// the replayed records' finished jobs again.
func TestReplay(t *testing.T) {
	t.Parallel()
	schema, topic := testenv.Schema(t), testenv.Topic(t, 2)
	store := testenv.Store(t, schema)
	cfg := writeConfig(t, testConfig{Topic: topic, Group: testenv.Name("g"), Schema: schema, TargetURL: "http://127.0.0.1:1/"})
	// The records carry timestamps of the test's choosing, on either side
	// of a whole second (--from-time takes seconds), rather than the
	// clock's at producing: no waiting for the clock to pass a mark.
	mark := time.Now().UTC().Truncate(time.Second).Add(-time.Minute)
	produce := func(from, to int, at time.Time) {
		var recs []*kgo.Record
		for i := from; i < to; i++ {
			recs = append(recs, &kgo.Record{Partition: int32(i % 2), Timestamp: at,
				Value: fmt.Appendf(nil, `{"id":"r%d"}`, i)})
		}
		testenv.Produce(t, topic, recs...)
	}
	produce(0, 10, mark.Add(-500*time.Millisecond))
	produce(10, 20, mark)

	replay := func(args ...string) string {
		t.Helper()
		code, out, errOut := runCLI(append([]string{"replay", "--config", cfg, "--topic", topic}, args...)...)
		if code != 0 {
			t.Fatalf("replay %v: exit %d\n%s%s", args, code, out, errOut)
		}
		return out
	}
	out := replay("--from-time", mark.Format(time.RFC3339))
	if !strings.Contains(out, "replayed 10 records") || !strings.Contains(out, "10 new jobs") {
		t.Fatalf("replay from %s: %q, want the 10 records produced after it", mark, out)
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE src_offset >= 5`); n != 10 {
		t.Fatalf("%d jobs of the second half (offsets 5..9 of each partition), want 10", n)
	}
	out = replay("--from-offset", "0")
	if !strings.Contains(out, "replayed 20 records") || !strings.Contains(out, "10 new jobs, 10 already there") {
		t.Fatalf("replay from offset 0: %q", out)
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs`); n != 20 {
		t.Fatalf("%d jobs after replaying everything twice over, want 20 (I2)", n)
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM kafka_offsets`); n != 0 {
		t.Fatalf("replay stored %d consumer positions, want none", n)
	}

	// Some jobs finished; --rerun runs partition 0's again, and only those.
	if _, err := store.Pool().Exec(context.Background(),
		`UPDATE jobs SET state = 'succeeded', finished_at = now() WHERE src_offset < 3`); err != nil {
		t.Fatal(err)
	}
	out = replay("--from-offset", "0", "--partition", "0", "--rerun")
	if !strings.Contains(out, "replayed 10 records") || !strings.Contains(out, "3 re-run") {
		t.Fatalf("replay --rerun of partition 0: %q, want its 3 finished jobs re-run", out)
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'succeeded'`); n != 3 {
		t.Fatalf("%d jobs still succeeded, want partition 1's 3", n)
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs`); n != 20 {
		t.Fatalf("%d jobs after --rerun, want 20", n)
	}
	// Each replay is in the audit log: who, on what, what it asked and did.
	var actor, target string
	var rerun, partition string
	var reran int
	if err := store.Pool().QueryRow(context.Background(), `SELECT actor, target, detail->'flags'->>'rerun', detail->'flags'->>'partition',
		(detail->>'rerun')::int FROM audit_log WHERE action = 'replay' ORDER BY id DESC LIMIT 1`).
		Scan(&actor, &target, &rerun, &partition, &reran); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(actor, "cli:") || target != "topic/"+topic || rerun != "true" || partition != "0" || reran != 3 {
		t.Errorf("the last replay's audit entry: %s on %s, rerun %s, partition %s, %d re-run; want cli:, topic/%s, true, 0, 3",
			actor, target, rerun, partition, reran, topic)
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM audit_log WHERE action = 'replay'`); n < 2 {
		t.Errorf("%d replays in the audit log, want each", n)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--from-time", "yesterday"}, "--from-time"},
		{[]string{"--from-offset", "0", "--from-time", mark.Format(time.RFC3339)}, "exactly one of"},
		{[]string{"--from-offset", "0", "--partition", "7"}, "--partition"},
		{[]string{"--from-time", mark.Format(time.RFC3339), "--to-time", mark.Add(-time.Hour).Format(time.RFC3339)}, "--to-time"},
		{[]string{"--from-offset", "5", "--to-offset", "5"}, "--to-offset"},
		{[]string{"--from-offset", "0", "--to-offset", "-5"}, "--to-offset: -5 is not an offset"},
		{[]string{"--from-offset", "0", "--partition", "-1"}, "--partition: -1 is not a partition number"},
		{[]string{"--from-offset", "0", "--to-offset", "9", "--to-time", mark.Format(time.RFC3339)}, "--to-offset and --to-time"},
	} {
		code, _, errOut := runCLI(append([]string{"replay", "--config", cfg, "--topic", topic}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("replay %v: exit %d, %q; want exit 2 naming %s", c.args, code, errOut, c.want)
		}
	}
	code, _, errOut := runCLI("replay", "--config", cfg, "--topic", "no-such-route", "--from-offset", "0")
	if code != 2 || !strings.Contains(errOut, "no route consumes") {
		t.Errorf("replay of a topic no route consumes: exit %d, %q", code, errOut)
	}
	// A route's topic that Kafka does not have (not made yet, or deleted)
	// is the operator's input to fix, not a Kafka failure.
	missing := testenv.Name("missing")
	missingCfg := writeConfig(t, testConfig{Topic: missing, Group: testenv.Name("g"), Schema: schema, TargetURL: "http://127.0.0.1:1/"})
	code, _, errOut = runCLI("replay", "--config", missingCfg, "--topic", missing, "--from-offset", "0")
	if want := fmt.Sprintf("--topic: %q does not exist in Kafka", missing); code != 2 || !strings.Contains(errOut, want) {
		t.Errorf("replay of a topic Kafka does not have: exit %d, %q; want exit 2 saying %s", code, errOut, want)
	}
}

// A replay stopped by Ctrl-C (SIGINT) or SIGTERM stops at a batch's end,
// says what it did and, for each partition it did not finish, the command
// that resumes it where it stopped; the audit log has it, incomplete.
// Without a handler the signal ended the process outright: no summary, no
// audit entry, and nothing said how far it got, so an operator repeated
// the whole range (with --rerun, running again the jobs it had re-run).
// The resumed partitions make every job, none twice, and find none there
// already: they start where the jobs end.
func TestReplayInterruptedSaysWhereToResume(t *testing.T) {
	t.Parallel()
	schema, topic := testenv.Schema(t), testenv.Topic(t, 2)
	store := testenv.Store(t, schema)
	cfg := writeConfig(t, testConfig{Topic: topic, Group: testenv.Name("g"), Schema: schema,
		TargetURL: "http://127.0.0.1:1/", Dedupe: true})
	const n = 300_000 // several seconds of replay: the signal comes well before its end
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Partition: int32(i % 2), Value: fmt.Appendf(nil, `{"id":"r%d"}`, i)}
	}
	testenv.Produce(t, topic, recs...)

	p := start(t, "replay", nil, "replay", "--config", cfg, "--topic", topic, "--from-offset", "0")
	testenv.Eventually(t, time.Minute, "the replay's first jobs", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM jobs`) > 0
	})
	p.signal(os.Interrupt)
	code := p.wait(30 * time.Second)
	out := p.out.String()
	if code != exitFailure || !strings.Contains(p.log.String(), "interrupted") {
		t.Fatalf("replay interrupted: exit %d, want %d and stderr saying it was interrupted\nstdout: %s\nstderr: %s",
			code, exitFailure, out, p.log.String())
	}
	var made int
	if _, err := fmt.Sscanf(out[strings.Index(out, ": ")+2:], "%d new jobs", &made); err != nil || made == 0 || made == n {
		t.Fatalf("the interrupted replay's summary: %q (%v)", out, err)
	}
	if got := testenv.Count(t, store, `SELECT count(*) FROM jobs`); got != made {
		t.Fatalf("%d jobs after the interrupted replay, which said it made %d", got, made)
	}
	if got := testenv.Count(t, store, `SELECT count(*) FROM audit_log WHERE action = 'replay' AND detail->>'complete' = 'false'`); got != 1 {
		t.Errorf("%d incomplete replays in the audit log, want 1", got)
	}
	var resumes [][]string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == "switchyard" && f[1] == "replay" {
			resumes = append(resumes, f[2:])
		}
	}
	if len(resumes) == 0 {
		t.Fatalf("no command to resume in %q", out)
	}
	for _, args := range resumes {
		code, out, errOut := runCLI(append([]string{"replay"}, args...)...)
		if code != exitOK || !strings.Contains(out, " 0 already there") {
			t.Errorf("resuming with %v: exit %d, %q %s; want it to start where the jobs end", args, code, out, errOut)
		}
	}
	if got := testenv.Count(t, store, `SELECT count(DISTINCT dedupe_key) FROM jobs`); got != n {
		t.Errorf("%d distinct jobs after resuming, want %d", got, n)
	}
	if got := testenv.Count(t, store, `SELECT count(*) FROM jobs`); got != n {
		t.Errorf("%d jobs after resuming, want %d (I2)", got, n)
	}
}
