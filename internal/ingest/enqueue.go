package ingest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/internal/metrics"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/jobstate"
)

// Enqueuer makes jobs from the admin API (POST /v1/queues/{queue}/jobs),
// the one way in besides a topic. A job takes its settings (target,
// attempts, backoff, ttl, size limit) from the route of its kind in its
// queue, and its body is decoded as that route decodes a record, so it
// runs exactly like that route's records would.
type Enqueuer struct {
	store    *pgstore.Store
	routes   []*Route
	maxDepth map[string]int // queue → max_depth; 0 or absent: no limit
	// Flow, when set, counts the jobs Enqueue makes as arrivals.
	Flow *metrics.QueueFlow
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
	// and route, within retention, in the API's own dedupe namespace (I2).
	IdempotencyKey string
	ContentType    string
	Payload        []byte
	// Key and Version (the Switchyard-Key and Switchyard-Version headers)
	// place a job of an ordered route in its lane; Key may also be set
	// for an unordered route's job, for lookups. When empty, the route's
	// own key and version sources read them from the body.
	Key     string
	Version string
	// RunAt (Switchyard-Run-At: RFC 3339, or Unix milliseconds) or Delay
	// (Switchyard-Delay: seconds, or a Go duration such as 90s or 72h)
	// make the job run later; empty: the route's own run_at or delay.
	RunAt string
	Delay string
	// Actor is who asked through the admin API (a token's name), for the
	// audit log; empty for an application's enqueue (the Go client),
	// which is not an operator action.
	Actor string
	// Traceparent, when set, is stored as the job's traceparent header:
	// the trace context (the enqueue's span) its attempts' spans are
	// children of. The admin API sets it only while tracing is on.
	Traceparent string
}

// EnqueueResult is what Enqueue did.
type EnqueueResult struct {
	ID    int64
	State jobstate.State
	// Created is false when an earlier request with the same idempotency
	// key made the job.
	Created bool
}

// Errors of Enqueue that are the caller's to fix (a 4xx): they say which
// input is wrong.
var (
	ErrUnknownQueue = errors.New("no such queue")
	ErrQueueFull    = errors.New("queue is over its max_depth")
	// ErrKeyReused means the idempotency key already made a job with a
	// different body: a new request, not a retry.
	ErrKeyReused = errors.New("idempotency key already used for a different body")
)

// InputError is a bad request field.
type InputError struct {
	Field, Msg string
}

func (e *InputError) Error() string { return e.Field + ": " + e.Msg }

// Enqueue makes the job, or finds the one an earlier request with the
// same idempotency key made.
func (e *Enqueuer) Enqueue(ctx context.Context, req EnqueueRequest) (EnqueueResult, error) {
	return e.enqueue(ctx, req, func(ctx context.Context, j pgstore.NewJob) (pgstore.Enqueued, error) {
		return e.store.JobEnqueue(ctx, j, pgstore.Actor{By: req.Actor})
	})
}

// EnqueueTx is Enqueue in the caller's transaction (pgstore's
// JobEnqueueTx): the job exists if and only if tx commits.
func (e *Enqueuer) EnqueueTx(ctx context.Context, tx pgx.Tx, req EnqueueRequest) (EnqueueResult, error) {
	return e.enqueue(ctx, req, func(ctx context.Context, j pgstore.NewJob) (pgstore.Enqueued, error) {
		return e.store.JobEnqueueTx(ctx, tx, j)
	})
}

func (e *Enqueuer) enqueue(ctx context.Context, req EnqueueRequest,
	insert func(context.Context, pgstore.NewJob) (pgstore.Enqueued, error)) (EnqueueResult, error) {
	limit, known := e.maxDepth[req.Queue]
	if !known {
		return EnqueueResult{}, ErrUnknownQueue
	}
	if req.IdempotencyKey == "" {
		return EnqueueResult{}, &InputError{"Idempotency-Key", "required: it makes a retried request find its job instead of making another"}
	}
	r, err := e.route(req.Queue, req.Kind)
	if err != nil {
		return EnqueueResult{}, err
	}
	j, err := r.decodeRequest(req, time.Now())
	if err != nil {
		return EnqueueResult{}, err
	}
	full := false
	if limit > 0 {
		depth, err := e.store.QueueDepth(ctx, req.Queue, limit)
		if err != nil {
			return EnqueueResult{}, err
		}
		full = depth >= limit
	}
	var enq pgstore.Enqueued
	if full {
		// A key that made a job is answered as if the queue had room: a
		// retry gets its job, a different body the same ErrKeyReused.
		enq, err = e.store.JobFindEnqueued(ctx, *j)
		if errors.Is(err, pgstore.ErrNotFound) {
			return EnqueueResult{}, ErrQueueFull
		}
	} else {
		enq, err = insert(ctx, *j)
	}
	if err != nil {
		return EnqueueResult{}, err
	}
	if !enq.SamePayload {
		return EnqueueResult{ID: enq.ID, State: enq.State}, ErrKeyReused
	}
	if enq.Created && e.Flow != nil {
		e.Flow.Arrived(j.Queue, 1)
	}
	return EnqueueResult{ID: enq.ID, State: enq.State, Created: enq.Created}, nil
}

// decodeRequest decodes a request as the route decodes a record whose
// value is the body and whose key is Switchyard-Key: a body the route
// would park is a 400 with the reason. The content type becomes the
// job's one header. Switchyard-Key and Switchyard-Version, when given, win over
// the route's key and version sources; the dedupe key is always the
// Idempotency-Key, in the API's namespace.
func (r *Route) decodeRequest(req EnqueueRequest, now time.Time) (*pgstore.NewJob, error) {
	rec := &kgo.Record{Value: req.Payload}
	in := given{dedupe: &req.IdempotencyKey}
	if req.Key != "" {
		in.key = &req.Key
		rec.Key = []byte(req.Key)
	}
	if req.Version != "" {
		v, err := strconv.ParseInt(req.Version, 10, 64)
		if err != nil {
			return nil, &InputError{"Switchyard-Version", fmt.Sprintf("%q is not an integer", req.Version)}
		}
		in.version = &v
	}
	if p := checkKey("it", req.IdempotencyKey, partDedupe); p != nil { // said after the header's name
		return nil, &InputError{"Idempotency-Key", p.msg}
	}
	at, err := requestRunAt(req, now)
	if err != nil {
		return nil, err
	}
	in.runAt = at
	j, p := r.decode(rec, now, in)
	if p != nil {
		return nil, r.requestError(p, in)
	}
	if r.Lane != nil && r.Lane.Policy != "none" && j.Version == nil {
		return nil, &InputError{"Switchyard-Version", fmt.Sprintf("required: route %s orders its lanes by version (%s)", r.Name, r.Lane.Policy)}
	}
	j.Origin, j.RecordKey = pgstore.OriginAPI, nil
	if req.ContentType != "" {
		j.HeaderKeys, j.HeaderVals = []string{"content-type"}, [][]byte{[]byte(req.ContentType)}
	}
	if req.Traceparent != "" {
		j.HeaderKeys, j.HeaderVals = append(j.HeaderKeys, "traceparent"), append(j.HeaderVals, []byte(req.Traceparent))
	}
	return j, nil
}

// requestRunAt reads Switchyard-Run-At or Switchyard-Delay; nil when
// neither is set.
func requestRunAt(req EnqueueRequest, now time.Time) (*time.Time, error) {
	switch {
	case req.RunAt != "" && req.Delay != "":
		return nil, &InputError{"Switchyard-Delay", "set Switchyard-Run-At or Switchyard-Delay, not both"}
	case req.RunAt != "":
		at, err := ParseRunAt(req.RunAt)
		if err != nil {
			return nil, &InputError{"Switchyard-Run-At", err.Error()}
		}
		if at.Sub(now) > maxRunAhead {
			return nil, &InputError{"Switchyard-Run-At", fmt.Sprintf("%s is more than 100 years away", at.Format(time.RFC3339))}
		}
		return &at, nil
	case req.Delay != "":
		d, err := time.ParseDuration(req.Delay)
		if secs, ferr := strconv.ParseFloat(req.Delay, 64); ferr == nil && !math.IsNaN(secs) && !math.IsInf(secs, 0) {
			d, err = time.Duration(secs*float64(time.Second)), nil
			if secs > maxRunAhead.Seconds() {
				d = maxRunAhead + 1
			}
		}
		switch {
		case err != nil:
			return nil, &InputError{"Switchyard-Delay", fmt.Sprintf("%q is neither seconds nor a duration such as 90s or 72h", req.Delay)}
		case d < 0:
			return nil, &InputError{"Switchyard-Delay", fmt.Sprintf("%q is negative", req.Delay)}
		case d > maxRunAhead:
			return nil, &InputError{"Switchyard-Delay", fmt.Sprintf("%q is more than 100 years", req.Delay)}
		}
		at := now.Add(d)
		return &at, nil
	}
	return nil, nil
}

// requestError names the request field behind a decoding problem.
func (r *Route) requestError(p *problem, in given) error {
	switch {
	case p.part == partKey && (in.key != nil || r.key.isZero()):
		if p.reason == ReasonMissingField {
			return &InputError{"Switchyard-Key", fmt.Sprintf("required: route %s is ordered, its jobs run in per-key lanes", r.Name)}
		}
		return &InputError{"Switchyard-Key", p.msg}
	case p.part == partVersion && p.reason == ReasonMissingField:
		return &InputError{"Switchyard-Version", fmt.Sprintf("required, or the route's version %s in the payload: %s", r.version.name, p.msg)}
	case p.part == partKey && p.reason == ReasonMissingField:
		return &InputError{"Switchyard-Key", fmt.Sprintf("required, or the route's key %s in the payload: %s", r.key.name, p.msg)}
	}
	return &InputError{"body", fmt.Sprintf("%s (route %s would park such a record as %s)", p.msg, r.Name, p.reason)}
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
		return nil, &InputError{"kind", fmt.Sprintf("required; queue %s takes %s", queue, list(kinds))}
	}
	return nil, &InputError{"kind", fmt.Sprintf("no route of queue %s has kind %q; it takes %s", queue, kind, list(kinds))}
}

func list(kinds []string) string {
	if len(kinds) == 0 {
		return "no kinds (no route uses it)"
	}
	return strings.Join(kinds, ", ")
}
