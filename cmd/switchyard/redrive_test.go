package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// A bulk re-drive re-drives the entries parked when it starts, once each,
// even while the target is still broken: every job it puts back dies
// again at once and is parked anew, behind the entries the re-drive has
// yet to read. It read page after page until it found none, so it went
// on re-driving its own new entries, calling the broken target over and
// over, past the count a person had confirmed, and did not end while the
// workers kept up with it.
func TestBulkRedriveLeavesEntriesParkedSinceItStarted(t *testing.T) {
	t.Parallel()
	schema, topic := testenv.Schema(t), testenv.Topic(t, 1)
	store := testenv.Store(t, schema)
	// Nothing listens on port 1: each attempt fails at once, and with one
	// attempt the job is dead at once.
	cfg := writeConfig(t, testConfig{Topic: topic, Group: testenv.Name("g"), Schema: schema,
		TargetURL: "http://127.0.0.1:1/", MaxAttempts: 1, Concurrency: 16})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 1200 // more than a page of the re-drive's reading (500)
	var b pgstore.IngestBatch
	for i := range n {
		b.Jobs = append(b.Jobs, pgstore.NewJob{Route: topic, Kind: "k", Queue: "q", DedupeKey: fmt.Sprint(topic, "/0/", i),
			Payload: []byte(`{}`), MaxAttempts: 1, Topic: topic, Offset: int64(i)})
	}
	if _, err := store.IngestCommit(ctx, b); err != nil {
		t.Fatal(err)
	}
	startRun(t, "run", cfg)
	testenv.Eventually(t, time.Minute, fmt.Sprintf("%d dead jobs parked", n), func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM dlq_entries WHERE redriven_at IS NULL`) == n
	})

	p := start(t, "redrive", nil, "dlq", "redrive", "--config", cfg, "--all-matching", "route="+topic)
	code := p.wait(time.Minute)
	if want := fmt.Sprintf("re-drove %d entries, 0 failed\n", n); code != exitOK || p.out.String() != want {
		t.Errorf("dlq redrive --all-matching: exit %d, %q; want 0, %q\n%s", code, p.out.String(), want, p.log.String())
	}
	if got := testenv.Count(t, store, `SELECT count(*) FROM audit_log WHERE action = 'redrive'`); got != n {
		t.Errorf("%d re-drives audited for %d entries parked when the re-drive started", got, n)
	}
	if got := testenv.Count(t, store, `SELECT count(*) FROM dlq_entries WHERE redriven_at IS NOT NULL`); got != n {
		t.Errorf("%d entries re-driven, want the %d parked when the re-drive started", got, n)
	}
	if strings.Contains(p.log.String(), "panic") {
		t.Errorf("the re-drive's stderr: %s", p.log.String())
	}
}

// A discard deletes its entry, so its audit entry is all that is left of
// it: it says what was dropped (reason, route, queue, job, source), not
// only dlq/ID, an id that no longer answers.
func TestDiscardAuditSaysWhatWasDropped(t *testing.T) {
	t.Parallel()
	store, cfg, ctx := cliSchema(t)
	if _, err := store.IngestCommit(ctx, pgstore.IngestBatch{Jobs: []pgstore.NewJob{{Route: "t", Kind: "k", Queue: "q",
		DedupeKey: "t/0/7", Payload: []byte(`{}`), MaxAttempts: 3, Topic: "t", Offset: 7}}}); err != nil {
		t.Fatal(err)
	}
	j, entry := killOne(t, store)
	if code, stdout, stderr := runCLI("dlq", "discard", "--config", cfg, fmt.Sprint(entry)); code != exitOK {
		t.Fatalf("dlq discard: exit %d\n%s%s", code, stdout, stderr)
	}
	var actor, detail string
	if err := store.Pool().QueryRow(ctx, `SELECT actor, detail::text FROM audit_log WHERE action = 'discard' AND target = $1`,
		fmt.Sprintf("dlq/%d", entry)).Scan(&actor, &detail); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`{"queue": "q", "route": "t", "job_id": %d, "reason": "permanent", "source": "t/0/7"}`, j.ID)
	if !strings.HasPrefix(actor, "cli:") || detail != want {
		t.Errorf("the discard's audit entry: %s, %s; want cli:…, %s", actor, detail, want)
	}
}

// dlq redrive --all-matching --expect N re-drives only if N entries match
// now, as the admin API's expect does: the count a person confirmed (from
// dlq list, or a dry count) is checked against the entries the re-drive
// would take, and a different number re-drives nothing. Without it a
// filter that matched more than meant re-drove them all unasked.
func TestCLIBulkRedriveChecksTheConfirmedCount(t *testing.T) {
	t.Parallel()
	store, cfg, _ := cliSchema(t)
	ingestJobs(t, store, 2)
	killOne(t, store)
	killOne(t, store)
	// --expect's default (-1) stands for "not given": given, it is no
	// count, and would have re-driven without checking one.
	code, stdout, stderr := runCLI("dlq", "redrive", "--config", cfg, "--all-matching", "route=t", "--expect", "-1")
	if want := "--expect: -1 is not a count"; code != exitUsage || !strings.Contains(stderr, want) {
		t.Errorf("dlq redrive --expect -1: exit %d, want %d and %q\nstdout: %s\nstderr: %s", code, exitUsage, want, stdout, stderr)
	}
	code, stdout, stderr = runCLI("dlq", "redrive", "--config", cfg, "--all-matching", "route=t", "--expect", "1")
	if want := "2 entries match now, not 1: nothing re-driven"; code != exitFailure || !strings.Contains(stderr, want) {
		t.Errorf("dlq redrive --expect 1 of 2: exit %d, want %d and %q\nstdout: %s\nstderr: %s", code, exitFailure, want, stdout, stderr)
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM dlq_entries WHERE redriven_at IS NULL`); n != 2 {
		t.Fatalf("%d entries parked after a refused re-drive, want 2", n)
	}
	code, stdout, stderr = runCLI("dlq", "redrive", "--config", cfg, "--all-matching", "route=t", "--expect", "2")
	if code != exitOK || stdout != "re-drove 2 entries, 0 failed\n" {
		t.Errorf("dlq redrive --expect 2 of 2: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if code, _, stderr := runCLI("dlq", "redrive", "--config", cfg, "--expect", "2", "7"); code != exitUsage || !strings.Contains(stderr, "--expect") {
		t.Errorf("dlq redrive ID --expect: exit %d, %s; want a usage error naming --expect", code, stderr)
	}
}

// ingestJobs stores n jobs of route t, queue q, from offsets 0..n-1 of
// topic t, as ingest stores them.
func ingestJobs(t *testing.T, store *pgstore.Store, n int) {
	t.Helper()
	var b pgstore.IngestBatch
	for i := range int64(n) {
		b.Jobs = append(b.Jobs, pgstore.NewJob{Route: "t", Kind: "k", Queue: "q", DedupeKey: fmt.Sprint("t/0/", i),
			Payload: []byte(`{}`), MaxAttempts: 3, Topic: "t", Offset: i})
	}
	if _, err := store.IngestCommit(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

// parkPoison parks n undecodable records of route t, queue q, at offsets
// 0..n-1 of topic t, as ingest parks them.
func parkPoison(t *testing.T, store *pgstore.Store, n int) {
	t.Helper()
	var b pgstore.IngestBatch
	for i := range n {
		b.Poison = append(b.Poison, pgstore.Poison{Reason: "decode", Route: "t", Queue: "q", Error: "not JSON",
			Payload: []byte("x"), Topic: "t", Offset: int64(i)})
	}
	if _, err := store.IngestCommit(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

// dlq discard --all-matching drops entries for good, so it takes the
// count a person confirmed, and --dry-run gives it: the count and the
// command. It discards the entries parked when it starts and no other,
// each audited.
func TestCLIBulkDiscard(t *testing.T) {
	t.Parallel()
	store, cfg, _ := cliSchema(t)
	parkPoison(t, store, 3)
	code, stdout, stderr := runCLI("dlq", "discard", "--config", cfg, "--all-matching", "reason=decode")
	if code != exitUsage || stdout != "" || !strings.Contains(stderr, "--expect N") {
		t.Errorf("dlq discard --all-matching without --expect: exit %d, %q, %s; want a usage error asking for --expect", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI("dlq", "discard", "--config", cfg, "--all-matching", "reason=decode", "--dry-run")
	want := fmt.Sprintf("parked entries matching reason=decode now: 3; to discard them:\n  switchyard dlq discard --config %s --all-matching reason=decode --expect 3\n", cfg)
	if code != exitOK || stdout != want {
		t.Errorf("--dry-run: exit %d\n%q\nwant\n%q\n%s", code, stdout, want, stderr)
	}
	code, stdout, stderr = runCLI("dlq", "discard", "--config", cfg, "--all-matching", "reason=decode", "--dry-run", "--json")
	if want := fmt.Sprintf(`{"command":"switchyard dlq discard --config %s --all-matching reason=decode --expect 3","matching":3}`, cfg); code != exitOK ||
		compactJSON(t, stdout) != want {
		t.Errorf("--dry-run --json: exit %d\n%s\nwant %s\n%s", code, stdout, want, stderr)
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM dlq_entries`); n != 3 {
		t.Fatalf("%d entries after a dry run, want 3", n)
	}
	code, stdout, stderr = runCLI("dlq", "discard", "--config", cfg, "--all-matching", "reason=decode", "--expect", "2")
	if want := "3 entries match now, not 2: nothing discarded"; code != exitFailure || !strings.Contains(stderr, want) {
		t.Errorf("--expect 2 of 3: exit %d, %q; want %q", code, stdout+stderr, want)
	}
	code, stdout, stderr = runCLI("dlq", "discard", "--config", cfg, "--all-matching", "reason=decode", "--expect", "3", "--json")
	if want := `{"complete":true,"discarded":3,"failed":[],"matching":3}`; code != exitOK || compactJSON(t, stdout) != want {
		t.Errorf("--expect 3 of 3: exit %d\nstdout: %s\nwant %s\nstderr: %s", code, stdout, want, stderr)
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM dlq_entries`); n != 0 {
		t.Errorf("%d entries left after discarding all 3", n)
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM audit_log WHERE action = 'discard' AND actor LIKE 'cli:%'`); n != 3 {
		t.Errorf("%d discards audited, want 3", n)
	}
	for _, args := range [][]string{{"--dry-run", "--expect", "3"}, {"--dry-run", "7"}, {"--expect", "1", "7"}} {
		if code, _, stderr := runCLI(append([]string{"dlq", "discard", "--config", cfg, "--all-matching", "reason=decode"}, args...)...); code != exitUsage {
			t.Errorf("dlq discard --all-matching %v: exit %d, want a usage error\n%s", args, code, stderr)
		}
	}
}

// Ctrl-C stops a bulk action between two chunks: what it did stays done,
// the rest stay parked, and it says how many it took and prints the
// command that takes the rest, which does. The process used to die at
// once, saying nothing of how far it had got.
func TestCLIBulkActionInterrupted(t *testing.T) {
	t.Parallel()
	store, cfg, _ := cliSchema(t)
	const n = 3000
	parkPoison(t, store, n)
	// A transaction holding the 1,501st entry holds the discard in its
	// sixteenth chunk until the signal has come: the chunk under way
	// completes, and the action stops before the next one.
	ctx := context.Background()
	tx, err := store.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op once rolled back
	// (By id: FOR UPDATE under an OFFSET locks the rows it passes over too.)
	if err := tx.QueryRow(ctx, `SELECT id FROM dlq_entries
		WHERE id = (SELECT id FROM dlq_entries ORDER BY id OFFSET 1500 LIMIT 1) FOR UPDATE`).Scan(new(int64)); err != nil {
		t.Fatal(err)
	}
	p := start(t, "discard", nil, "dlq", "discard", "--config", cfg, "--all-matching", "route=t", "--expect", fmt.Sprint(n))
	testenv.WaitBlockedBy(t, store, tx, "the discard to wait for the held entry")
	p.signal(os.Interrupt)
	time.Sleep(500 * time.Millisecond) // for the signal to reach the action's stop
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(30 * time.Second); code != exitFailure {
		t.Fatalf("dlq discard interrupted: exit %d, want %d\n%s%s", code, exitFailure, p.out.String(), p.log.String())
	}
	done := testenv.Count(t, store, `SELECT count(*) FROM audit_log WHERE action = 'discard'`)
	left := testenv.Count(t, store, `SELECT count(*) FROM dlq_entries`)
	if done != 1600 || left != n-1600 {
		t.Fatalf("after Ctrl-C: %d discarded and %d parked, want the sixteen chunks up to the held entry's, 1,600, and the rest", done, left)
	}
	m := regexp.MustCompile(`(?m)^interrupted: discarded (\d+) of 3000 entries matching, 0 failed; the other (\d+) are as they were\. To discard them:\n  (switchyard dlq discard .*)\n$`).
		FindStringSubmatch(p.out.String())
	if m == nil || m[1] != fmt.Sprint(done) || m[2] != fmt.Sprint(left) {
		t.Fatalf("what dlq discard said when interrupted (%d discarded, %d left):\n%s", done, left, p.out.String())
	}
	args := strings.Fields(m[3])
	if want := []string{"switchyard", "dlq", "discard", "--config", cfg, "--all-matching", "route=t", "--expect", fmt.Sprint(left)}; !slices.Equal(args, want) {
		t.Fatalf("the command for the rest: %q, want %q", args, want)
	}
	if code, stdout, stderr := runCLI(args[1:]...); code != exitOK || stdout != fmt.Sprintf("discarded %d entries, 0 failed\n", left) {
		t.Errorf("the command for the rest: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM dlq_entries`); n != 0 {
		t.Errorf("%d entries parked after the command for the rest", n)
	}
}

// compactJSON is a command's --json output on one line, to compare whole.
func compactJSON(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		t.Fatalf("not JSON (%v): %q", err, s)
	}
	return b.String()
}

// jobs cancel --all-matching cancels every unfinished job the filter
// matches, at the count a person confirmed (required: nothing undoes a
// cancel), and leaves finished jobs and the jobs it does not match.
func TestCLIBulkCancel(t *testing.T) {
	t.Parallel()
	store, cfg, _ := cliSchema(t)
	ingestJobs(t, store, 4)
	killOne(t, store)               // dead: finished
	testenv.ClaimOne(t, store, "q") // running
	if code, _, stderr := runCLI("jobs", "cancel", "--config", cfg, "--all-matching", "queue=q"); code != exitUsage || !strings.Contains(stderr, "--expect N") {
		t.Errorf("jobs cancel --all-matching without --expect: exit %d, %s; want a usage error asking for --expect", code, stderr)
	}
	if code, _, stderr := runCLI("jobs", "cancel", "--config", cfg, "--all-matching", "state=dead", "--dry-run"); code != exitUsage ||
		!strings.Contains(stderr, `"dead" is not a state a job leaves on its own`) {
		t.Errorf("jobs cancel --all-matching state=dead: exit %d, %s; want a usage error naming the state", code, stderr)
	}
	code, stdout, stderr := runCLI("jobs", "cancel", "--config", cfg, "--all-matching", "queue=q", "--dry-run")
	want := fmt.Sprintf("unfinished jobs matching queue=q now: 3; to cancel them:\n  switchyard jobs cancel --config %s --all-matching queue=q --expect 3\n", cfg)
	if code != exitOK || stdout != want {
		t.Errorf("--dry-run: exit %d\n%q\nwant\n%q\n%s", code, stdout, want, stderr)
	}
	code, stdout, stderr = runCLI("jobs", "cancel", "--config", cfg, "--all-matching", "queue=q,state=queued", "--expect", "2")
	if code != exitOK || stdout != "cancelled 2 jobs, 0 failed\n" {
		t.Errorf("--expect 2: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	got := map[string]int{}
	for _, st := range []string{"queued", "running", "dead", "cancelled"} {
		got[st] = testenv.Count(t, store, `SELECT count(*) FROM jobs WHERE state = $1`, st)
	}
	if want := map[string]int{"queued": 0, "running": 1, "dead": 1, "cancelled": 2}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("jobs by state after the cancel: %v, want %v", got, want)
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM audit_log WHERE action = 'cancel' AND actor LIKE 'cli:%'`); n != 2 {
		t.Errorf("%d cancels audited, want 2", n)
	}
}

// A bulk re-drive of lanes' dead jobs keeps each lane's order across the
// fleet (I3): two processes run an ordered route of six keys whose target
// first answers 400, so that every job dies in turn and its lane moves on
// (on_dead: continue); once the target answers 200, one request re-drives
// all 180 entries, in chunks that put each lane's dead jobs back waiting
// together. Every job then runs once more, each key's in offset order and
// never two of a key at once.
func TestBulkRedriveOfLanesKeepsTheirOrderAcrossProcesses(t *testing.T) {
	t.Parallel()
	schema, topic := testenv.Schema(t), testenv.Topic(t, 1)
	store := testenv.Store(t, schema)
	var fixed atomic.Bool
	var spans spanLog
	tg := newTarget(t)
	tg.setBehaviour(spans.wrap(func(r *http.Request, c call) int {
		if !fixed.Load() {
			return http.StatusBadRequest // permanent: dead at once
		}
		time.Sleep(5 * time.Millisecond) // long enough for two calls of a key to meet
		return 0
	}))
	cfg := writeConfig(t, testConfig{Group: testenv.Name("g"), Schema: schema, Listen: "127.0.0.1:0", Body: fmt.Sprintf(`queues:
  q: {concurrency: 4, lease: 60s, poll_interval: 100ms}
routes:
  - {topic: %q, kind: k, queue: q, dedupe: {field: id}, ordered: true, target: {http: {url: %q, timeout: 30s}}}
`, topic, tg.URL())})
	startRun(t, "run-a", cfg)
	b := startRun(t, "run-b", cfg)
	const keys, each = 6, 30
	recs := records(0, keys*each)
	for i, r := range recs {
		r.Key, r.Partition = fmt.Appendf(nil, "k%d", i%keys), 0
	}
	testenv.Produce(t, topic, recs...)
	testenv.Eventually(t, 2*time.Minute, "every job dead and parked", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM dlq_entries WHERE redriven_at IS NULL`) == keys*each
	})
	fixed.Store(true)
	redriveAllInKeysOrder(t, b, store, &spans, topic, keys, each)
}

// A bulk re-drive of parked records, after the route that parked them was
// fixed, makes each record's job once, and each key's jobs run in offset
// order across the fleet (I3): one process, whose ordered route reads the
// key from a field the records do not have, parks 180 records of six keys
// (missing_field); two processes with the field fixed then run what one
// request re-drives, the records decoded in chunks and stored a chunk a
// transaction.
func TestBulkRedriveOfRecordsKeepsTheirKeysOrderAcrossProcesses(t *testing.T) {
	t.Parallel()
	parkThenRedriveInKeysOrder(t, func(fixed bool) string {
		if fixed {
			return "key: {field: customer}"
		}
		return "key: {field: cust}"
	}, func(i int, key string) []byte {
		return fmt.Appendf(nil, `{"id":"r%d","customer":%q}`, i, key)
	}, `reason = 'missing_field'`)
}

// The same for records too large for the route, which their entries keep
// only in part: re-driven with the limit raised, a chunk's records are
// read again from Kafka together and stored 4 MiB at a time (two
// transactions a chunk here), and every key's calls still come in offset
// order, never two at once, across two processes.
func TestBulkRedriveOfRecordsKeptInPartKeepsTheirKeysOrderAcrossProcesses(t *testing.T) {
	t.Parallel()
	store := parkThenRedriveInKeysOrder(t, func(fixed bool) string {
		limit := 50_000
		if fixed {
			limit = 1 << 20
		}
		return fmt.Sprintf("key: {field: customer}, max_record_bytes: %d, dlq_max_bytes: 1000", limit)
	}, func(i int, key string) []byte {
		return fmt.Appendf(nil, `{"id":"r%d","customer":%q,"pad":%q}`, i, key, strings.Repeat("x", 60_000))
	}, `reason = 'too_large' AND truncated`)
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE octet_length(payload) > 60000`); n != 180 {
		t.Errorf("%d jobs carry their whole record, want 180", n)
	}
}

// parkThenRedriveInKeysOrder runs a process whose ordered route (its
// settings besides topic, kind, queue and target: route(false)) parks
// 180 records of six keys (value(i, key)) as where says, stops it, and
// re-drives them by one request to one of two processes whose route is
// route(true) (redriveAllInKeysOrder). All three share one consumer
// group: the fixed processes resume after the parked records, so that
// only the re-drive makes their jobs.
func parkThenRedriveInKeysOrder(t *testing.T, route func(fixed bool) string, value func(i int, key string) []byte, where string) *pgstore.Store {
	t.Helper()
	schema, topic := testenv.Schema(t), testenv.Topic(t, 1)
	store := testenv.Store(t, schema)
	var spans spanLog
	tg := newTarget(t)
	tg.setBehaviour(spans.wrap(func(r *http.Request, c call) int {
		time.Sleep(5 * time.Millisecond) // long enough for two calls of a key to meet
		return 0
	}))
	group := testenv.Name("g")
	config := func(fixed bool) string {
		return writeConfig(t, testConfig{Group: group, Schema: schema, Listen: "127.0.0.1:0", Body: fmt.Sprintf(`queues:
  q: {concurrency: 4, lease: 60s, poll_interval: 100ms}
routes:
  - {topic: %q, kind: k, queue: q, ordered: true, %s, target: {http: {url: %q, timeout: 30s}}}
`, topic, route(fixed), tg.URL())})
	}
	broken := startRun(t, "run-broken", config(false))
	const keys, each = 6, 30
	recs := make([]*kgo.Record, keys*each)
	for i := range recs {
		recs[i] = &kgo.Record{Value: value(i, fmt.Sprintf("k%d", i%keys))}
	}
	testenv.Produce(t, topic, recs...)
	testenv.Eventually(t, 2*time.Minute, "every record parked", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM dlq_entries WHERE redriven_at IS NULL AND `+where) == keys*each
	})
	broken.signal(syscall.SIGTERM)
	broken.wait(30 * time.Second)

	fixed := config(true)
	startRun(t, "run-a", fixed)
	b := startRun(t, "run-b", fixed)
	redriveAllInKeysOrder(t, b, store, &spans, topic, keys, each)
	return store
}

// redriveAllInKeysOrder re-drives, by one request to process p, the
// keys × each entries parked for route, waits for every job to succeed,
// and checks the target's calls opened since the request (I3): each key
// had each calls, in offset order, never two at once.
func redriveAllInKeysOrder(t *testing.T, p *proc, store *pgstore.Store, spans *spanLog, route string, keys, each int) {
	t.Helper()
	since := time.Now()
	code, body := api(t, adminAddr(t, p), "POST", fmt.Sprintf("/v1/dlq/redrive?route=%s&expect=%d", route, keys*each))
	if code != http.StatusOK || compactJSON(t, body) != fmt.Sprintf(`{"failed":[],"redriven":%d}`, keys*each) {
		t.Fatalf("bulk re-drive: %d %s", code, body)
	}
	testenv.Eventually(t, 2*time.Minute, "every re-driven job to succeed", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'succeeded'`) == keys*each
	})
	byKey := map[string][]span{}
	for _, s := range spans.all() {
		if s.Open.After(since) {
			byKey[s.Key] = append(byKey[s.Key], s)
		}
	}
	if _, violations := overlapCheck(byKey); len(violations) > 0 {
		t.Errorf("I3: %d pairs of a key's calls open at once, the first: %s", len(violations), violations[0])
	}
	if len(byKey) != keys {
		t.Errorf("calls of %d keys, want %d", len(byKey), keys)
	}
	for key, ss := range byKey {
		slices.SortFunc(ss, func(x, y span) int { return x.Open.Compare(y.Open) })
		last := int64(-1)
		for _, s := range ss {
			off, err := strconv.ParseInt(s.Source[strings.LastIndexByte(s.Source, '/')+1:], 10, 64)
			if err != nil || off <= last {
				t.Fatalf("I3: key %s: call %v after the call of offset %d", key, s, last)
			}
			last = off
		}
		if len(ss) != each {
			t.Errorf("key %s: %d calls, want %d", key, len(ss), each)
		}
	}
}

// Two bulk re-drives of the same parked records, each asked of its own
// process at once (two operators, or a client's retry through another
// replica), take each entry once between them: every record becomes one
// job, called once, and an entry the other took first is that one's
// failure, "re-driven already". The two processes' chunks lock the same
// entries in the same order, so neither waits for the other for long.
func TestConcurrentBulkRedrivesOfRecordsTakeEachOnce(t *testing.T) {
	t.Parallel()
	schema, topic := testenv.Schema(t), testenv.Topic(t, 1)
	store := testenv.Store(t, schema)
	tg := newTarget(t)
	cfg := writeConfig(t, testConfig{Group: testenv.Name("g"), Schema: schema, Listen: "127.0.0.1:0", Body: fmt.Sprintf(`queues:
  q: {concurrency: 8, lease: 60s, poll_interval: 100ms}
routes:
  - {topic: %q, kind: k, queue: q, dedupe: {field: id}, target: {http: {url: %q, timeout: 30s}}}
`, topic, tg.URL())})
	a, b := startRun(t, "run-a", cfg), startRun(t, "run-b", cfg)
	const n = 5000
	var batch pgstore.IngestBatch
	for i := range n {
		batch.Poison = append(batch.Poison, pgstore.Poison{Reason: "decode", Route: topic, Queue: "q", Error: "bad",
			Payload: fmt.Appendf(nil, `{"id":"r%d"}`, i), HeaderKeys: []string{}, HeaderVals: [][]byte{}, Topic: topic, Offset: int64(i)})
	}
	if _, err := store.IngestCommit(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		code int
		body string
	}
	answers := make([]answer, 2)
	var asks sync.WaitGroup
	for i, p := range []*proc{a, b} {
		asks.Go(func() {
			answers[i].code, answers[i].body = api(t, adminAddr(t, p), "POST", fmt.Sprintf("/v1/dlq/redrive?route=%s&expect=%d", topic, n))
		})
	}
	asks.Wait()
	redriven, each := 0, []int{}
	for _, ans := range answers {
		var res struct {
			Redriven int
			Failed   []struct{ Error string }
		}
		switch {
		case ans.code == http.StatusConflict: // the other had taken every entry before this one counted them
			continue
		case ans.code != http.StatusOK || json.Unmarshal([]byte(ans.body), &res) != nil:
			t.Fatalf("bulk re-drive: %d %s", ans.code, ans.body)
		}
		for _, f := range res.Failed {
			if !strings.Contains(f.Error, "re-driven already") {
				t.Fatalf("bulk re-drive failed otherwise than for the other's: %s", f.Error)
			}
		}
		redriven += res.Redriven
		each = append(each, res.Redriven)
	}
	if redriven != n {
		t.Fatalf("the two re-drove %d entries between them (%+v), want each of %d once", redriven, answers, n)
	}
	testenv.Eventually(t, 2*time.Minute, "every record's job to succeed", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'succeeded'`) == n
	})
	calls := map[int64]int{}
	for _, c := range tg.received() {
		calls[c.JobID]++
	}
	if len(calls) != n {
		t.Errorf("the target was called for %d jobs, want %d", len(calls), n)
	}
	for job, k := range calls {
		if k != 1 {
			t.Errorf("job %d called %d times", job, k)
		}
	}
	if got := testenv.Count(t, store, `SELECT count(*) FROM audit_log WHERE action = 'redrive'`); got != n {
		t.Errorf("%d re-drives audited, want %d", got, n)
	}
	t.Logf("re-driven by each: %v (answers %d and %d)", each, answers[0].code, answers[1].code)
}
