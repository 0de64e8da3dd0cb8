package admin

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"

	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard-dev/switchyard/internal/bulk"
	"github.com/switchyard-dev/switchyard/internal/dlq"
	"github.com/switchyard-dev/switchyard/internal/ingest"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/tracing"
	"github.com/switchyard-dev/switchyard/workers"
)

// Enqueuer makes jobs from API requests (ingest.Enqueuer).
type Enqueuer interface {
	Enqueue(ctx context.Context, req ingest.EnqueueRequest) (ingest.EnqueueResult, error)
}

// enqueueRetryAfter is what a client over a queue's max_depth is told to
// wait.
const enqueueRetryAfter = "5"

// jobEnqueue: POST /v1/queues/{queue}/jobs?kind=K with an Idempotency-Key
// header; the body is the job's payload. 202 with the job's id and state
// (201 would promise it exists: it does, but a repeated request answers
// the same, so 202 for both), Location the job.
func (s *Server) jobEnqueue(w http.ResponseWriter, r *http.Request) error {
	if s.cfg.Enqueue == nil {
		return notImplemented(w, r)
	}
	body, err := io.ReadAll(r.Body)
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return &httpError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("request body over %d bytes", tooBig.Limit)}
	}
	if err != nil {
		return badRequest("body", "reading the body: %v", err)
	}
	queue := r.PathValue("queue")
	res, err := s.cfg.Enqueue.Enqueue(r.Context(), ingest.EnqueueRequest{
		Queue: queue, Kind: r.URL.Query().Get("kind"), IdempotencyKey: r.Header.Get("Idempotency-Key"),
		ContentType: r.Header.Get("Content-Type"), Payload: body,
		Key: r.Header.Get("Switchyard-Key"), Version: r.Header.Get("Switchyard-Version"),
		RunAt: r.Header.Get("Switchyard-Run-At"), Delay: r.Header.Get("Switchyard-Delay"), Actor: caller(r).Name,
		// The enqueue's span (trace.go) parents the job's attempts; ""
		// when tracing is off.
		Traceparent: tracing.Format(trace.SpanContextFromContext(r.Context()))})
	var in *ingest.InputError
	switch {
	case errors.Is(err, ingest.ErrUnknownQueue):
		return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("no such queue: %q", queue), field: "queue"}
	case errors.Is(err, ingest.ErrQueueFull):
		w.Header().Set("Retry-After", enqueueRetryAfter)
		return &httpError{status: http.StatusTooManyRequests, msg: fmt.Sprintf("queue %s is over its max_depth; retry later", queue), field: "queue"}
	case errors.Is(err, ingest.ErrKeyReused):
		w.Header().Set("Location", fmt.Sprintf("/v1/jobs/%d", res.ID))
		return &httpError{status: http.StatusConflict, field: "Idempotency-Key",
			msg: fmt.Sprintf("this Idempotency-Key already made job %d with a different body; use a new key for a new request", res.ID)}
	case errors.As(err, &in):
		return badRequest(in.Field, "%s", in.Error())
	case err != nil:
		return err
	}
	w.Header().Set("Location", fmt.Sprintf("/v1/jobs/%d", res.ID))
	s.writeJSON(w, http.StatusAccepted, map[string]any{"id": res.ID, "state": res.State, "created": res.Created})
	return nil
}

// DLQActions re-drives and discards entries (dlq.Service).
type DLQActions interface {
	Redrive(ctx context.Context, id int64, by string) (int64, error)
	Discard(ctx context.Context, id int64, by string) error
	RedriveMatching(ctx context.Context, b dlq.Bulk) (bulk.Result, error)
	DiscardMatching(ctx context.Context, b dlq.Bulk) (bulk.Result, error)
}

func (s *Server) jobCancel(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := s.store.JobCancel(r.Context(), id, caller(r).Name); err != nil {
		return actionError(err, "job", id)
	}
	job, err := s.store.JobGet(r.Context(), id)
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, job)
	return nil
}

// MaxHTTPCheckpointBytes bounds a checkpoint an HTTP target saves (SPEC
// §5): progress, such as a page or a cursor, not data.
const MaxHTTPCheckpointBytes = 4 << 10

// reCheckpoint is the path of POST /v1/jobs/{id}/checkpoint, which the
// guard lets through without the bearer token: its handler checks the
// attempt secret instead, first.
var reCheckpoint = regexp.MustCompile(`^/v1/jobs/[0-9]+/checkpoint$`)

func isCheckpoint(r *http.Request) bool {
	return r.Method == http.MethodPost && reCheckpoint.MatchString(r.URL.Path)
}

// jobCheckpoint saves an HTTP target's checkpoint for its attempt: the
// body (at most 4 KiB), which the job's next attempt receives as
// Switchyard-Checkpoint. The attempt is proven by
// Switchyard-Attempt-Secret from its request, which is all SPEC §5 asks
// for: the secret is checked against the attempt that holds the job now.
// A target may also send the request's Switchyard-Token, which names the
// attempt the secret must be for. The save counts only while that attempt
// holds the job (I4): a secret that does not match, or an attempt that
// lost the job, is 409 and changes nothing. Errors name the attempt by
// its token as such: it is not the Switchyard-Attempt number the target
// also got.
func (s *Server) jobCheckpoint(w http.ResponseWriter, r *http.Request) error {
	if s.cfg.AttemptKey == nil {
		return notImplemented(w, r)
	}
	id, err := pathID(r)
	if err != nil {
		return err
	}
	secret := r.Header.Get("Switchyard-Attempt-Secret")
	if secret == "" {
		return badRequest("Switchyard-Attempt-Secret", "header required: the attempt's secret, as its request carried it")
	}
	attempt := fmt.Sprintf("the attempt that holds job %d", id)
	var token int64
	if h := r.Header.Get("Switchyard-Token"); h != "" {
		if token, err = strconv.ParseInt(h, 10, 64); err != nil {
			return badRequest("Switchyard-Token", "the attempt's token, as its request carried it, or no such header")
		}
		attempt = fmt.Sprintf("job %d's attempt with Switchyard-Token %d", id, token)
	} else if token, err = s.store.JobHolder(r.Context(), id); errors.Is(err, pgstore.ErrLeaseLost) {
		return &httpError{status: http.StatusConflict, field: "Switchyard-Attempt-Secret",
			msg: fmt.Sprintf("no attempt holds job %d (it ended, or its lease was lost): no checkpoint saved", id)}
	} else if err != nil {
		return err
	}
	if !hmac.Equal([]byte(secret), []byte(workers.AttemptSecret(s.cfg.AttemptKey, id, token))) {
		return &httpError{status: http.StatusConflict, field: "Switchyard-Attempt-Secret",
			msg: fmt.Sprintf("not the secret of %s: no checkpoint saved", attempt)}
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, MaxHTTPCheckpointBytes+1))
	if err != nil {
		return badRequest("body", "reading the body: %v", err)
	}
	if len(data) > MaxHTTPCheckpointBytes {
		return &httpError{status: http.StatusRequestEntityTooLarge, field: "body",
			msg: fmt.Sprintf("a checkpoint is at most %d bytes", MaxHTTPCheckpointBytes)}
	}
	switch err := s.store.JobCheckpoint(r.Context(), id, token, data); {
	case errors.Is(err, pgstore.ErrLeaseLost):
		return &httpError{status: http.StatusConflict, field: "Switchyard-Token",
			msg: fmt.Sprintf("the attempt with Switchyard-Token %d no longer holds job %d (it ended, or its lease was lost): no checkpoint saved", token, id)}
	case err != nil:
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) dlqRedrive(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if s.cfg.DLQ == nil {
		return notImplemented(w, r)
	}
	jobID, err := s.cfg.DLQ.Redrive(r.Context(), id, caller(r).Name)
	if err != nil {
		return actionError(err, "DLQ entry", id)
	}
	job, err := s.store.JobGet(r.Context(), jobID)
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"id": id, "job": job})
	return nil
}

func (s *Server) dlqDiscard(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if s.cfg.DLQ == nil {
		return notImplemented(w, r)
	}
	if err := s.cfg.DLQ.Discard(r.Context(), id, caller(r).Name); err != nil {
		return actionError(err, "DLQ entry", id)
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"id": id, "discarded": true})
	return nil
}

// actionError maps the store's errors to statuses a client can act on.
func actionError(err error, what string, id int64) error {
	switch {
	case errors.Is(err, pgstore.ErrNotFound):
		return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("%s %d not found", what, id), field: "id"}
	case errors.Is(err, pgstore.ErrConflict) && err != pgstore.ErrConflict:
		// A conflict that says why (an entry re-driven already, a job
		// that finished) is the answer as it is.
		return &httpError{status: http.StatusConflict, msg: err.Error()}
	case errors.Is(err, pgstore.ErrConflict):
		return &httpError{status: http.StatusConflict, msg: fmt.Sprintf("%s %d is not in a state that allows this", what, id)}
	case errors.Is(err, dlq.ErrStillPoison), errors.Is(err, dlq.ErrCannotRedrive):
		return &httpError{status: http.StatusConflict, msg: err.Error()}
	case errors.Is(err, dlq.ErrKafkaUnavailable):
		return &httpError{status: http.StatusServiceUnavailable, msg: err.Error(), retryAfter: unavailableRetryAfter}
	}
	return err
}
