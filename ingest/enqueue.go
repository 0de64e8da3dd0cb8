package ingest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

// Enqueuer makes jobs from the admin API (POST /v1/queues/{queue}/jobs),
// the one way in besides a topic. A job takes its settings (target,
// attempts, backoff, ttl, size limit) from the route of its kind in its
// queue, so it runs exactly like that route's records would.
type Enqueuer struct {
	store    *pgstore.Store
	routes   []*Route
	maxDepth map[string]int // queue → max_depth; 0 or absent: no limit
}

// NewEnqueuer builds an Enqueuer over the compiled routes; maxDepth gives
// each queue's max_depth.
func NewEnqueuer(store *pgstore.Store, routes []*Route, maxDepth map[string]int) *Enqueuer {
	return &Enqueuer{store: store, routes: routes, maxDepth: maxDepth}
}

// EnqueueRequest is one POST.
type EnqueueRequest struct {
	Queue, Kind string
	// IdempotencyKey dedupes retries of the same request: one job per key
	// and route, within retention (I2).
	IdempotencyKey string
	ContentType    string
	Payload        []byte
	// Key and Version place a job of an ordered route in its lane (the
	// Switchyard-Key and Switchyard-Version headers); Key may also be set
	// for an unordered route's job, for lookups.
	Key     string
	Version string
}

// Errors of Enqueue that are the caller's to fix (a 4xx): they say which
// input is wrong.
var (
	ErrUnknownQueue = errors.New("no such queue")
	ErrQueueFull    = errors.New("queue is over its max_depth")
)

// InputError is a bad request field.
type InputError struct {
	Field, Msg string
}

func (e *InputError) Error() string { return e.Field + ": " + e.Msg }

// maxIdempotencyKey bounds the header, which becomes part of the dedupe
// key's index entry.
const maxIdempotencyKey = 200

// Enqueue makes the job, or finds the one an earlier request with the
// same idempotency key made. created says which.
func (e *Enqueuer) Enqueue(ctx context.Context, req EnqueueRequest) (id int64, state string, created bool, err error) {
	limit, known := e.maxDepth[req.Queue]
	if !known {
		return 0, "", false, ErrUnknownQueue
	}
	if req.IdempotencyKey == "" || len(req.IdempotencyKey) > maxIdempotencyKey || !utf8.ValidString(req.IdempotencyKey) ||
		strings.ContainsRune(req.IdempotencyKey, 0) {
		return 0, "", false, &InputError{"Idempotency-Key", fmt.Sprintf("header required: 1 to %d bytes of text", maxIdempotencyKey)}
	}
	r, err := e.route(req.Queue, req.Kind)
	if err != nil {
		return 0, "", false, err
	}
	if len(req.Payload) > r.MaxRecordBytes {
		return 0, "", false, &InputError{"body", fmt.Sprintf("%d bytes, over the route's max_record_bytes %d", len(req.Payload), r.MaxRecordBytes)}
	}
	j := pgstore.NewJob{Route: r.Topic, Kind: r.Kind, Queue: r.Queue, Payload: req.Payload, Key: req.Key,
		DedupeKey: "api/" + req.IdempotencyKey, MaxAttempts: r.MaxAttempts, Lane: r.Lane}
	if err := laneFields(r, &j, req); err != nil {
		return 0, "", false, err
	}
	if limit > 0 {
		full, err := e.store.QueueFull(ctx, req.Queue, limit)
		if err != nil {
			return 0, "", false, err
		}
		if full {
			// A retry of a request that was accepted gets its answer again.
			found, err := e.store.JobList(ctx, pgstore.JobFilter{Route: j.Route, DedupeKey: j.DedupeKey, Limit: 1})
			if err != nil {
				return 0, "", false, err
			}
			if len(found) == 1 {
				return found[0].ID, found[0].State, false, nil
			}
			return 0, "", false, ErrQueueFull
		}
	}
	if req.ContentType != "" {
		j.HeaderKeys, j.HeaderVals = []string{"content-type"}, [][]byte{[]byte(req.ContentType)}
	}
	if r.TTL > 0 {
		d := time.Now().Add(r.TTL)
		j.Deadline = &d
	}
	if j.Lane == nil {
		return e.store.JobEnqueue(ctx, j, time.Time{})
	}
	// A lane's job goes in through ingest's path, which promotes lanes;
	// it takes its place by version, then before records of that version.
	res, err := e.store.IngestCommit(ctx, pgstore.IngestBatch{Jobs: []pgstore.NewJob{j}})
	if err != nil {
		return 0, "", false, err
	}
	found, err := e.store.JobList(ctx, pgstore.JobFilter{Route: j.Route, DedupeKey: j.DedupeKey, Limit: 1})
	if err != nil {
		return 0, "", false, err
	}
	if len(found) != 1 {
		return 0, "", false, fmt.Errorf("enqueued job %s/%s not found", j.Route, j.DedupeKey)
	}
	return found[0].ID, found[0].State, res.Inserted == 1, nil
}

// laneFields checks and sets the key and version a job of an ordered route
// needs, from the request's headers.
func laneFields(r *Route, j *pgstore.NewJob, req EnqueueRequest) error {
	if req.Key != "" && (!utf8.ValidString(req.Key) || strings.ContainsRune(req.Key, 0)) {
		return &InputError{"Switchyard-Key", "not valid text"}
	}
	if req.Version != "" {
		v, err := strconv.ParseInt(req.Version, 10, 64)
		if err != nil {
			return &InputError{"Switchyard-Version", fmt.Sprintf("%q is not an integer", req.Version)}
		}
		j.Version = &v
	}
	if r.Lane == nil {
		return nil
	}
	if req.Key == "" {
		return &InputError{"Switchyard-Key", fmt.Sprintf("header required: route %s is ordered, its jobs run in per-key lanes", r.Topic)}
	}
	if r.Lane.Policy != "none" && j.Version == nil {
		return &InputError{"Switchyard-Version", fmt.Sprintf("header required: route %s orders its lanes by version (%s)", r.Topic, r.Lane.Policy)}
	}
	return nil
}

// route finds the route of kind in queue.
func (e *Enqueuer) route(queue, kind string) (*Route, error) {
	var kinds []string
	for _, r := range e.routes {
		if r.Queue != queue {
			continue
		}
		if r.Kind == kind {
			return r, nil
		}
		kinds = append(kinds, r.Kind)
	}
	slices.Sort(kinds)
	if kind == "" {
		return nil, &InputError{"kind", fmt.Sprintf("query parameter required; queue %s takes %s", queue, list(kinds))}
	}
	return nil, &InputError{"kind", fmt.Sprintf("no route of queue %s has kind %q; it takes %s", queue, kind, list(kinds))}
}

func list(kinds []string) string {
	if len(kinds) == 0 {
		return "no kinds (no route uses it)"
	}
	return strings.Join(kinds, ", ")
}
