package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// TestSeveralRoutesOfOneTopic: one topic of order events, two routes
// split by filters (one on a header, one on a JSON field), through the
// broker and real processes. Every record becomes one job per route that
// takes it — across a kill -9 in the middle of ingest, none lost and
// none twice (I1, I2) — a record poison for one route is parked for that
// route only, and records no route takes are counted filtered. Then
// pause, replay and re-drive act on one route by its name.
func TestSeveralRoutesOfOneTopic(t *testing.T) {
	t.Parallel()
	schema, topic := testenv.Schema(t), testenv.Topic(t, 2)
	store := testenv.Store(t, schema)
	syncs, refunds := newTarget(t), newTarget(t)
	routes := func(refundKey string) string {
		return fmt.Sprintf(`queues:
  q: {concurrency: 8, poll_interval: 100ms}
routes:
  - topic: %q
    name: order-sync
    filter: {header: event-type, in: [order.created, order.updated]}
    kind: order.sync
    queue: q
    max_record_bytes: 200
    target: {http: {url: %q, timeout: 5s}}
  - topic: %[1]q
    name: order-refund
    filter: {field: type, in: [order.cancelled]}
    kind: order.refund
    queue: q
    ordered: true%[3]s
    target: {http: {url: %[4]q, timeout: 5s}}
`, topic, syncs.URL(), refundKey, refunds.URL())
	}
	group := testenv.Name("g")
	// Small polls, so that the kill below lands between ingest batches.
	cfg := writeConfig(t, testConfig{Group: group, Schema: schema, Listen: "127.0.0.1:0", KafkaExtra: ", fetch_max_records: 20",
		Body: routes("\n    key: {field: customer_id}")})

	// Five kinds of record, 400 of each: taken by order-sync (by its
	// header), by order-refund (by its field), by both, taken by both and
	// poison for both (too large for order-sync, no customer_id for
	// order-refund), and taken by neither.
	const each = 400
	var recs []*kgo.Record
	for i := range 5 * each {
		customer := fmt.Sprintf(`,"customer_id":"c%d"`, i%7)
		event, typ := "", ""
		switch i % 5 {
		case 0:
			event, typ = "order.created", "order.created"
		case 1:
			typ = "order.cancelled"
		case 2:
			event, typ = "order.updated", "order.cancelled"
		case 3:
			event, typ, customer = "order.created", "order.cancelled", fmt.Sprintf(`,"pad":%q`, strings.Repeat("x", 200))
		case 4:
			event, typ = "order.viewed", "order.viewed"
		}
		r := &kgo.Record{Partition: int32(i % 2), Key: fmt.Appendf(nil, "k%d", i),
			Value: fmt.Appendf(nil, `{"type":%q,"i":%d%s}`, typ, i, customer)}
		if event != "" {
			r.Headers = []kgo.RecordHeader{{Key: "event-type", Value: []byte(event)}}
		}
		recs = append(recs, r)
	}

	a := startRun(t, "run-a", cfg)
	testenv.Produce(t, topic, recs...)
	testenv.Eventually(t, 60*time.Second, "run-a to store some of the jobs", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs`) >= 100
	})
	a.kill()
	t.Logf("killed run-a with %d of %d jobs stored", testenv.Count(t, store, `SELECT count(*) FROM all_jobs`), 4*each)
	b := startRun(t, "run-b", cfg)
	addr := adminAddr(t, b)
	testenv.Eventually(t, 90*time.Second, "every job of both routes to succeed", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'succeeded'`) == 4*each
	})
	for _, c := range []struct {
		route, kind string
		want        int
	}{{"order-sync", "order.sync", 2 * each}, {"order-refund", "order.refund", 2 * each}} {
		if n := testenv.Count(t, store, `SELECT count(DISTINCT (src_partition, src_offset)) FROM all_jobs WHERE route = $1 AND kind = $2`,
			c.route, c.kind); n != c.want {
			t.Errorf("route %s has jobs of %d records, want %d", c.route, n, c.want)
		}
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs`); n != 4*each {
		t.Errorf("%d jobs, want %d: one per record and route that takes it", n, 4*each)
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs j JOIN all_jobs o ON o.src_partition = j.src_partition
		AND o.src_offset = j.src_offset AND o.route = 'order-refund' WHERE j.route = 'order-sync'`); n != each {
		t.Errorf("%d records made a job in both routes, want %d", n, each)
	}
	for _, c := range []struct{ route, reason string }{{"order-refund", "missing_field"}, {"order-sync", "too_large"}} {
		if n := testenv.Count(t, store, `SELECT count(DISTINCT (src_partition, src_offset)) FROM dlq_entries
			WHERE route = $1 AND reason = $2`, c.route, c.reason); n != each {
			t.Errorf("%d records parked for %s as %s, want %d", n, c.route, c.reason, each)
		}
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM dlq_entries`); n != 2*each {
		t.Errorf("%d DLQ entries, want %d: each poison record once for each route it is poison for", n, 2*each)
	}
	for _, c := range []struct {
		tg    *target
		route string
	}{{syncs, "order-sync"}, {refunds, "order-refund"}} {
		for _, call := range c.tg.received() {
			if j := jobByID(t, store, call.JobID); j.Route != c.route {
				t.Fatalf("the target of %s received job %d of route %s", c.route, call.JobID, j.Route)
			}
		}
	}

	// Records no route takes move the offsets on and are counted.
	filtered := metricSum(t, addr, "switchyard_ingest_records_total", `outcome="filtered"`)
	var viewed []*kgo.Record
	for range 10 {
		viewed = append(viewed, &kgo.Record{Value: []byte(`{"type":"order.viewed"}`),
			Headers: []kgo.RecordHeader{{Key: "event-type", Value: []byte("order.viewed")}}})
	}
	testenv.Produce(t, topic, viewed...)
	testenv.Eventually(t, 30*time.Second, "10 more records counted filtered", func() bool {
		return metricSum(t, addr, "switchyard_ingest_records_total", `outcome="filtered"`) == filtered+10
	})
	testenv.Eventually(t, 30*time.Second, "the stored offsets to reach the end of the topic", func() bool {
		return offsetsCovered(storedOffsets(t, store, group, topic), endOffsets(t, testenv.Admin(t), topic))
	})

	// GET /v1/routes lists both, with their filters; a paused route holds
	// its sibling's fetching too, and says so.
	if code, body := api(t, addr, "POST", "/v1/routes/order-refund/pause"); code != http.StatusOK {
		t.Fatalf("pause order-refund: %d %s", code, body)
	}
	code, body := api(t, addr, "GET", "/v1/routes")
	var listed struct {
		Items []struct {
			Name, Topic string
			Filter      *struct {
				Field, Header string
				In            []string
			}
			Paused bool
			HeldBy []string `json:"held_by"`
		}
	}
	if err := json.Unmarshal([]byte(body), &listed); code != http.StatusOK || err != nil || len(listed.Items) != 2 {
		t.Fatalf("GET /v1/routes: %d %s (%v)", code, body, err)
	}
	refund, sync := listed.Items[0], listed.Items[1]
	if refund.Name != "order-refund" || !refund.Paused || refund.Filter == nil || refund.Filter.Field != "type" ||
		sync.Name != "order-sync" || sync.Paused || sync.Topic != topic || sync.Filter == nil || sync.Filter.Header != "event-type" ||
		len(sync.HeldBy) != 1 || sync.HeldBy[0] != "order-refund" {
		t.Fatalf("GET /v1/routes: %s", body)
	}
	if code, body := api(t, addr, "POST", "/v1/routes/order-refund/resume"); code != http.StatusOK {
		t.Fatalf("resume order-refund: %d %s", code, body)
	}

	// Replay of one route re-runs that route's jobs only.
	syncCalls, refundCalls := len(syncs.received()), len(refunds.received())
	code, out, errOut := runCLI("replay", "--config", cfg, "--route", "order-refund", "--from-offset", "0", "--rerun")
	want := fmt.Sprintf("replayed %d records of %s: 0 new jobs, %d already there, %d re-run, 0 newly parked, %d already parked, %d filtered out",
		5*each+10, topic, 2*each, 2*each, each, 2*each+10)
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("replay --route order-refund: exit %d %q %s; want %q", code, out, errOut, want)
	}
	testenv.Eventually(t, 60*time.Second, "the re-run refund jobs to succeed again", func() bool {
		return len(refunds.received()) >= refundCalls+2*each &&
			testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'succeeded'`) == 4*each
	})
	if n := len(syncs.received()); n != syncCalls {
		t.Fatalf("the order-sync target received %d calls during a replay of order-refund, want none", n-syncCalls)
	}

	// A parked record is re-driven through its own route, by name: with
	// order-refund keyed on the record key, it becomes that route's job.
	var entry int64
	if err := store.Pool().QueryRow(t.Context(), `SELECT min(id) FROM dlq_entries WHERE route = 'order-refund'`).Scan(&entry); err != nil {
		t.Fatal(err)
	}
	fixed := writeConfig(t, testConfig{Group: group, Schema: schema, Body: routes("")})
	code, out, errOut = runCLI("dlq", "redrive", "--config", fixed, fmt.Sprint(entry))
	if code != 0 {
		t.Fatalf("dlq redrive %d: exit %d %s %s", entry, code, out, errOut)
	}
	testenv.Eventually(t, 30*time.Second, "the re-driven record's job to succeed on order-refund", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE route = 'order-refund' AND state = 'succeeded'`) == 2*each+1
	})
}
