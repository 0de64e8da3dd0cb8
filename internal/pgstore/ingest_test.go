package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// I6, the net under decode: jobs that Postgres refuses for their data
// (here keys far over a btree entry, bytes text cannot hold) are parked
// with Postgres's reason, and the rest of the batch commits with its
// offset. Without the bisection every record of the batch stayed
// unstored, retried forever. (A NUL is not among them: binary COPY
// stores text with a NUL as an empty string without complaint, which is
// why decode parks keys with one itself.)
func TestIngestParksWhatPostgresRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	lane := &pgstore.LanePolicy{Policy: "none", OnDead: "continue", GapTimeout: time.Minute, GapPolicy: "park"}
	keys := []string{"a", testenv.Noise(9000), "b", "c\xff", "d", "e", "f", "g"}
	var b pgstore.IngestBatch
	b.Group = "g"
	for i, k := range keys {
		dedupe := fmt.Sprint(i)
		if k == "e" {
			dedupe = testenv.Noise(9000)
		}
		b.Jobs = append(b.Jobs, pgstore.NewJob{Route: "r", Kind: "k", Queue: "q", Key: k, DedupeKey: dedupe,
			Payload: []byte("{}"), MaxAttempts: 3, Topic: "t", Offset: int64(i), Lane: lane, RecordKey: []byte(k)})
	}
	b.Offsets = []pgstore.OffsetAdvance{{Topic: "t", Partition: 0, Expected: -1, Next: int64(len(keys))}}
	res, err := s.IngestCommit(ctx, b)
	if err != nil {
		t.Fatalf("the batch was not stored: %v", err)
	}
	if res.Inserted != 5 || res.RefusedByRoute["r"] != 3 || res.Parked != 3 {
		t.Fatalf("inserted %d, refused %v, parked %d; want 5, 3, 3", res.Inserted, res.RefusedByRoute, res.Parked)
	}
	var next int64
	if err := s.Pool().QueryRow(ctx, `SELECT next_offset FROM kafka_offsets WHERE topic = 't'`).Scan(&next); err != nil || next != 8 {
		t.Fatalf("stored offset %d (%v), want 8", next, err)
	}
	rows, err := s.Pool().Query(ctx, `SELECT src_offset, reason, last_error, length(record_key) FROM dlq_entries ORDER BY src_offset`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	want := map[int64]string{1: "too_large", 3: "decode", 5: "too_large"}
	for rows.Next() {
		var off int64
		var reason, msg string
		var keyLen *int
		if err := rows.Scan(&off, &reason, &msg, &keyLen); err != nil {
			t.Fatal(err)
		}
		if want[off] != reason || !strings.Contains(msg, "Postgres refused the job") || !strings.Contains(msg, "SQLSTATE") {
			t.Errorf("offset %d parked as %s (%q), want %s with Postgres's reason", off, reason, msg, want[off])
		}
		delete(want, off)
	}
	if len(want) != 0 {
		t.Errorf("not parked: offsets %v", want)
	}
	// Every good job is in, and each lane got its head.
	var queued, waiting int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'queued'), count(*) FILTER (WHERE state = 'waiting') FROM jobs`).
		Scan(&queued, &waiting); err != nil || queued != 5 || waiting != 0 {
		t.Fatalf("queued %d waiting %d (%v), want 5 heads of 5 lanes", queued, waiting, err)
	}
}

// A poison entry that Postgres itself refuses (a header name with a NUL,
// which text[] cannot hold) is parked without the record's bytes rather
// than failing the batch.
func TestIngestParksRefusedPoisonBare(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	b := pgstore.IngestBatch{Group: "g", Poison: []pgstore.Poison{
		{Reason: "decode", Route: "r", Queue: "q", Error: "not JSON", Payload: []byte("x"), Topic: "t", Offset: 0},
		{Reason: "decode", Route: "r", Queue: "q", Error: "not JSON", Payload: []byte("y"), Topic: "t", Offset: 1,
			HeaderKeys: []string{"a\x00b"}, HeaderVals: [][]byte{[]byte("v")}},
	}, Offsets: []pgstore.OffsetAdvance{{Topic: "t", Partition: 0, Expected: -1, Next: 2}}}
	res, err := s.IngestCommit(ctx, b)
	if err != nil || res.Parked != 2 {
		t.Fatalf("parked %d, %v; want 2", res.Parked, err)
	}
	var msg string
	var truncated bool
	var payload []byte
	if err := s.Pool().QueryRow(ctx, `SELECT last_error, truncated, payload FROM dlq_entries WHERE src_offset = 1`).
		Scan(&msg, &truncated, &payload); err != nil {
		t.Fatal(err)
	}
	if !truncated || len(payload) != 0 || !strings.Contains(msg, "not JSON; parked without the record's bytes") {
		t.Fatalf("entry %q truncated=%v payload %q", msg, truncated, payload)
	}
}

// I2 across origins: an API job and a Kafka job of the same route and
// the same dedupe value are two jobs, never one.
func TestDedupeNamespacesNeverCollide(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	enq, err := s.JobEnqueue(ctx, pgstore.NewJob{Origin: pgstore.OriginAPI, Route: "r", Kind: "k", Queue: "q",
		DedupeKey: "k1", Payload: []byte("api"), MaxAttempts: 1}, pgstore.Actor{By: "test"})
	if err != nil || !enq.Created {
		t.Fatalf("enqueue: %+v %v", enq, err)
	}
	for _, dedupe := range []string{"k1", "api/k1"} {
		res, err := s.IngestCommit(ctx, pgstore.IngestBatch{Jobs: []pgstore.NewJob{{Route: "r", Kind: "k", Queue: "q",
			DedupeKey: dedupe, Payload: []byte("kafka"), MaxAttempts: 1, Topic: "t"}}})
		if err != nil || res.Inserted != 1 {
			t.Fatalf("Kafka record with dedupe %q: inserted %d, %v; want a job of its own", dedupe, res.Inserted, err)
		}
	}
	again, err := s.JobEnqueue(ctx, pgstore.NewJob{Origin: pgstore.OriginAPI, Route: "r", Kind: "k", Queue: "q",
		DedupeKey: "k1", Payload: []byte("other"), MaxAttempts: 1}, pgstore.Actor{By: "test"})
	if err != nil || again.Created || again.ID != enq.ID || again.SamePayload {
		t.Fatalf("repeated API key: %+v %v; want job %d again, with a different payload", again, err, enq.ID)
	}
}

// Migration 0008 moves existing jobs into their origin's namespace: API
// jobs lose the "api/" prefix that stood for one, schedules' jobs are
// told apart by their route, and Kafka jobs, whatever their dedupe key
// reads, stay Kafka's.
func TestMigrationMovesJobsToTheirOrigin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.Store(t, testenv.Name("t"))
	t.Cleanup(func() { _ = s.DropSchema(context.Background()) })
	if _, err := s.MigrateTo(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `
		INSERT INTO jobs (route, kind, queue, state, dedupe_key, payload, max_attempts, src_topic, src_partition, src_offset) VALUES
			('orders', 'k', 'q', 'queued', 'api/k1', '', 1, NULL, NULL, NULL),
			('orders', 'k', 'q', 'waiting', 'api/k2', '', 1, '', 0, 0),
			('orders', 'k', 'q', 'queued', 'api/k3', '', 1, 'orders', 0, 7),
			('schedule/nightly', 'k', 'q', 'queued', 'slot/00000000001700000000', '', 1, NULL, NULL, NULL)`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := s.Pool().Query(ctx, `SELECT origin || ' ' || dedupe_key FROM jobs ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
	}
	want := []string{"api k1", "api k2", "kafka api/k3", "schedule slot/00000000001700000000"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after 0008: %q, want %q", got, want)
	}
	// 0009 gives each its job_keys row.
	var keyed int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM jobs j JOIN job_keys k ON k.job_id = j.id
		AND (k.route, k.origin, k.dedupe_key, k.key) = (j.route, j.origin, j.dedupe_key, j.key)`).Scan(&keyed); err != nil || keyed != 4 {
		t.Fatalf("after 0009: %d jobs with their job_keys row, %v; want 4", keyed, err)
	}
}

// A batch is written directly until one meets a dedupe conflict; that one
// is written again carefully, with its duplicates skipped, and so are the
// next ones until one finds none. A small batch skips its duplicates
// itself. Either way the offsets fence the batch and the wake-up comes
// at commit, never for a batch that rolled back.
func TestIngestGoesDirectUntilAConflict(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	listener, err := s.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Release()
	if _, err := listener.Exec(ctx, `LISTEN "`+s.Channel()+`"`); err != nil {
		t.Fatal(err)
	}
	woken := func() bool {
		wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		n, err := listener.Conn().WaitForNotification(wctx)
		return err == nil && n.Payload == "q"
	}
	next := int64(-1)
	batch := func(from, to int) pgstore.IngestBatch {
		b := pgstore.IngestBatch{Group: "g", Offsets: []pgstore.OffsetAdvance{{Topic: "t", Expected: next, Next: int64(to)}}}
		for i := from; i < to; i++ {
			b.Jobs = append(b.Jobs, pgstore.NewJob{Route: "r", Kind: "k", Queue: "q", DedupeKey: fmt.Sprint(i),
				Payload: []byte("{}"), MaxAttempts: 3, Topic: "t", Offset: int64(i)})
		}
		return b
	}
	for _, step := range []struct {
		from, to        int
		inserted, dupes int64
		careful         bool
	}{
		{0, 100, 100, 0, false},
		{50, 150, 50, 50, true},   // a redelivery: the careful path
		{150, 250, 100, 0, false}, // none: direct again
		{245, 255, 5, 5, false},   // small: skipped directly
	} {
		res, err := s.IngestCommit(ctx, batch(step.from, step.to))
		if err != nil {
			t.Fatalf("records %d-%d: %v", step.from, step.to, err)
		}
		if res.Inserted != step.inserted || res.Duplicates != step.dupes || s.IngestCareful() != step.careful {
			t.Fatalf("records %d-%d: inserted %d, duplicates %d, careful %v; want %d, %d, %v", step.from, step.to,
				res.Inserted, res.Duplicates, s.IngestCareful(), step.inserted, step.dupes, step.careful)
		}
		if !woken() {
			t.Fatalf("records %d-%d: no wake-up for queue q", step.from, step.to)
		}
		next = int64(step.to)
	}
	next = 3 // another member's position
	if _, err := s.IngestCommit(ctx, batch(300, 310)); !errors.Is(err, pgstore.ErrOffsetFenced) {
		t.Fatalf("a fenced batch returned %v, want ErrOffsetFenced", err)
	}
	if woken() {
		t.Fatal("a fenced batch woke the pools")
	}
	var n int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM jobs`).Scan(&n); err != nil || n != 255 {
		t.Fatalf("%d jobs (%v), want 255: the fenced batch wrote nothing", n, err)
	}
}

// A small batch, inserted from arrays, stores the very rows a large one
// stores by COPY: every column, headers of every count (a job's are a
// slice of the batch's), NULLs where a field is unset.
func TestSmallAndLargeBatchesStoreTheSameRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	v := int64(7)
	lane := &pgstore.LanePolicy{Policy: "none", OnDead: "continue", GapTimeout: time.Minute, GapPolicy: "park"}
	job := func(route string, i int) pgstore.NewJob {
		j := pgstore.NewJob{Route: route, Kind: "k", Queue: "q", Key: fmt.Sprint("key", i%3), DedupeKey: fmt.Sprint(i),
			Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)), MaxAttempts: 3 + i%2, Topic: "t", Partition: int32(i % 2),
			Offset: int64(i)}
		for h := range i % 4 { // 0 to 3 headers, one without a value
			j.HeaderKeys = append(j.HeaderKeys, fmt.Sprint("h", h))
			j.HeaderVals = append(j.HeaderVals, map[bool][]byte{true: nil, false: []byte(fmt.Sprint("v", i, h))}[h == 1])
		}
		switch i % 5 {
		case 1:
			j.Version, j.Deadline, j.RecordAt = &v, &at, &at
		case 2:
			j.Lane = lane
		case 3:
			j.Group, j.RunAt = "tenant", &at
		}
		return j
	}
	const n = 12
	var small, large pgstore.IngestBatch
	for i := range n {
		small.Jobs = append(small.Jobs, job("small", i))
	}
	for i := range 100 {
		large.Jobs = append(large.Jobs, job("large", i))
	}
	for _, b := range []pgstore.IngestBatch{small, large} {
		if res, err := s.IngestCommit(ctx, b); err != nil || res.Inserted != int64(len(b.Jobs)) {
			t.Fatalf("inserted %d of %d (%v)", res.Inserted, len(b.Jobs), err)
		}
	}
	rows := func(route string) []string {
		r, err := s.Pool().Query(ctx, `
			SELECT (origin, kind, queue, state, key, version, dedupe_key, payload, header_keys, header_values,
				max_attempts, deadline, src_topic, src_partition, src_offset, lane, grp,
				CASE WHEN scheduled_at = $3 THEN 'later' ELSE 'now' END, record_at)::text
			FROM jobs WHERE route = $1 AND src_offset < $2 ORDER BY src_offset`, route, n, at)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(r, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	got, want := rows("small"), rows("large")
	if len(got) != n || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("small batch rows\n%s\nlarge batch rows\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	t.Logf("e.g. %s", got[3])
	// A large batch's ids follow its records' order, which coalescing
	// relies on (the newest unstarted job of a key is its highest id).
	var inOrder bool
	if err := s.Pool().QueryRow(ctx, `SELECT coalesce(bool_and(prev < src_offset), false) FROM (
			SELECT src_offset, lag(src_offset) OVER (ORDER BY id) AS prev FROM jobs WHERE route = 'large') o
		WHERE prev IS NOT NULL`).Scan(&inOrder); err != nil || !inOrder {
		t.Fatalf("the large batch's ids do not follow its records' order (%v)", err)
	}
}

// A claim carried by a small batch takes, in the batch's transaction,
// runnable jobs of its queue as JobClaim would (an older one first, then
// the batch's, leased, with an attempt counted and a token), never those
// of a limited route or a queue it does not name; a batch that takes the
// careful path (a duplicate) runs no claim and says so.
func TestIngestClaimTakesRunnableJobsInTheBatchTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	job := func(i int, route, queue string) pgstore.NewJob {
		return pgstore.NewJob{Route: route, Kind: "k", Queue: queue, DedupeKey: fmt.Sprint(i), Payload: []byte("{}"),
			MaxAttempts: 3, Topic: "t", Offset: int64(i)}
	}
	if _, err := s.IngestCommit(ctx, pgstore.IngestBatch{Group: "g", Jobs: []pgstore.NewJob{job(0, "r", "q")},
		Offsets: []pgstore.OffsetAdvance{{Topic: "t", Partition: 0, Expected: -1, Next: 1}}}); err != nil {
		t.Fatal(err)
	}
	c := &pgstore.IngestClaim{Queue: "q", Limit: 3, Lease: time.Minute, MaxRuntime: time.Hour, Limited: []string{"capped"}}
	capped := job(3, "capped", "q")
	capped.Group = pgstore.GroupAll
	res, err := s.IngestCommit(ctx, pgstore.IngestBatch{Group: "g",
		Jobs:    []pgstore.NewJob{job(1, "r", "q"), job(2, "r", "other"), capped, job(4, "r", "q")},
		Offsets: []pgstore.OffsetAdvance{{Topic: "t", Partition: 0, Expected: 1, Next: 5}},
		Claims:  []*pgstore.IngestClaim{c}})
	if err != nil || res.Inserted != 4 {
		t.Fatalf("ingest: %+v, %v", res, err)
	}
	if !c.Ran || len(c.Claimed) != 3 {
		t.Fatalf("claim ran %v and took %d jobs, want 3", c.Ran, len(c.Claimed))
	}
	var got []string
	for _, j := range c.Claimed {
		if j.Attempt != 1 || j.Token == 0 || j.Queue != "q" || j.Route != "r" {
			t.Fatalf("claimed %+v: want attempt 1, a token, queue q, route r", j)
		}
		got = append(got, j.Source.Topic+"/"+fmt.Sprint(j.Source.Offset))
	}
	if fmt.Sprint(got) != "[t/0 t/1 t/4]" {
		t.Fatalf("claimed %v, want the older job first, then the batch's of q: [t/0 t/1 t/4]", got)
	}
	var running, queued int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'running' AND lease_expires_at > now()),
		count(*) FILTER (WHERE state = 'queued') FROM jobs`).Scan(&running, &queued); err != nil || running != 3 || queued != 2 {
		t.Fatalf("%d running, %d queued (%v); want 3 leased, and the other queue's and the capped route's queued", running, queued, err)
	}
	// A job that Postgres refuses (a dedupe key over a btree entry's
	// size) sends the batch down the careful path: no claim.
	refused := job(5, "r", "q")
	refused.DedupeKey = testenv.Noise(9000)
	again := &pgstore.IngestClaim{Queue: "other", Limit: 3, Lease: time.Minute, MaxRuntime: time.Hour}
	if res, err := s.IngestCommit(ctx, pgstore.IngestBatch{Group: "g", Jobs: []pgstore.NewJob{refused},
		Offsets: []pgstore.OffsetAdvance{{Topic: "t", Partition: 0, Expected: 5, Next: 6}},
		Claims:  []*pgstore.IngestClaim{again}}); err != nil || len(res.RefusedByRoute) != 1 {
		t.Fatalf("ingest of a refused job: %+v, %v", res, err)
	}
	if again.Ran || len(again.Claimed) != 0 {
		t.Fatalf("a careful batch's claim ran (%v, %d jobs)", again.Ran, len(again.Claimed))
	}
}

// A claimed job carries its record's headers, in order, a header without
// a value as nil; a job without headers carries none.
func TestClaimedJobsCarryTheirHeaders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	batch := pgstore.IngestBatch{Jobs: []pgstore.NewJob{
		{Route: "r", Kind: "k", Queue: "q", DedupeKey: "with", Payload: []byte("{}"), MaxAttempts: 3, Topic: "t", Offset: 1,
			HeaderKeys: []string{"b", "a", "empty"}, HeaderVals: [][]byte{[]byte("2"), []byte("1"), nil}},
		{Route: "r", Kind: "k", Queue: "q", DedupeKey: "without", Payload: []byte("{}"), MaxAttempts: 3, Topic: "t", Offset: 2},
	}}
	if _, err := s.IngestCommit(ctx, batch); err != nil {
		t.Fatal(err)
	}
	jobs, _, err := s.JobClaim(ctx, pgstore.JobClaimParams{Queue: "q", Limit: 10, Lease: time.Minute, MaxRuntime: time.Hour})
	if err != nil || len(jobs) != 2 {
		t.Fatalf("claimed %d, %v", len(jobs), err)
	}
	want := []pgstore.HeaderRow{{Key: "b", Value: []byte("2")}, {Key: "a", Value: []byte("1")}, {Key: "empty"}}
	if got := jobs[0].Headers; !reflect.DeepEqual(got, want) {
		t.Errorf("headers %+v, want %+v", got, want)
	}
	if got := jobs[1].Headers; got != nil {
		t.Errorf("headers %+v, want none", got)
	}
}
