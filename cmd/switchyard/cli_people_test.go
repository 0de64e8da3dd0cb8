package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/ingest"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
	"github.com/switchyard-dev/switchyard/jobstate"
)

// The text for people: tables, the next page's command, a DLQ entry's
// payload decoded, and the same as JSON with --json.
func TestCLIPagesAndPayloads(t *testing.T) {
	t.Parallel()
	store, cfg, ctx := cliSchema(t)
	var batch pgstore.IngestBatch
	for i := range 5 {
		batch.Jobs = append(batch.Jobs, pgstore.NewJob{Route: "t", Kind: "k", Queue: "q", Key: fmt.Sprintf("c%d", i),
			DedupeKey: fmt.Sprintf("t/0/%d", i), Payload: []byte(`{}`), MaxAttempts: 3, Topic: "t", Offset: int64(i)})
	}
	payloads := [][]byte{[]byte(`{"customer":{"id":"c42"},"total":7}`), []byte("plain words"), {0x00, 0xff, 'h', 'i'}}
	for i, p := range payloads {
		batch.Poison = append(batch.Poison, pgstore.Poison{Reason: "decode", Route: "t", Queue: "q", Error: "not JSON",
			Payload: p, HeaderKeys: []string{"event-type"}, HeaderVals: [][]byte{[]byte("order.created")},
			RecordKey: []byte("c42"), Topic: "t", Offset: int64(10 + i)})
	}
	if _, err := store.IngestCommit(ctx, batch); err != nil {
		t.Fatal(err)
	}
	var first, entry int64
	if err := store.Pool().QueryRow(ctx, `SELECT min(id) FROM all_jobs`).Scan(&first); err != nil {
		t.Fatal(err)
	}
	if err := store.Pool().QueryRow(ctx, `SELECT min(id) FROM dlq_entries`).Scan(&entry); err != nil {
		t.Fatal(err)
	}

	// A page of 2 of 5 jobs: a table, and the command of the next page.
	code, stdout, stderr := runCLI("jobs", "list", "--config", cfg, "--queue", "q", "--limit", "2")
	hint := fmt.Sprintf("more: switchyard jobs list --config %s --limit 2 --queue q --after %d", cfg, first+1)
	if code != exitOK || !strings.Contains(stderr, hint) {
		t.Fatalf("jobs list --limit 2: exit %d, want the hint %q\nstdout: %s\nstderr: %s", code, hint, stdout, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID ") || !strings.Contains(lines[0], "STATE") ||
		!strings.Contains(lines[1], "queued") || !strings.Contains(lines[1], "just now") {
		t.Fatalf("jobs list --limit 2: want a header and 2 rows with the age, got\n%s", stdout)
	}
	// Columns line up: the STATE header and each row's state start at the
	// same place.
	at := strings.Index(lines[0], "STATE")
	for _, l := range lines[1:] {
		if strings.Index(l, "queued") != at {
			t.Fatalf("jobs list: columns not aligned:\n%s", stdout)
		}
	}
	// The hint's command reads the rest, and says nothing more.
	code, stdout, stderr = runCLI("jobs", "list", "--config", cfg, "--queue", "q", "--limit", "2", "--after", fmt.Sprint(first+3))
	if code != exitOK || strings.Contains(stderr, "more:") || strings.Count(stdout, "queued") != 1 {
		t.Fatalf("the last page: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	// A page exactly as long as what is left has no next page.
	if code, stdout, stderr = runCLI("jobs", "list", "--config", cfg, "--limit", "5"); code != exitOK || strings.Contains(stderr, "more:") || strings.Count(stdout, "queued") != 5 {
		t.Fatalf("jobs list --limit 5 of 5: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	// --json is the API's shape, with the hint on stderr only.
	code, stdout, stderr = runCLI("jobs", "list", "--config", cfg, "--limit", "2", "--json")
	var page struct {
		Items []pgstore.JobRow `json:"items"`
		Next  string           `json:"next"`
	}
	if err := json.Unmarshal([]byte(stdout), &page); code != exitOK || err != nil || len(page.Items) != 2 ||
		page.Next != fmt.Sprint(first+1) || !strings.Contains(stderr, "--json") || !strings.Contains(stderr, "more:") {
		t.Fatalf("jobs list --json: exit %d %v\nstdout: %s\nstderr: %s", code, err, stdout, stderr)
	}

	code, stdout, stderr = runCLI("dlq", "list", "--config", cfg, "--limit", "1", "--reason", "decode")
	if code != exitOK || !strings.Contains(stdout, "REASON") || !strings.Contains(stdout, "t/0/10") ||
		!strings.Contains(stderr, fmt.Sprintf("more: switchyard dlq list --config %s --limit 1 --reason decode --after %d", cfg, entry)) {
		t.Fatalf("dlq list --limit 1: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	// dlq show decodes the payload: JSON pretty, text as it is, else hex.
	for i, want := range [][]string{
		{"payload (JSON, 35 bytes):", "\n  {\n    \"customer\": {\n      \"id\": \"c42\"\n    },", "event-type: order.created", "record key: c42"},
		{"payload (text, 11 bytes):", "\n  plain words"},
		{"payload (binary, 4 bytes):", "00 ff 68 69", "|..hi|"},
	} {
		id := fmt.Sprint(entry + int64(i))
		code, stdout, stderr := runCLI("dlq", "show", "--config", cfg, id)
		for _, w := range append(want, "reason:", "decode", "source:", "t/0/1") {
			if code != exitOK || !strings.Contains(stdout, w) {
				t.Errorf("dlq show %s: exit %d, no %q in\n%s%s", id, code, w, stdout, stderr)
			}
		}
	}
	code, stdout, _ = runCLI("dlq", "show", "--config", cfg, "--json", fmt.Sprint(entry))
	if code != exitOK || !strings.Contains(stdout, `"payload_base64": "eyJjdXN0b21lciI6`) {
		t.Errorf("dlq show --json: exit %d\n%s", code, stdout)
	}
	// A flag after the id counts too.
	code, stdout, _ = runCLI("jobs", "get", "--config", cfg, fmt.Sprint(first), "--json")
	if code != exitOK || !strings.Contains(stdout, `"state": "queued"`) {
		t.Errorf("jobs get ID --json: exit %d\n%s", code, stdout)
	}
	code, stdout, _ = runCLI("jobs", "get", "--config", cfg, fmt.Sprint(first))
	if code != exitOK || !strings.Contains(stdout, "state:") || !strings.Contains(stdout, "attempts:") || !strings.Contains(stdout, "0 of 3") {
		t.Errorf("jobs get: exit %d\n%s", code, stdout)
	}
	code, stdout, _ = runCLI("queues", "list", "--config", cfg)
	if code != exitOK || !strings.Contains(stdout, "QUEUE") || !regexpLine(stdout, `^q\s+0\s+5\s`) {
		t.Errorf("queues list: exit %d, want q with 5 queued\n%s", code, stdout)
	}
}

// An environment variable that overrides a value the file set is noted,
// by name, never by value; one that repeats the file's value is not.
func TestCLIEnvOverrideNote(t *testing.T) {
	t.Parallel()
	schema := testenv.Schema(t)
	cfg := writeConfig(t, testConfig{Topic: "t", Group: testenv.Name("g"), Schema: schema, TargetURL: "http://127.0.0.1:1/"})
	url := testenv.DatabaseURL(t)
	other := url + "&application_name=switchyard-cli-test"
	if !strings.Contains(url, "?") {
		other = url + "?application_name=switchyard-cli-test"
	}
	_, stderr, code := runCmd(t, time.Minute, []string{"SWITCHYARD_DATABASE_URL=" + other}, "queues", "list", "--config", cfg)
	if code != exitOK || !strings.Contains(stderr, "note: SWITCHYARD_DATABASE_URL overrides postgres.url set in "+cfg) ||
		strings.Contains(stderr, "switchyard-cli-test") {
		t.Fatalf("queues list with another SWITCHYARD_DATABASE_URL: exit %d, stderr %q", code, stderr)
	}
	_, stderr, code = runCmd(t, time.Minute, []string{"SWITCHYARD_DATABASE_URL=" + url}, "queues", "list", "--config", cfg)
	if code != exitOK || strings.Contains(stderr, "note:") {
		t.Fatalf("queues list with the file's own URL in the environment: exit %d, stderr %q", code, stderr)
	}
}

// regexpLine reports whether a line of s matches the pattern.
func regexpLine(s, pattern string) bool {
	return regexp.MustCompile("(?m)" + pattern).MatchString(s)
}

// produce writes a record no route reads, and warns that none does.
func TestCLIProduceWarns(t *testing.T) {
	t.Parallel()
	read, unread := testenv.Topic(t, 1), testenv.Topic(t, 1)
	cfg := writeConfig(t, testConfig{Topic: read, Group: testenv.Name("g"), Schema: testenv.Schema(t), TargetURL: "http://127.0.0.1:1/"})
	code, stdout, stderr := runCLI("produce", "--config", cfg, "--topic", unread, `{"id":1}`)
	if code != exitOK || !strings.Contains(stdout, "produced "+unread+"/0/0") ||
		!strings.Contains(stderr, fmt.Sprintf("warning: no route of %s reads topic %q", cfg, unread)) ||
		!strings.Contains(stderr, "Topics read: "+read) {
		t.Fatalf("produce to a topic no route reads: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI("produce", "--config", cfg, "--topic", read, "--json", `{"id":1}`)
	if code != exitOK || strings.Contains(stderr, "warning") || !strings.Contains(stdout, `"offset": 0`) {
		t.Fatalf("produce to a topic a route reads: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
}

// The progress line of a replay on a terminal: the share of the range,
// records/s and the time left, redrawn in place.
func TestReplayProgressLine(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	start := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	clock := start.Add(2 * time.Second)
	p := &progressLine{w: &b, started: start, now: func() time.Time { return clock }}
	update := func(r ingest.ReplayProgress) {
		p.draw(func(elapsed time.Duration) string { return replayLine("orders", r, elapsed) })
	}
	update(ingest.ReplayProgress{ReplaySummary: ingest.ReplaySummary{Records: 20_000}, Done: 20_000, Total: 80_000})
	clock = clock.Add(100 * time.Millisecond)
	update(ingest.ReplayProgress{Done: 30_000, Total: 80_000}) // within 250 ms: not drawn
	p.clear()
	want := "\rreplaying orders: 25% of the range (20,000 of 80,000 offsets), 20,000 records read, 10,000 records/s, about 6s left\x1b[K\r\x1b[K"
	if b.String() != want {
		t.Fatalf("progress:\n%q\nwant\n%q", b.String(), want)
	}
}

// Text from records and targets reaches a table or a detail view with
// its control characters and bidirectional overrides escaped: an escape
// sequence in a key or a target's error must not act on the operator's
// terminal (recolor it, retitle it, clear it).
func TestCLIEscapesWhatATerminalWouldActOn(t *testing.T) {
	t.Parallel()
	store, cfg, ctx := cliSchema(t)
	const key, bad = "\x1b[31mRED\x1b]0;pwned\x07", "\x1b[2J\u202ecleared"
	if _, err := store.IngestCommit(ctx, pgstore.IngestBatch{Jobs: []pgstore.NewJob{{Route: "t", Kind: "k", Queue: "q",
		Key: key, DedupeKey: "t/0/0", Payload: []byte(`{}`), MaxAttempts: 3, Topic: "t"}}}); err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := store.Pool().QueryRow(ctx, `UPDATE jobs SET last_error = $1 RETURNING id`, bad).Scan(&id); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"jobs", "list"}, {"jobs", "get", fmt.Sprint(id)}} {
		code, stdout, stderr := runCLI(append(args, "--config", cfg)...)
		if code != exitOK || strings.ContainsAny(stdout+stderr, "\x1b\x07\u202e") || !strings.Contains(stdout, `\x1b[31mRED\x1b]0;pwned\x07`) {
			t.Errorf("%s: exit %d, want the key escaped and no control character\nstdout: %q\nstderr: %q", strings.Join(args, " "), code, stdout, stderr)
		}
	}
	if _, stdout, _ := runCLI("jobs", "get", "--config", cfg, fmt.Sprint(id)); !strings.Contains(stdout, `\x1b[2J\u202ecleared`) {
		t.Errorf("jobs get: want the error escaped\n%q", stdout)
	}
}

// jobs retry runs a job waiting out its backoff now, as the API's retry
// does, audited as the CLI's user; a job that is not waiting is exit 1.
func TestCLIRetryNow(t *testing.T) {
	t.Parallel()
	store, cfg, ctx := cliSchema(t)
	if _, err := store.IngestCommit(ctx, pgstore.IngestBatch{Jobs: []pgstore.NewJob{{Route: "t", Kind: "k", Queue: "q",
		DedupeKey: "t/0/0", Payload: []byte(`{}`), MaxAttempts: 3, Topic: "t"}}}); err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := store.Pool().QueryRow(ctx, `UPDATE jobs SET state = 'retrying', attempts = 1, scheduled_at = now() + interval '1 hour'
		RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI("jobs", "retry", "--config", cfg, fmt.Sprint(id))
	if code != exitOK || !strings.Contains(stdout, fmt.Sprintf("job %d runs now", id)) {
		t.Fatalf("jobs retry: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	var due bool
	if err := store.Pool().QueryRow(ctx, `SELECT state = 'retrying' AND scheduled_at <= now() FROM jobs WHERE id = $1`, id).Scan(&due); err != nil || !due {
		t.Fatalf("the job is not runnable now (%v)", err)
	}
	if n := testenv.Count(t, store, fmt.Sprintf(`SELECT count(*) FROM audit_log WHERE action = 'retry' AND target = 'job/%d' AND actor LIKE 'cli:%%'`, id)); n != 1 {
		t.Errorf("%d audit entries of the retry by the CLI, want 1", n)
	}
	code, _, stderr = runCLI("jobs", "retry", "--config", cfg, fmt.Sprint(id))
	if code != exitFailure || !strings.Contains(stderr, pgstore.NotWaiting(id)) {
		t.Errorf("jobs retry of a queued job: exit %d, stderr %s", code, stderr)
	}
}

// jobs cancel of a job that finished fails (exit 1) saying how it
// ended, with the words the admin API's 409 uses: the store's.
func TestCLICancelOfAFinishedJob(t *testing.T) {
	t.Parallel()
	store, cfg, _ := cliSchema(t)
	j, _ := killAPIJob(t, store)
	code, stdout, stderr := runCLI("jobs", "cancel", "--config", cfg, fmt.Sprint(j.ID))
	if want := fmt.Sprintf("job %d has finished already (dead)", j.ID); code != exitFailure || !strings.Contains(stderr, want) {
		t.Errorf("jobs cancel of a dead job: exit %d, want %d and %q\nstdout: %s\nstderr: %s", code, exitFailure, want, stdout, stderr)
	}
}

// killAPIJob enqueues a job into queue q through the API's path and
// kills it (killOne).
func killAPIJob(t *testing.T, store *pgstore.Store) (*pgstore.Claimed, int64) {
	t.Helper()
	if _, err := store.JobEnqueue(context.Background(), pgstore.NewJob{Origin: pgstore.OriginAPI, Route: "t", Kind: "k",
		Queue: "q", DedupeKey: "d1", Payload: []byte(`{}`), MaxAttempts: 3}, pgstore.Actor{}); err != nil {
		t.Fatal(err)
	}
	return killOne(t, store)
}

// killOne claims a job of queue q, ends it dead with a permanent error,
// and returns it and the DLQ entry that parked it.
func killOne(t *testing.T, store *pgstore.Store) (*pgstore.Claimed, int64) {
	t.Helper()
	ctx := context.Background()
	j := testenv.ClaimOne(t, store, "q")
	if c, err := store.JobComplete(ctx, []pgstore.Outcome{{ID: j.ID, Token: j.Token, State: jobstate.Dead,
		Reason: "permanent", Error: "HTTP 422"}}); err != nil || !c.Applied[j.Token] {
		t.Fatalf("complete dead: %v %v", c.Applied, err)
	}
	var entry int64
	if err := store.Pool().QueryRow(ctx, `SELECT id FROM dlq_entries WHERE job_id = $1`, j.ID).Scan(&entry); err != nil {
		t.Fatal(err)
	}
	return j, entry
}

// dlq redrive and dlq discard of an entry re-driven already fail with the
// admin API's reason, naming the job the entry made, not a generic
// conflict; the entry stays.
func TestCLIDLQActionsOnARedrivenEntry(t *testing.T) {
	t.Parallel()
	store, cfg, ctx := cliSchema(t)
	j, entry := killAPIJob(t, store)
	if _, err := store.DLQRedrive(ctx, entry, "oncall"); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("entry %d was re-driven already, to job %d", entry, j.ID)
	for _, verb := range []string{"redrive", "discard"} {
		code, stdout, stderr := runCLI("dlq", verb, "--config", cfg, fmt.Sprint(entry))
		if code != exitFailure || !strings.Contains(stderr, want) {
			t.Errorf("dlq %s of a re-driven entry: exit %d, want %d and %q\nstdout: %s\nstderr: %s",
				verb, code, exitFailure, want, stdout, stderr)
		}
	}
	if _, err := store.DLQGet(ctx, entry); err != nil {
		t.Fatalf("the re-driven entry after the refused actions: %v", err)
	}
}

// A re-drive puts a lane's dead job back in its lane's order, where a
// version older than one applied since ends skipped in the same
// transaction: under on_dead: continue the lane ran the dead job's next
// version. dlq redrive said only "re-drove DLQ entry N as job M", which
// read as if the job would run.
func TestCLIDLQRedriveSaysTheLaneSkippedTheJob(t *testing.T) {
	t.Parallel()
	store, cfg, ctx := cliSchema(t)
	var b pgstore.IngestBatch
	for i := range int64(2) {
		v := i + 1
		b.Jobs = append(b.Jobs, pgstore.NewJob{Route: "t", Kind: "k", Queue: "q", Key: "c42", Version: &v,
			DedupeKey: fmt.Sprint("t/0/", i), Payload: []byte(`{}`), MaxAttempts: 3, Topic: "t", Offset: i,
			Lane: &pgstore.LanePolicy{Policy: "strict", OnDead: "continue", GapTimeout: time.Hour, GapPolicy: "park"}})
	}
	if _, err := store.IngestCommit(ctx, b); err != nil {
		t.Fatal(err)
	}
	j, entry := killOne(t, store)
	next := testenv.ClaimOne(t, store, "q")
	if c, err := store.JobComplete(ctx, []pgstore.Outcome{{ID: next.ID, Token: next.Token, State: jobstate.Succeeded,
		Lane: next.LaneRef()}}); err != nil || !c.Applied[next.Token] {
		t.Fatalf("complete version 2: %v %v", c.Applied, err)
	}
	code, stdout, stderr := runCLI("dlq", "redrive", "--config", cfg, fmt.Sprint(entry))
	want := fmt.Sprintf("re-drove DLQ entry %d as job %d, which its lane skipped at once, never delivered: "+
		"version 1 is not newer than the last applied version 2\n", entry, j.ID)
	if code != exitOK || stdout != want {
		t.Errorf("dlq redrive of a strict lane's dead job, its next version applied since: exit %d, want %q\nstdout: %q\nstderr: %s", code, want, stdout, stderr)
	}
}

// cliSchema is a migrated schema of the test's own, its store, a config
// of one route, t, into queue q, and a context for the test's own
// statements.
func cliSchema(t *testing.T) (*pgstore.Store, string, context.Context) {
	t.Helper()
	schema := testenv.Schema(t)
	store := testenv.Store(t, schema)
	cfg := writeConfig(t, testConfig{Topic: "t", Group: testenv.Name("g"), Schema: schema, TargetURL: "http://127.0.0.1:1/"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return store, cfg, ctx
}

// A success kept with an empty body says so on its line, not as an
// empty block under a heading.
func TestCLIEmptyResult(t *testing.T) {
	t.Parallel()
	store, cfg, ctx := cliSchema(t)
	if _, err := store.IngestCommit(ctx, pgstore.IngestBatch{Jobs: []pgstore.NewJob{{Route: "t", Kind: "k", Queue: "q",
		DedupeKey: "t/0/0", Payload: []byte(`{}`), MaxAttempts: 3, Topic: "t"}}}); err != nil {
		t.Fatal(err)
	}
	j := testenv.ClaimOne(t, store, "q")
	if c, err := store.JobComplete(ctx, []pgstore.Outcome{{ID: j.ID, Token: j.Token, State: jobstate.Succeeded,
		Result: []byte{}, ResultType: "text/plain"}}); err != nil || !c.Applied[j.Token] {
		t.Fatalf("complete: %v %v", c.Applied, err)
	}
	code, stdout, stderr := runCLI("jobs", "get", "--config", cfg, fmt.Sprint(j.ID))
	if code != exitOK || !regexpLine(stdout, `^result:\s+empty, text/plain$`) || strings.Contains(stdout, "result (") {
		t.Errorf("jobs get of an empty result: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
}

// jobs get says where a lane job stands in its lane, and whether a
// grouped job is held by its group's cap: its state (waiting, queued)
// says neither why nor behind what.
func TestJobsGetShowsLaneAndGroup(t *testing.T) {
	t.Parallel()
	schema := testenv.Schema(t)
	store := testenv.Store(t, schema)
	cfg := writeConfig(t, testConfig{Group: testenv.Name("g"), Schema: schema, Body: `queues:
  q: {concurrency: 2}
routes:
  - {topic: o, kind: k, queue: q, key: {field: k}, ordered: true, target: {http: {url: "http://127.0.0.1:1/"}}}
  - {topic: g, kind: k, queue: q, group: {field: tenant, max_running: 1}, target: {http: {url: "http://127.0.0.1:1/"}}}
`})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lane := &pgstore.LanePolicy{Policy: "none", OnDead: "continue", GapTimeout: time.Minute, GapPolicy: "park"}
	var b pgstore.IngestBatch
	for i := range 3 {
		b.Jobs = append(b.Jobs, pgstore.NewJob{Route: "o", Kind: "k", Queue: "q", Key: "c42", DedupeKey: fmt.Sprint("o", i),
			Payload: []byte(`{"k":"c42"}`), MaxAttempts: 3, Topic: "o", Offset: int64(i), Lane: lane})
	}
	for i := range 2 {
		b.Jobs = append(b.Jobs, pgstore.NewJob{Route: "g", Kind: "k", Queue: "q", Group: "acme", DedupeKey: fmt.Sprint("g", i),
			Payload: []byte(`{"tenant":"acme"}`), MaxAttempts: 3, Topic: "g", Offset: int64(i)})
	}
	if _, err := store.IngestCommit(ctx, b); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	if err := store.Pool().QueryRow(ctx, `SELECT array_agg(id ORDER BY id) FROM jobs`).Scan(&ids); err != nil || len(ids) != 5 {
		t.Fatalf("jobs %v: %v", ids, err)
	}
	// The lane's head and acme's first job run.
	if _, err := store.Pool().Exec(ctx, `UPDATE jobs SET state = 'running', lease_expires_at = now() + interval '1 hour'
		WHERE id = ANY($1)`, []int64{ids[0], ids[3]}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id   int64
		want string
	}{
		{ids[0], `^lane:\s+the head of its lane, 2 waiting behind it$`},
		{ids[2], fmt.Sprintf(`^lane:\s+2 jobs ahead of it \(head: job %d\), 2 waiting behind the head$`, ids[0])},
		{ids[3], `^group:\s+acme \(1 running, max_running 1\)$`},
		{ids[4], `^group:\s+acme \(1 running, max_running 1\): held by the group's cap until one of them ends$`},
	} {
		code, stdout, stderr := runCLI("jobs", "get", "--config", cfg, fmt.Sprint(c.id))
		if code != exitOK || !regexpLine(stdout, c.want) {
			t.Errorf("jobs get %d: exit %d, want a line %s\nstdout: %s\nstderr: %s", c.id, code, c.want, stdout, stderr)
		}
	}
}

// A strict lane that holds on a missing version has no head: the job
// that waits for the version before it is not the head, which jobs get
// said ("the head of its lane, 1 waiting behind the head") while no job
// of the key ran. It names the version the lane waits for, until when,
// and what it does then.
func TestJobsGetSaysAGapHeldLaneHasNoHead(t *testing.T) {
	t.Parallel()
	store, cfg, ctx := cliSchema(t)
	lane := &pgstore.LanePolicy{Policy: "strict", OnDead: "continue", GapTimeout: time.Hour, GapPolicy: "park"}
	var b pgstore.IngestBatch
	for i, v := range []int64{1, 3} {
		b.Jobs = append(b.Jobs, pgstore.NewJob{Route: "t", Kind: "k", Queue: "q", Key: "c42", Version: &v,
			DedupeKey: fmt.Sprint("t/0/", i), Payload: []byte(`{}`), MaxAttempts: 3, Topic: "t", Offset: int64(i), Lane: lane})
	}
	if _, err := store.IngestCommit(ctx, b); err != nil {
		t.Fatal(err)
	}
	j := testenv.ClaimOne(t, store, "q")
	if c, err := store.JobComplete(ctx, []pgstore.Outcome{{ID: j.ID, Token: j.Token, State: jobstate.Succeeded}}); err != nil || !c.Applied[j.Token] {
		t.Fatalf("complete: %v %v", c.Applied, err)
	}
	var waiting int64
	if err := store.Pool().QueryRow(ctx, `SELECT id FROM jobs WHERE state = 'waiting'`).Scan(&waiting); err != nil {
		t.Fatalf("version 3 should wait for version 2: %v", err)
	}
	code, stdout, stderr := runCLI("jobs", "get", "--config", cfg, fmt.Sprint(waiting))
	for _, want := range []string{
		`^lane:\s+next in its lane, 1 waiting; the lane has no head: it holds for a missing version$`,
		`^lane gap:\s+version 2 missing; held until \S+ \(in 1h\), then the lane parks its next job \(gap_policy park\)$`,
		`^lane applied:\s+version 1 \(a job of a version not newer is skipped\)$`,
	} {
		if code != exitOK || !regexpLine(stdout, want) {
			t.Errorf("jobs get %d: exit %d, want a line %s\nstdout: %s\nstderr: %s", waiting, code, want, stdout, stderr)
		}
	}
}

// jobs get lists a job's errors, one a line, and marks each re-drive
// where it fell: a re-drive counts attempts from 1 again, so without the
// mark the attempts read 1, 2, 3, 1.
func TestJobsGetShowsErrorsAndRedrives(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	at := func(s int) string { return now.Add(-time.Duration(s) * time.Second).Format(time.RFC3339) }
	j := pgstore.JobDetail{
		Errors: json.RawMessage(fmt.Sprintf(`[{"attempt":1,"at":%q,"error":"HTTP 504"},{"attempt":2,"at":%q,"error":"HTTP 504"},`+
			`{"attempt":3,"at":%q,"error":"HTTP 504"},{"attempt":1,"at":%q,"error":"HTTP 500: \u001b[31mred"}]`, at(40), at(30), at(20), at(5))),
		Redrives: []pgstore.JobRedrive{{EntryID: 4, At: now.Add(-10 * time.Second), By: "oncall", ErrorsBefore: 3}},
	}
	j.State = "retrying"
	var b strings.Builder
	if err := printJob(&b, now, j); err != nil {
		t.Fatal(err)
	}
	want := "errors:\n" +
		"  attempt 1, 40s ago: HTTP 504\n" +
		"  attempt 2, 30s ago: HTTP 504\n" +
		"  attempt 3, 20s ago: HTTP 504\n" +
		"  -- re-driven from DLQ entry 4 10s ago by oncall: attempts count from 1 again\n" +
		"  attempt 1, 5s ago: HTTP 500: \\x1b[31mred\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("jobs get shows\n%s\nwant in it\n%s", b.String(), want)
	}
	// A job re-driven with no error of its own (a parked gap, say) still
	// shows its re-drive.
	j.Errors = json.RawMessage(`[]`)
	b.Reset()
	if err := printJob(&b, now, j); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "errors:\n  -- re-driven from DLQ entry 4") {
		t.Errorf("jobs get of a re-driven job with no errors shows\n%s", b.String())
	}
}

// jobs get of a dead job names the DLQ entry it is parked in, which is
// what re-drives or discards it.
func TestJobsGetNamesADeadJobsEntry(t *testing.T) {
	t.Parallel()
	store, cfg, _ := cliSchema(t)
	j, entry := killAPIJob(t, store)
	code, stdout, stderr := runCLI("jobs", "get", "--config", cfg, fmt.Sprint(j.ID))
	want := fmt.Sprintf("^dlq entry:\\s+%d: `switchyard dlq redrive %d` runs the job again, `dlq discard %d` drops it$", entry, entry, entry)
	if code != exitOK || !regexpLine(stdout, want) {
		t.Errorf("jobs get %d: exit %d, want a line %s\nstdout: %s\nstderr: %s", j.ID, code, want, stdout, stderr)
	}
}
