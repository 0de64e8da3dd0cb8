package ingest

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	j := pgstore.NewJob{Route: r.Topic, Kind: r.Kind, Queue: r.Queue, Payload: req.Payload,
		DedupeKey: "api/" + req.IdempotencyKey, MaxAttempts: r.MaxAttempts}
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
	return e.store.JobEnqueue(ctx, j, time.Time{})
}

// route finds the route of kind in queue. Ordered routes take no API
// jobs: a job of a lane needs the key and version its records carry.
func (e *Enqueuer) route(queue, kind string) (*Route, error) {
	var kinds []string
	for _, r := range e.routes {
		if r.Queue != queue {
			continue
		}
		if r.Kind == kind {
			if r.Ordered {
				return nil, &InputError{"kind", fmt.Sprintf("%q is an ordered route's kind: its jobs come from topic %s, which carries their keys and versions", kind, r.Topic)}
			}
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
