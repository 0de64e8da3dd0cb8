// Package metrics holds Switchyard's Prometheus collectors. Names and
// labels are the contract of SPEC §7; labels are bounded (queue, kind,
// outcome, topic, partition, route, state, reason), never job ids.
// Collectors are registered on an injected registry, never the global one.
package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// EventsLogger names the loggers (under each component's) of the events
// an operator wants to see one line of each: a record parked, a job
// dead. switchyard dev shows these and warnings only, unless --verbose.
const EventsLogger = "events"

// Metrics is every collector the engine updates.
type Metrics struct {
	QueueOldestAge  *prometheus.GaugeVec
	QueueWaitingAge *prometheus.GaugeVec
	QueuePaused     *prometheus.GaugeVec
	QueueJobs       *prometheus.GaugeVec
	JobDuration     *prometheus.HistogramVec
	QueueWait       *prometheus.HistogramVec
	JobLatency      *prometheus.HistogramVec
	JobAttempts     *prometheus.CounterVec
	DLQEntries      *prometheus.GaugeVec
	LanesBlocked    *prometheus.GaugeVec
	IngestRecords   *prometheus.CounterVec
	IngestErrors    *prometheus.CounterVec
	IngestBatch     prometheus.Histogram
	KafkaLagRecords *prometheus.GaugeVec
	KafkaLagSeconds *prometheus.GaugeVec
	IngestPaused    *prometheus.GaugeVec
	// IngestTopicPaused is IngestPaused by topic, the label of the lag
	// gauges: an alert on a topic's lag can leave out a topic an operator
	// holds, as the latency alert leaves out a paused queue.
	IngestTopicPaused *prometheus.GaugeVec
	FlowThrottled     *prometheus.CounterVec
	// Flow is not a Prometheus collector: the fleet-wide arrival and
	// completion counts GET /v1/queues reports (see QueueFlow).
	Flow *QueueFlow
}

// Outcomes are the outcome labels of switchyard_job_attempts_total
// (SPEC §7): how an attempt ended, and how a job that never ran ended.
var Outcomes = []string{"succeeded", "retry", "dead", "lease_lost", "cancelled", "skipped", "coalesced", "expired"}

// DeclareKinds starts every outcome's series of each kind at zero, so that
// a rate over one is defined before its first event, and a series does not
// appear out of nothing.
func (m *Metrics) DeclareKinds(kinds ...string) {
	for _, kind := range kinds {
		for _, outcome := range Outcomes {
			m.JobAttempts.WithLabelValues(kind, outcome)
		}
	}
}

// New is Register for a registry that holds none of them yet (a test's
// own): it panics where Register would fail.
func New(reg prometheus.Registerer) *Metrics {
	m, err := Register(reg)
	if err != nil {
		panic(err)
	}
	return m
}

// Register creates the collectors and registers them on reg. A registry
// that holds them already (another engine's) is an error, not a panic.
func Register(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Flow: &QueueFlow{},
		QueueOldestAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchyard_queue_oldest_runnable_age_seconds",
			Help: "Age of the oldest job that could run now, per queue. Alert on it.",
		}, []string{"queue"}),
		QueueWaitingAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchyard_queue_oldest_waiting_age_seconds",
			Help: "Age of the oldest job waiting behind a lane's head, per queue: a stuck key shows here.",
		}, []string{"queue"}),
		QueuePaused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchyard_queue_paused",
			Help: "1 while an operator has paused the queue (nothing of it is claimed, so its oldest runnable age grows by design), else 0.",
		}, []string{"queue"}),
		QueueJobs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchyard_queue_jobs",
			Help: "Jobs per queue and state (non-terminal states and dead).",
		}, []string{"queue", "state"}),
		JobDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "switchyard_job_duration_seconds",
			Help: "Handler run time of one attempt.",
			// 1 ms to 70 min: a max_runtime of an hour still has a bucket.
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12),
		}, []string{"kind", "outcome"}),
		QueueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "switchyard_queue_wait_seconds",
			Help:    "From when an attempt could run (its run time, retry time, or its lane reaching it) to its start.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12),
		}, []string{"queue", "kind"}),
		JobLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "switchyard_job_latency_seconds",
			Help:    "From the record's timestamp (or the job's enqueue) to its success: what the client experiences.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12),
		}, []string{"queue", "kind"}),
		JobAttempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_job_attempts_total",
			Help: "How attempts and jobs end, by outcome: succeeded, retry, dead, lease_lost (counted by the process that rescued the lease), cancelled (attempts); skipped (a stale version), coalesced (replaced by a newer job of its key), expired (past its ttl before it started): jobs that never ran.",
		}, []string{"kind", "outcome"}),
		DLQEntries: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchyard_dlq_entries",
			Help: "Parked DLQ entries per queue and reason.",
		}, []string{"queue", "reason"}),
		LanesBlocked: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchyard_lanes_blocked",
			Help: "Lanes held by a dead head under on_dead: block.",
		}, []string{"route"}),
		IngestRecords: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_ingest_records_total",
			Help: "Records consumed by outcome: job, duplicate, poison, filtered (once per route that takes a record; once as filtered when none does).",
		}, []string{"topic", "outcome"}),
		IngestErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_ingest_errors_total",
			Help: "Failed attempts to store a batch (rows and offsets), per topic in the batch; the batch is retried.",
		}, []string{"topic"}),
		IngestBatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "switchyard_ingest_batch_seconds",
			Help:    "Time the consumer spent storing one polled batch: its transaction, and any retries with their backoff. Its rate of sum is how busy the ingest loop is (1: always storing, records wait for the batch ahead).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		KafkaLagRecords: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchyard_kafka_lag_records",
			Help: "Records between the position stored in Postgres and the partition's end (last stable offset), per owned partition.",
		}, []string{"topic", "partition"}),
		KafkaLagSeconds: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchyard_kafka_lag_seconds",
			Help: "When a topic's owned partitions are behind: the age of the last record stored (an upper bound on the oldest unstored record's); 0 when caught up.",
		}, []string{"topic"}),
		IngestPaused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchyard_ingest_paused",
			Help: "1 while this process holds a route's fetching, by cause: operator (paused) or backpressure (its queue at max_depth).",
		}, []string{"route", "cause"}),
		IngestTopicPaused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchyard_ingest_topic_paused",
			Help: "1 while this process holds a topic's fetching, by cause: operator (one of its routes paused) or backpressure (a route's queue at max_depth): its lag grows by design.",
		}, []string{"topic", "cause"}),
		FlowThrottled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_flow_throttled_total",
			Help: "Claims of a route that a fleet-wide limit held back while it had runnable jobs, by limit: max_running, group or rate.",
		}, []string{"route", "limit"}),
	}
	for _, c := range []prometheus.Collector{m.QueueOldestAge, m.QueueWaitingAge, m.QueuePaused, m.QueueJobs, m.JobDuration, m.QueueWait, m.JobLatency,
		m.JobAttempts, m.DLQEntries, m.LanesBlocked, m.IngestRecords, m.IngestErrors, m.IngestBatch, m.KafkaLagRecords,
		m.KafkaLagSeconds, m.IngestPaused, m.IngestTopicPaused, m.FlowThrottled} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering Switchyard's metrics: %w (one engine per registry)", err)
		}
	}
	return m, nil
}
