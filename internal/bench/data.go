package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/ingest"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

// partitions of every topic the bench creates.
const partitions = 4

// queue is the one queue every figure uses.
const queue = "bench"

func randomName(prefix string) string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}

// route is the unordered Go-handler route all figures start from: the
// record key is the job key, the dedupe key is the record's unique `id`.
// Figures change what they measure (Ordered, Target) on a copy. A round
// after the first (--repeat) gets a topic of its own: the bench's topics
// are never reused, so each round ingests from a fresh one.
func (e *env) route(name string) config.Route {
	topic := e.schema + "_" + name
	if e.round > 1 {
		topic += fmt.Sprintf("_r%d", e.round)
	}
	return config.Route{
		Topic:  topic,
		Kind:   "bench." + name,
		Queue:  queue,
		Dedupe: config.FieldRef{Field: "id"},
		Target: config.Target{Go: true},
	}
}

// compile fills a route's defaults as config loading would and compiles
// it for decoding.
func compile(route config.Route) (config.Route, *ingest.Route, error) {
	c := config.Config{Routes: []config.Route{route}}
	c.SetDefaults()
	cr, err := ingest.CompileRoute(c.Routes[0])
	return c.Routes[0], cr, err
}

// shape is what the records of a figure look like. The figures of
// `bench` use the default shape; the scale curves vary one part of it.
type shape struct {
	// keys is how many distinct keys the records use.
	keys int
	// stride spreads those keys over a larger key space: record i has key
	// k<(i mod keys) × stride>.
	stride int
	// pad makes a value len(pad)+80 bytes long.
	pad string
}

// defaultShape: cfg.Keys keys, values of about 200 bytes, a typical
// small event.
func defaultShape(cfg Config) shape {
	return shape{keys: cfg.Keys, stride: 1, pad: strings.Repeat("x", 120)}
}

// record i of a topic: a JSON value with a unique id, keyed by one of the
// shape's keys, on partition i mod 4 at offset i div 4 (where produce
// puts it on a fresh topic).
func (e *env) record(topic string, i int) *kgo.Record {
	key := (i % e.shape.keys) * e.shape.stride
	return &kgo.Record{
		Topic:     topic,
		Partition: int32(i % partitions),
		Offset:    int64(i / partitions),
		Key:       fmt.Appendf(nil, "k%d", key),
		Value:     fmt.Appendf(nil, `{"id":"evt-%010d","customer":"k%d","amount":%d,"note":"%s"}`, i, key, i%997, e.shape.pad),
	}
}

// createTopic makes a topic of the bench's, deleted by teardown.
func (e *env) createTopic(ctx context.Context, topic string) error {
	resp, err := e.admin.CreateTopic(ctx, partitions, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	e.topics = append(e.topics, topic)
	// A new topic takes a moment to have leaders; a producer that gets
	// there first waits out a metadata backoff, and the run would time
	// that instead of Switchyard.
	return waitUntil(ctx, nil, 50*time.Millisecond, "topic "+topic+" leaders", func() (int64, bool, error) {
		details, err := e.admin.ListTopics(ctx, topic)
		if err != nil {
			return 0, false, err
		}
		d := details[topic]
		var led int64
		for _, p := range d.Partitions {
			if p.Err == nil && p.Leader >= 0 {
				led++
			}
		}
		return led, d.Err == nil && led == partitions, nil
	})
}

// produce writes records 0..n-1 of topic and waits until all are acked.
func (e *env) produce(ctx context.Context, topic string, n int) error {
	var fe firstError
	for i := range n {
		r := e.record(topic, i)
		r.Offset = 0
		e.kafka.Produce(ctx, r, fe.record)
	}
	if err := e.kafka.Flush(ctx); err != nil {
		return err
	}
	return fe.get()
}

// jobs decodes records first..first+n-1 of route into job rows, exactly
// as the consumer would.
func (e *env) jobs(route config.Route, first, n int) ([]pgstore.NewJob, error) {
	_, cr, err := compile(route)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := make([]pgstore.NewJob, 0, n)
	for i := first; i < first+n; i++ {
		job, poison := cr.Decode(e.record(route.Topic, i), now)
		if poison != nil {
			return nil, fmt.Errorf("record %d: %s", i, poison.Error)
		}
		out = append(out, *job)
	}
	return out, nil
}

// enqueue queues records first..first+n-1 of route as jobs through the
// ingest path (pgstore.IngestCommit, 10,000 per transaction), so that an
// ordered route gets its lanes as it would from Kafka. Not timed.
func (e *env) enqueue(ctx context.Context, route config.Route, first, n int) error {
	const batch = 10_000
	for at := first; at < first+n; at += batch {
		jobs, err := e.jobs(route, at, min(batch, first+n-at))
		if err != nil {
			return err
		}
		if _, err := e.store.IngestCommit(ctx, pgstore.IngestBatch{Group: e.schema, Jobs: jobs}); err != nil {
			return fmt.Errorf("enqueue: %w", err)
		}
	}
	return nil
}

// historyFigure names the second claim latency figure after the history
// size: claim_ms_p99_at_10m for the default 10,000,000.
func historyFigure(n int) string { return "claim_ms_p99_at_" + countName(n) }

// futureFigure names the claim latency figure with n future jobs (SPEC
// §9 claim_ms_p99_at_1m_future at the default size).
func futureFigure(n int) string { return "claim_ms_p99_at_" + countName(n) + "_future" }

// countName spells n as figure names do: 10m, 500k, 1234.
func countName(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dm", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}
