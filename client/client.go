// Package client enqueues Switchyard jobs from a Go program without Kafka,
// in the program's own Postgres transaction (EnqueueTx) or in one of its
// own (Enqueue) — the seed's first rule: enqueue in the same transaction
// as the write that justified it. SPEC §8.
//
// A job is made exactly as POST /v1/queues/{queue}/jobs makes one: it
// takes its settings (target, attempts, backoff, ttl, flow limits) from
// the route of its kind in its queue, its payload is decoded as that
// route decodes a record (a route keyed by a payload field takes the key
// from it), it is deduplicated by its idempotency key in the API's
// namespace, and a job of an ordered route joins its key's lane. With
// EnqueueTx the job exists if and only if the transaction commits, and
// the queue's idle pools are woken at the commit.
package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/ingest"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/jobstate"
)

// Errors of Enqueue and EnqueueTx that are the caller's to handle.
var (
	// ErrUnknownQueue: the config has no such queue.
	ErrUnknownQueue = ingest.ErrUnknownQueue
	// ErrQueueFull: the queue holds its max_depth unstarted jobs; try
	// again later.
	ErrQueueFull = ingest.ErrQueueFull
	// ErrKeyReused: the idempotency key already made a job with another
	// payload. Enqueued names that job.
	ErrKeyReused = ingest.ErrKeyReused
)

// InputError names the Job field that is wrong, and why.
type InputError struct {
	Field, Msg string
}

func (e *InputError) Error() string { return e.Field + ": " + e.Msg }

// Job is one job to enqueue.
type Job struct {
	// Queue and Kind select the route whose settings the job runs with.
	// Required.
	Queue, Kind string
	// Payload is handed to the target byte for byte.
	Payload []byte
	// IdempotencyKey dedupes: a second Enqueue with the same key (within
	// retention) finds the first one's job. Required, at most 1,024 bytes.
	IdempotencyKey string
	// ContentType is the payload's, for an HTTP target. Optional.
	ContentType string
	// Key and Version place a job of an ordered route in its lane; when
	// empty, the route's own key and version sources read the payload.
	Key     string
	Version *int64
	// RunAt, when set and ahead, makes the job wait until then.
	RunAt time.Time
}

// Enqueued is what became of a Job: its State when Enqueue returned
// (queued, or waiting behind its lane's head; for an idempotency key that
// made a job earlier, that job's).
type Enqueued struct {
	ID    int64
	State jobstate.State
	// Created is false when an earlier Enqueue with the same idempotency
	// key made the job.
	Created bool
}

// Client enqueues jobs into one deployment. Safe for concurrent use.
type Client struct {
	store  *pgstore.Store
	enq    *ingest.Enqueuer
	queues string // the config's, for the error of an unknown one
}

// New opens a client for the deployment cfg describes: its postgres
// block (the schema must be migrated), queues and routes, as the
// processes that run the jobs are configured. Close releases it.
func New(ctx context.Context, cfg *config.Config) (*Client, error) {
	// The routes and queues it enqueues by must be the processes' own.
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var routes []*ingest.Route
	for i, r := range cfg.Routes {
		cr, err := ingest.CompileRoute(r)
		if err != nil {
			return nil, fmt.Errorf("routes[%d]: %w", i, err)
		}
		routes = append(routes, cr)
	}
	store, err := pgstore.Open(ctx, pgstore.Config{URL: cfg.Postgres.URL, Schema: cfg.Postgres.Schema,
		MaxConns: cfg.Postgres.MaxConns})
	if err != nil {
		return nil, err
	}
	if err := store.RequireCurrent(ctx); err != nil {
		store.Close()
		return nil, err
	}
	depths := map[string]int{}
	for name, q := range cfg.Queues {
		depths[name] = q.MaxDepth
	}
	return &Client{store: store, enq: ingest.NewEnqueuer(store, routes, depths),
		queues: strings.Join(cfg.QueueNames(), ", ")}, nil
}

// Close releases the client's connections.
func (c *Client) Close() { c.store.Close() }

// Enqueue makes the job in a transaction of its own.
func (c *Client) Enqueue(ctx context.Context, job Job) (Enqueued, error) {
	e, err := result(c.enq.Enqueue(ctx, request(job)))
	return e, c.named(job, e, err)
}

// EnqueueTx makes the job in tx, a transaction of the caller's on any
// connection to the deployment's database: it exists if and only if tx
// commits. An error leaves tx as Postgres left it (aborted, when the
// error came from a statement); roll it back.
func (c *Client) EnqueueTx(ctx context.Context, tx pgx.Tx, job Job) (Enqueued, error) {
	if tx == nil {
		return Enqueued{}, errors.New("EnqueueTx: tx is nil: pass the transaction the job is to commit with, or call Enqueue")
	}
	e, err := result(c.enq.EnqueueTx(ctx, tx, request(job)))
	return e, c.named(job, e, err)
}

// named says which queue or job the errors the caller handles are about
// (errors.Is still finds them): theirs alone say "no such queue".
func (c *Client) named(job Job, e Enqueued, err error) error {
	switch {
	case errors.Is(err, ErrUnknownQueue):
		return fmt.Errorf("Queue: %q: %w (the config has %s)", job.Queue, err, c.queues)
	case errors.Is(err, ErrQueueFull):
		return fmt.Errorf("Queue: %q: %w; try again later", job.Queue, err)
	case errors.Is(err, ErrKeyReused):
		return fmt.Errorf("IdempotencyKey: %w: job %d has it", err, e.ID)
	}
	return err
}

func request(j Job) ingest.EnqueueRequest {
	req := ingest.EnqueueRequest{Queue: j.Queue, Kind: j.Kind, IdempotencyKey: j.IdempotencyKey,
		ContentType: j.ContentType, Payload: j.Payload, Key: j.Key}
	if j.Version != nil {
		req.Version = strconv.FormatInt(*j.Version, 10)
	}
	if !j.RunAt.IsZero() {
		req.RunAt = j.RunAt.Format(time.RFC3339Nano)
	}
	return req
}

// jobFields names, for an InputError, the Job field behind each request
// field the enqueue path reports (it speaks the admin API's headers).
var jobFields = map[string]string{"Idempotency-Key": "IdempotencyKey", "Switchyard-Key": "Key",
	"Switchyard-Version": "Version", "Switchyard-Run-At": "RunAt", "kind": "Kind", "body": "Payload"}

func result(r ingest.EnqueueResult, err error) (Enqueued, error) {
	var in *ingest.InputError
	if errors.As(err, &in) {
		f, ok := jobFields[in.Field]
		if !ok {
			f = in.Field
		}
		err = &InputError{Field: f, Msg: in.Msg}
	}
	return Enqueued{ID: r.ID, State: r.State, Created: r.Created}, err
}
