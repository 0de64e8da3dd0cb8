package dlq_test

import (
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/bulk"
	"github.com/switchyard-dev/switchyard/internal/dlq"
	"github.com/switchyard-dev/switchyard/internal/ingest"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
	"github.com/switchyard-dev/switchyard/jobstate"
)

// A bulk re-drive's chunk stores the parked records it can decode in one
// transaction (as ingest stores a batch) and does to every entry what
// re-driving each alone does: the same jobs in the same lane order, the
// same entries linked to the same jobs, the same audit entries, and the
// same failure for each entry it cannot take. It leaves alone only what
// must be: a record larger than a chunk's budget of bytes.
func TestRecordChunksAgreeWithEachAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type outcome struct{ Errs, Jobs, Entries, Audit map[string]string }
	run := func(chunk bool) outcome {
		s, svc, name, ids := recordFixture(t)
		act := bulk.Chunked(func(ctx context.Context, ids []int64) ([]bulk.Failure, []int64, error) {
			return svc.RedriveMany(ctx, ids, "test")
		}, func(ctx context.Context, id int64) error {
			_, err := svc.Redrive(ctx, id, "test")
			return err
		})
		if !chunk {
			act = func(ctx context.Context, ids []int64) (failed []bulk.Failure, _ error) {
				for _, id := range ids {
					if _, err := svc.Redrive(ctx, id, "test"); err != nil {
						failed = append(failed, bulk.Failure{ID: id, Error: err.Error()})
					}
				}
				return failed, nil
			}
		}
		failed, err := act(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		o := outcome{Errs: map[string]string{}}
		for _, f := range failed {
			o.Errs[name[f.ID]] = f.Error
		}
		// Jobs by dedupe key (a chunk whose transaction failed has drawn
		// ids it never used), each with the jobs of its lane before it.
		o.Jobs = testenv.Pairs(t, s, `SELECT dedupe_key, concat_ws(' ', state, attempts, key, (SELECT head_job_id = j.id FROM lanes l
			WHERE l.route = j.route AND l.key = j.key), (SELECT string_agg(b.dedupe_key, ',' ORDER BY b.dedupe_key) FROM jobs b
			WHERE b.route = j.route AND b.key = j.key AND (b.src_offset, b.id) < (j.src_offset, j.id))) FROM jobs j`)
		o.Entries = testenv.Pairs(t, s, `SELECT d.id::text, concat_ws(' ', d.redriven_by, j.dedupe_key) FROM dlq_entries d
			LEFT JOIN jobs j ON j.id = d.redrive_job_id`)
		o.Audit = testenv.Pairs(t, s, `SELECT a.target, concat_ws(' ', a.actor, a.action, j.dedupe_key) FROM audit_log a
			LEFT JOIN jobs j ON j.id = (a.detail->>'job_id')::bigint`)
		return o
	}
	alone, chunked := run(false), run(true)
	if !reflect.DeepEqual(alone, chunked) {
		t.Fatalf("a chunk differs from each entry alone:\n alone  %+v\n chunk  %+v", alone, chunked)
	}
	// The fixture holds what the comparison needs.
	wantErrs := map[string]string{"still-bad": "still cannot become a job", "no-key": "still cannot become a job",
		"truncated": "cannot re-drive", "redriven": "re-driven already", "none": "not found"}
	for n, want := range wantErrs {
		if !strings.Contains(alone.Errs[n], want) {
			t.Errorf("each alone: %s failed with %q, want %q", n, alone.Errs[n], want)
		}
	}
	if len(alone.Errs) != len(wantErrs) {
		t.Errorf("each alone: failures %v, want only %v", alone.Errs, slices.Sorted(maps.Keys(wantErrs)))
	}
	// Each job: state, attempts, key, whether it heads its lane, and the
	// jobs of its key before it. e0 was there before, and stays c1's head
	// with e1 and e3 behind it; e4 is dup-a's and dup-b's, one job; e8 is
	// the record re-driven before; every new lane has its head queued.
	wantJobs := map[string]string{"dead": "queued 0 ", "e0": "queued 0 c1 t", "e1": "waiting 0 c1 f e0", "e3": "waiting 0 c1 f e0,e1",
		"e2": "queued 0 c2 t", "e7": "waiting 0 c2 f e2", "e4": "queued 0 c3 t", "e8": "queued 0 c5 t"}
	if !reflect.DeepEqual(alone.Jobs, wantJobs) {
		t.Errorf("each alone: jobs %v, want %v", alone.Jobs, wantJobs)
	}

	s, svc, name, ids := recordFixture(t)
	failed, left, err := svc.RedriveMany(ctx, ids, "test")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := testenv.Names(name, left), []string{"big"}; !slices.Equal(got, want) {
		t.Errorf("a chunk left %v alone, want %v (failed in it: %v)", got, want, failed)
	}
	var parked int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM dlq_entries WHERE redriven_at IS NULL AND job_id IS NULL`).Scan(&parked); err != nil || parked != 4 {
		t.Errorf("after the chunk, %d records parked (%v), want 4: big, truncated, still-bad and no-key", parked, err)
	}
}

// customerRoute is route r of topic t: ordered, keyed by a record's
// customer_id and deduplicated by its event_id.
func customerRoute(t *testing.T) *ingest.Route {
	return compile(t, config.Route{Name: "r", Topic: "t", Ordered: true, Key: config.FieldRef{Field: "customer_id"},
		Dedupe: config.FieldRef{Field: "event_id"}, MaxRecordBytes: 8 << 20, DLQMaxBytes: new(100)})
}

// parked is route r's record at offset of topic t, with value and key,
// parked for its data.
func parked(offset int64, value, key []byte) pgstore.Poison {
	return pgstore.Poison{Reason: "decode", Route: "r", Queue: "q", Error: "bad", Payload: value, RecordKey: key,
		HeaderKeys: []string{}, HeaderVals: [][]byte{}, Topic: "t", Offset: offset}
}

// recordFixture parks records of an ordered route (keyed by customer_id,
// deduplicated by event_id) in every state a re-drive meets, and names
// their ids: records that decode now, two of one key behind a job ingested
// earlier; two records of one dedupe key; one of the dedupe key that job
// holds; two that still cannot become jobs; one kept in part (no Kafka to
// read it again from here); one over a chunk's budget of bytes; one
// re-driven already; a dead job; and an id no entry has.
func recordFixture(t *testing.T) (*pgstore.Store, *dlq.Service, map[int64]string, []int64) {
	t.Helper()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	route := customerRoute(t)
	job, p := route.Decode(&kgo.Record{Topic: "t", Value: []byte(`{"customer_id":"c1","event_id":"e0"}`)}, time.Now())
	if p != nil {
		t.Fatal(p.Error)
	}
	if _, err := s.IngestCommit(ctx, pgstore.IngestBatch{Jobs: []pgstore.NewJob{*job}}); err != nil {
		t.Fatal(err)
	}
	records := []struct{ name, value string }{
		{"ok-1", `{"customer_id":"c1","event_id":"e1"}`},
		{"ok-2", `{"customer_id":"c2","event_id":"e2"}`},
		{"ok-3", `{"customer_id":"c1","event_id":"e3"}`},
		{"dup-a", `{"customer_id":"c3","event_id":"e4"}`},
		{"dup-b", `{"customer_id":"c3","event_id":"e4","again":true}`},
		{"taken", `{"customer_id":"c1","event_id":"e0"}`},
		{"still-bad", `{`},
		{"no-key", `{"event_id":"e5"}`},
		{"truncated", `{"customer_id":"c4","event_id":"e6"}`},
		{"big", fmt.Sprintf(`{"customer_id":"c2","event_id":"e7","pad":%q}`, strings.Repeat("x", 5<<20))},
		{"elsewhere", `{"customer_id":"c5","event_id":"e8"}`},
	}
	var poison []pgstore.Poison
	for i, r := range records {
		p := parked(int64(i+1), []byte(r.value), nil)
		if r.name == "truncated" {
			p.Reason, p.Truncated, p.RecordBytes = "too_large", true, 5000
		}
		poison = append(poison, p)
	}
	if _, err := s.IngestCommit(ctx, pgstore.IngestBatch{Poison: poison}); err != nil {
		t.Fatal(err)
	}
	name := map[int64]string{}
	rows, _ := s.Pool().Query(ctx, `SELECT id, src_offset FROM dlq_entries ORDER BY id`)
	var id, off int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &off}, func() error { name[id] = records[off-1].name; return nil }); err != nil {
		t.Fatal(err)
	}
	svc := dlq.New(s, []*ingest.Route{route}, nil)
	for id, n := range name {
		if n == "elsewhere" {
			if _, err := svc.Redrive(ctx, id, "fixture"); err != nil {
				t.Fatal(err)
			}
			name[id] = "redriven"
		}
	}
	// A dead job of another route, parked by its last attempt.
	if _, err := s.IngestCommit(ctx, pgstore.IngestBatch{Jobs: []pgstore.NewJob{{Route: "d", Kind: "k", Queue: "dq", DedupeKey: "dead",
		Payload: []byte(`{}`), MaxAttempts: 1, Topic: "d", Offset: 1}}}); err != nil {
		t.Fatal(err)
	}
	c := testenv.ClaimOne(t, s, "dq")
	if _, err := s.JobComplete(ctx, []pgstore.Outcome{{ID: c.ID, Token: c.Token, State: jobstate.Dead, Reason: "permanent", Error: "boom"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Pool().QueryRow(ctx, `SELECT id FROM dlq_entries WHERE job_id = $1`, c.ID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	name[id] = "dead"
	if _, err := s.Pool().Exec(ctx, `DELETE FROM audit_log`); err != nil {
		t.Fatal(err)
	}
	name[1<<40] = "none"
	return s, svc, name, slices.Sorted(maps.Keys(name))
}

// A re-drive stores a record as ingest does, coalescing included: on a
// route with coalesce: latest, re-driven records of a key newer than its
// unstarted jobs replace them, and the older of two re-driven together is
// replaced by the newer; the lane's head, which holds the lane, stays.
func TestRedrivenRecordsCoalesce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	route := compile(t, config.Route{Name: "r", Topic: "t", Ordered: true, Coalesce: "latest", MaxRecordBytes: 1 << 20})
	var jobs []pgstore.NewJob
	for off := range int64(2) {
		j, p := route.Decode(&kgo.Record{Topic: "t", Offset: off, Key: []byte("c1"), Value: []byte(`{}`)}, time.Now())
		if p != nil {
			t.Fatal(p.Error)
		}
		jobs = append(jobs, *j)
	}
	if _, err := s.IngestCommit(ctx, pgstore.IngestBatch{Jobs: jobs}); err != nil {
		t.Fatal(err)
	}
	var poison []pgstore.Poison
	for _, off := range []int64{8, 9} {
		poison = append(poison, parked(off, []byte(`{}`), []byte("c1")))
	}
	if _, err := s.IngestCommit(ctx, pgstore.IngestBatch{Poison: poison}); err != nil {
		t.Fatal(err)
	}
	svc := dlq.New(s, []*ingest.Route{route}, nil)
	if failed, alone, err := svc.RedriveMany(ctx, []int64{1, 2}, "test"); err != nil || len(failed) != 0 || len(alone) != 0 {
		t.Fatalf("re-drive: failed %v, alone %v, %v", failed, alone, err)
	}
	got := map[int64]string{}
	rows, _ := s.Pool().Query(ctx, `SELECT src_offset, state FROM jobs`)
	var off int64
	var state string
	if _, err := pgx.ForEachRow(rows, []any{&off, &state}, func() error { got[off] = state; return nil }); err != nil {
		t.Fatal(err)
	}
	if want := map[int64]string{0: "queued", 1: "coalesced", 8: "coalesced", 9: "waiting"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("jobs by offset: %v, want %v", got, want)
	}
}

// A bulk re-drive of parked records beside an ingest that stores the same
// records again (a replay), each of its batches a shuffle of them: the two
// insert the same dedupe keys in opposite orders, and where Postgres ends
// one of them as a deadlock, the ingest stores its batch again and the
// re-drive takes that chunk's records alone. Every entry is re-driven,
// none fails, every dedupe key is one job, and every entry is linked to
// the job of its record.
func TestRecordRedriveBesideAnIngestOfTheSameRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	route := customerRoute(t)
	const n = 1000
	var poison []pgstore.Poison
	var jobs []pgstore.NewJob
	for i := range n {
		value := fmt.Appendf(nil, `{"customer_id":"c%d","event_id":"e%d"}`, i%50, i)
		poison = append(poison, parked(int64(i), value, nil))
		j, p := route.Decode(&kgo.Record{Topic: "t", Offset: int64(i), Value: value}, time.Now())
		if p != nil {
			t.Fatal(p.Error)
		}
		jobs = append(jobs, *j)
	}
	if _, err := s.IngestCommit(ctx, pgstore.IngestBatch{Poison: poison}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var ingested, retried atomic.Int64
	var replay sync.WaitGroup
	replay.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			batch := make([]pgstore.NewJob, 30)
			for i, k := range rand.Perm(n)[:30] {
				batch[i] = jobs[k]
			}
			res, err := s.IngestCommit(ctx, pgstore.IngestBatch{Jobs: batch})
			var pe *pgconn.PgError
			switch {
			case errors.As(err, &pe) && pe.Code == "40P01": // deadlock: the ingest loop stores the batch again
				retried.Add(1)
			case err != nil:
				t.Error(err)
				return
			default:
				ingested.Add(res.Inserted)
			}
		}
	})
	res, err := dlq.New(s, []*ingest.Route{route}, nil).RedriveMatching(ctx, dlq.Bulk{Filter: pgstore.DLQFilter{Route: "r"}, By: "test",
		Options: bulk.Options{Expect: n}})
	close(done)
	replay.Wait()
	if err != nil || len(res.Failed) != 0 || res.Done != n {
		t.Fatalf("re-drive: %+v %v, want all %d", res, err, n)
	}
	if got := testenv.Count(t, s, `SELECT count(*) FROM jobs`); got != n {
		t.Errorf("%d jobs, want one a record: %d", got, n)
	}
	if got := testenv.Count(t, s, `SELECT count(*) FROM dlq_entries d JOIN jobs j ON j.id = d.redrive_job_id
		WHERE j.dedupe_key = convert_from(d.payload, 'UTF8')::jsonb->>'event_id'`); got != n {
		t.Errorf("%d entries linked to the job of their record, want %d", got, n)
	}
	if got := testenv.Count(t, s, `SELECT count(*) FROM lanes WHERE head_job_id IS NOT NULL`); got != 50 {
		t.Errorf("%d lanes with a head, want 50", got)
	}
	t.Logf("the replay stored %d of the jobs, and met %d deadlocks", ingested.Load(), retried.Load())
}

// A chunk's records whose transaction fails go alone, each answering for
// itself, and nothing of that transaction stays. Here Postgres refuses one
// record's job for its data (a check this test's schema adds, standing
// for a value that decoding did not foresee): the chunk's transaction
// fails, and taken alone the nine others become jobs while that one is
// still poison, saying why.
func TestRecordChunkThatFailsGoesAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	var poison []pgstore.Poison
	for i := range 10 {
		poison = append(poison, parked(int64(i), fmt.Appendf(nil, `{"customer_id":"c%d","event_id":"e%d"}`, i%3, i), nil))
	}
	if _, err := s.IngestCommit(ctx, pgstore.IngestBatch{Poison: poison}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `ALTER TABLE jobs ADD CONSTRAINT refuse_e5 CHECK (dedupe_key <> 'e5')`); err != nil {
		t.Fatal(err)
	}
	rows, _ := s.Pool().Query(ctx, `SELECT id, src_offset FROM dlq_entries ORDER BY id`)
	offsets, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ ID, Offset int64 }])
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, e := range offsets {
		ids = append(ids, e.ID)
	}
	svc := dlq.New(s, []*ingest.Route{customerRoute(t)}, nil)
	failed, alone, err := svc.RedriveMany(ctx, ids, "test")
	if err != nil || len(failed) != 0 || !slices.Equal(alone, ids) {
		t.Fatalf("the chunk: failed %v, alone %v, %v; want every record alone", failed, alone, err)
	}
	if n := testenv.Count(t, s, `SELECT count(*) FROM jobs`) + testenv.Count(t, s, `SELECT count(*) FROM audit_log`); n != 0 {
		t.Fatalf("%d jobs and audit entries after the failed chunk, want none", n)
	}
	for _, e := range offsets {
		_, err := svc.Redrive(ctx, e.ID, "test")
		switch {
		case e.Offset == 5:
			if !errors.Is(err, dlq.ErrStillPoison) || !strings.Contains(err.Error(), "SQLSTATE 23514") {
				t.Errorf("the refused record alone: %v, want ErrStillPoison with Postgres's reason", err)
			}
		case err != nil:
			t.Errorf("entry %d alone: %v", e.ID, err)
		}
	}
	if n := testenv.Count(t, s, `SELECT count(*) FROM jobs`); n != len(ids)-1 {
		t.Fatalf("%d jobs, want %d", n, len(ids)-1)
	}
}

// redriveEvery re-drives every entry of s as one chunk, and fails the
// test unless the chunk took them all (none left alone); it returns the
// entries' ids and the chunk's failures.
func redriveEvery(t *testing.T, s *pgstore.Store, svc *dlq.Service) ([]int64, []bulk.Failure) {
	t.Helper()
	ctx := context.Background()
	rows, _ := s.Pool().Query(ctx, `SELECT id FROM dlq_entries ORDER BY id`)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	failed, alone, err := svc.RedriveMany(ctx, ids, "test")
	if err != nil || len(alone) != 0 {
		t.Fatalf("re-drive: alone %v, %v", alone, err)
	}
	return ids, failed
}

// askedRereader is a Rereader that notes what each RereadMany asks for.
type askedRereader struct {
	dlq.Rereader
	mu    sync.Mutex
	asked [][]ingest.At
}

func (r *askedRereader) RereadMany(ctx context.Context, ats []ingest.At) ([]*kgo.Record, []error) {
	r.mu.Lock()
	r.asked = append(r.asked, ats)
	r.mu.Unlock()
	return r.Rereader.RereadMany(ctx, ats)
}

// A chunk's records kept in part are read again from Kafka together, as
// many at a time as a chunk's budget of bytes holds by the sizes their
// entries give, and each becomes the job of its whole record; one that
// retention removed fails, saying so, and nothing goes alone.
func TestRecordsKeptInPartAreReadAgainTogether(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	topic := testenv.Topic(t, 2)
	route := compile(t, config.Route{Name: "r", Topic: topic, Ordered: true, Key: config.FieldRef{Field: "customer_id"},
		Dedupe: config.FieldRef{Field: "event_id"}, MaxRecordBytes: 8 << 20, DLQMaxBytes: new(100)})
	var recs []*kgo.Record
	for i := range 120 {
		recs = append(recs, &kgo.Record{Partition: int32(i % 2), Value: fmt.Appendf(nil,
			`{"customer_id":"c%d","event_id":"e%d","pad":%q}`, i%2, i, strings.Repeat("x", 3000))})
	}
	testenv.Produce(t, topic, recs...)
	var poison []pgstore.Poison
	var claimed int
	for i, r := range recs {
		p := pgstore.Poison{Reason: "too_large", Route: "r", Queue: "q", Error: "too large", Payload: r.Value[:100],
			HeaderKeys: []string{}, HeaderVals: [][]byte{}, Truncated: true, RecordBytes: len(r.Value),
			Topic: topic, Partition: r.Partition, Offset: r.Offset}
		if i%12 == 5 {
			// Entries that say their records are larger than they are:
			// a budget's worth of bytes holds four of them.
			p.RecordBytes = 1 << 20
		}
		claimed += p.RecordBytes
		poison = append(poison, p)
	}
	if _, err := s.IngestCommit(ctx, pgstore.IngestBatch{Poison: poison}); err != nil {
		t.Fatal(err)
	}
	var to kadm.Offsets
	to.Add(kadm.Offset{Topic: topic, Partition: 0, At: 1}) // retention removes e0
	if resp, err := testenv.Admin(t).DeleteRecords(ctx, to); err != nil || resp.Error() != nil {
		t.Fatalf("delete records: %v %v", err, resp.Error())
	}
	kopts, err := ingest.ClientOpts(config.Kafka{Brokers: testenv.Brokers(t)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	reader := &askedRereader{Rereader: ingest.NewRereader(kopts)}
	ids, failed := redriveEvery(t, s, dlq.New(s, []*ingest.Route{route}, reader))
	if len(failed) != 1 || failed[0].ID != ids[0] || !strings.Contains(failed[0].Error, "cannot re-drive") ||
		!strings.Contains(failed[0].Error, "retention") {
		t.Errorf("failed %v, want only entry %d, whose record retention removed", failed, ids[0])
	}
	var asked int
	for _, ats := range reader.asked {
		asked += len(ats)
	}
	// Read through, the 120 entries would take 120 reads; by their sizes
	// (10 MiB claimed) they take at least three of 4 MiB.
	if n := len(reader.asked); n < claimed/(4<<20)+1 || n > 4 || asked != 120 {
		t.Errorf("%d reads of %d records in all, want 3 or 4 of 120", n, asked)
	}
	got := testenv.Pairs(t, s, `SELECT dedupe_key, md5(payload) FROM jobs`)
	if len(got) != 119 {
		t.Errorf("%d jobs, want 119", len(got))
	}
	for i, r := range recs[1:] {
		if sum := got[fmt.Sprintf("e%d", i+1)]; sum != fmt.Sprintf("%x", md5.Sum(r.Value)) {
			t.Errorf("job e%d: payload's md5 %s, want the whole record's", i+1, sum)
		}
	}
}

// unansweredRereader is a Kafka that answers no read.
type unansweredRereader struct{}

func (unansweredRereader) RereadMany(_ context.Context, ats []ingest.At) ([]*kgo.Record, []error) {
	errs := make([]error, len(ats))
	for i := range errs {
		errs[i] = context.DeadlineExceeded
	}
	return make([]*kgo.Record, len(ats)), errs
}

// Once Kafka has not answered a chunk's read of records kept in part, the
// chunk's other such records fail as "kafka unavailable" without a read
// of their own: each would wait its timeout (15 s) for the same answer.
func TestRecordsKeptInPartOfAKafkaThatDoesNotAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := testenv.MigratedStore(t)
	var poison []pgstore.Poison
	for i := range 10 {
		p := parked(int64(i), []byte(`{"customer_id":"c1"`), nil)
		p.Reason, p.Truncated, p.RecordBytes = "too_large", true, 1<<20 // four to a read
		poison = append(poison, p)
	}
	if _, err := s.IngestCommit(ctx, pgstore.IngestBatch{Poison: poison}); err != nil {
		t.Fatal(err)
	}
	reader := &askedRereader{Rereader: unansweredRereader{}}
	_, failed := redriveEvery(t, s, dlq.New(s, []*ingest.Route{customerRoute(t)}, reader))
	if len(reader.asked) != 1 || len(reader.asked[0]) != 4 {
		t.Errorf("reads %v, want one of four records", reader.asked)
	}
	if len(failed) != 10 {
		t.Errorf("failed %v, want all ten", failed)
	}
	for _, f := range failed {
		if !strings.Contains(f.Error, "kafka unavailable") {
			t.Errorf("entry %d: %s, want kafka unavailable", f.ID, f.Error)
		}
	}
	if n := testenv.Count(t, s, `SELECT count(*) FROM dlq_entries WHERE redriven_at IS NULL`); n != 10 {
		t.Errorf("%d entries parked after, want all ten", n)
	}
}
