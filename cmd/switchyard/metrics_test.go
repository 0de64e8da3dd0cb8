package main

import (
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/internal/metrics"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// TestMetricsOfARealProcess scrapes a real process after records of an
// ordered route ran: the queue-wait and end-to-end latency histograms
// (which counts from the record's timestamp, so records produced with a
// timestamp a minute old show a minute or more), the oldest waiting age,
// every depth state of every queue zero included, and the filtered
// outcome of a record no route takes. Every metric that the Grafana
// dashboard and the alerting rules in deploy/ use is in that scrape.
func TestMetricsOfARealProcess(t *testing.T) {
	t.Parallel()
	schema, topic := testenv.Schema(t), testenv.Topic(t, 2)
	store := testenv.Store(t, schema)
	tg := newTarget(t)
	cfg := writeConfig(t, testConfig{Group: testenv.Name("g"), Schema: schema, Listen: "127.0.0.1:0", Body: fmt.Sprintf(`queues:
  q: {concurrency: 4, poll_interval: 100ms}
  idle: {concurrency: 1}
routes:
  - {topic: %q, name: orders, kind: k, queue: q, key: {field: c}, ordered: true, max_running: 4,
     filter: {field: type, in: [order]}, target: {http: {url: %q, timeout: 5s}}}
`, topic, tg.URL())})
	p := startRun(t, "run-metrics", cfg)
	addr := adminAddr(t, p)
	old := time.Now().Add(-time.Minute)
	var recs []*kgo.Record
	for i := range 20 {
		recs = append(recs, &kgo.Record{Timestamp: old, Value: fmt.Appendf(nil, `{"type":"order","c":"c%d"}`, i%3)})
	}
	recs = append(recs, &kgo.Record{Value: []byte(`{"type":"view"}`)})
	testenv.Produce(t, topic, recs...)
	testenv.Eventually(t, 30*time.Second, "the 20 jobs to succeed", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'succeeded'`) == 20
	})
	testenv.Eventually(t, 30*time.Second, "a sample of the gauges (every 5 s) with the partitions owned", func() bool {
		body := scrape(t, addr)
		return strings.Contains(body, `switchyard_queue_jobs{queue="idle",state="waiting"} 0`) &&
			strings.Contains(body, "\nswitchyard_kafka_lag_records{")
	})
	body := scrape(t, addr)
	for _, want := range []string{
		`switchyard_queue_wait_seconds_count{kind="k",queue="q"} 20`,
		`switchyard_job_latency_seconds_count{kind="k",queue="q"} 20`,
		`switchyard_queue_oldest_waiting_age_seconds{queue="q"}`,
		`switchyard_queue_oldest_waiting_age_seconds{queue="idle"} 0`,
		fmt.Sprintf(`switchyard_ingest_records_total{outcome="filtered",topic=%q} 1`, topic),
		`switchyard_ingest_paused{cause="operator",route="orders"} 0`,
		fmt.Sprintf(`switchyard_ingest_topic_paused{cause="operator",topic=%q} 0`, topic),
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics has no %s:\n%s", want, grepLines(body, strings.SplitN(want, "{", 2)[0]))
		}
	}
	// The 21 records were stored in at least one batch, each timed.
	if !strings.Contains(body, "\nswitchyard_ingest_batch_seconds_count ") || strings.Contains(body, "\nswitchyard_ingest_batch_seconds_count 0\n") {
		t.Errorf("/metrics has no stored batch timed:\n%s", grepLines(body, "switchyard_ingest_batch_seconds_count"))
	}
	for _, state := range []string{"waiting", "queued", "running", "retrying", "dead", "reserved"} {
		if want := fmt.Sprintf(`switchyard_queue_jobs{queue="idle",state=%q} 0`, state); !strings.Contains(body, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	for _, file := range []string{"../../deploy/grafana/switchyard.json", "../../deploy/prometheus/alerts.yaml"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		used := regexp.MustCompile(`switchyard_[a-z_]+`).FindAllString(string(b), -1)
		if len(used) < 5 {
			t.Fatalf("%s uses %d metrics", file, len(used))
		}
		for _, name := range used {
			if !strings.Contains(body, "\n"+name+"{") && !strings.Contains(body, "\n"+name+" ") &&
				!strings.Contains(body, "\n"+name+"_bucket{") {
				t.Errorf("%s uses %s, which a real process's /metrics does not have", file, name)
			}
		}
	}
	sum := metricSum(t, addr, "switchyard_job_latency_seconds_sum", `queue="q"`)
	if sum < 20*60 {
		t.Errorf("the latency of 20 jobs whose records are a minute old sums to %.1f s, want 1200 s or more", sum)
	}
	if wait := metricSum(t, addr, "switchyard_queue_wait_seconds_sum", `queue="q"`); wait >= sum {
		t.Errorf("queue wait %.1f s is not below the end-to-end latency %.1f s: it counts from when a job could run", wait, sum)
	}
}

// TestJobEndsMadeInSQLAreCounted scrapes a real process for the ends of
// jobs that never ran, which SQL makes: stale versions skipped when a
// lane's head ends (v3 and v4 behind v5) and when a stale record reaches
// an idle lane (v1), both tallied by the promoting statement and taken by
// a sampler; a job expired by the rescuer, its queue paused past its ttl;
// and every outcome's series of every kind, zero included.
func TestJobEndsMadeInSQLAreCounted(t *testing.T) {
	t.Parallel()
	schema, topic := testenv.Schema(t), testenv.Topic(t, 1)
	store := testenv.Store(t, schema)
	tg := newTarget(t)
	release := make(chan struct{})
	tg.setBehaviour(func(r *http.Request, c call) int {
		if strings.Contains(string(c.Body), `"v":5`) {
			<-release
		}
		return 0
	})
	cfg := writeConfig(t, testConfig{Group: testenv.Name("g"), Schema: schema, Listen: "127.0.0.1:0", Body: fmt.Sprintf(`queues:
  q: {concurrency: 4, poll_interval: 100ms}
  held: {concurrency: 1, poll_interval: 100ms}
routes:
  - {topic: %[1]q, name: versions, kind: kv, queue: q, key: {field: c}, ordered: true,
     version: {field: v, policy: newer}, filter: {field: type, in: [v]}, target: {http: {url: %[2]q, timeout: 30s}}}
  - {topic: %[1]q, name: late, kind: kl, queue: held, ttl: 1s,
     filter: {field: type, in: [late]}, target: {http: {url: %[2]q, timeout: 5s}}}
`, topic, tg.URL())})
	p := startRun(t, "run-sql-ends", cfg)
	addr := adminAddr(t, p)
	if code, body := api(t, addr, "POST", "/v1/queues/held/pause"); code != http.StatusOK {
		t.Fatalf("pause held: %d %s", code, body)
	}
	v := func(n int) *kgo.Record { return &kgo.Record{Value: fmt.Appendf(nil, `{"type":"v","c":"x","v":%d}`, n)} }
	testenv.Produce(t, topic, v(5), &kgo.Record{Value: []byte(`{"type":"late"}`)})
	testenv.Eventually(t, 30*time.Second, "v5 at the target", func() bool { return len(tg.received()) == 1 })
	testenv.Produce(t, topic, v(3), v(4))
	testenv.Eventually(t, 30*time.Second, "v3 and v4 waiting behind v5", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'waiting'`) == 2
	})
	close(release)
	testenv.Eventually(t, 30*time.Second, "v5 succeeded, v3 and v4 skipped", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE kind = 'kv' AND state = 'skipped'`) == 2
	})
	testenv.Produce(t, topic, v(1))
	testenv.Eventually(t, 30*time.Second, "v1 skipped at ingest, the late job expired, and both counted", func() bool {
		body := scrape(t, addr)
		return strings.Contains(body, `switchyard_job_attempts_total{kind="kv",outcome="skipped"} 3`) &&
			strings.Contains(body, `switchyard_job_attempts_total{kind="kl",outcome="expired"} 1`)
	})
	if n := testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'skipped'`); n != 3 {
		t.Errorf("%d jobs skipped, want 3", n)
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM outcome_tally`); n != 0 {
		t.Errorf("%d tally rows left after the sampler took them", n)
	}
	body := scrape(t, addr)
	for _, outcome := range metrics.Outcomes {
		if want := fmt.Sprintf(`switchyard_job_attempts_total{kind="kl",outcome=%q}`, outcome); !strings.Contains(body, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	if calls := len(tg.received()); calls != 1 {
		t.Errorf("the target got %d calls, want 1 (v5 only)", calls)
	}
}

// scrape reads a process's /metrics.
func scrape(t *testing.T, addr string) string {
	t.Helper()
	_, body := api(t, addr, "GET", "/metrics")
	return body
}
