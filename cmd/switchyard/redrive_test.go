package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

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
	store, cfg, ctx := cliSchema(t)
	var b pgstore.IngestBatch
	for i := range int64(2) {
		b.Jobs = append(b.Jobs, pgstore.NewJob{Route: "t", Kind: "k", Queue: "q", DedupeKey: fmt.Sprint("t/0/", i),
			Payload: []byte(`{}`), MaxAttempts: 3, Topic: "t", Offset: i})
	}
	if _, err := store.IngestCommit(ctx, b); err != nil {
		t.Fatal(err)
	}
	killOne(t, store)
	killOne(t, store)
	code, stdout, stderr := runCLI("dlq", "redrive", "--config", cfg, "--all-matching", "route=t", "--expect", "1")
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
