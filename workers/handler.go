package workers

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-dev/switchyard/jobstate"
)

// Job is what a handler receives for one attempt. It is a read-only view
// of the job row at claim time.
type Job struct {
	ID          int64
	Kind        string
	Queue       string
	Route       string
	Key         string
	Version     *int64 // nil when the route carries no version
	Attempt     int    // 1-based, counted at claim time (I5)
	MaxAttempts int
	Token       int64 // fencing token of this attempt's lease
	Payload     []byte
	Headers     []Header
	Source      Source // zero for jobs that did not come from Kafka
	CreatedAt   time.Time
	// RunnableAt is when this attempt could first run: the job's run time,
	// or its retry's; a lane job's, when its lane reached it.
	RunnableAt time.Time
	// ArrivedAt is the record's timestamp for a job from Kafka, else
	// CreatedAt: where the job's end-to-end latency starts.
	ArrivedAt time.Time
	// Ordered is set for jobs of ordered routes: the job runs alone in its
	// key's lane.
	Ordered bool
	// Checkpoint is the progress the last SaveCheckpoint of an earlier
	// attempt stored; nil when none did.
	Checkpoint []byte
	// PreviousAttemptSpan is the W3C traceparent of the span of the
	// job's last attempt that recorded an outcome while tracing was on:
	// this attempt's span links to it. "" otherwise. (A handler reaches
	// its own attempt's span through its context.)
	PreviousAttemptSpan string

	// finished is the state the handler's own transaction ended the job
	// in (MarkFinished), nil until then.
	finished atomic.Pointer[jobstate.State]
	// attempt is the lease that the dispatcher that handed the job out
	// holds for it (SetAttempt); nil for a job no dispatcher handed out.
	attempt Attempt
	// result is what SetResult kept, for the outcome of a success.
	resultMu   sync.Mutex
	result     []byte
	resultType string
}

// SetResult keeps data, of the given content type, as the job's result
// if this attempt succeeds: GET /v1/jobs/{id} shows it and
// GET /v1/jobs/{id}/result answers it. Up to the route's
// result_max_bytes is kept (the rest is cut); each call replaces the
// last; a failed attempt's result is not kept, nor that of an attempt
// whose success Applier.Apply recorded (it writes no result).
func (j *Job) SetResult(contentType string, data []byte) {
	j.resultMu.Lock()
	defer j.resultMu.Unlock()
	j.result, j.resultType = bytes.Clone(data), contentType
}

// Result is what SetResult kept: nil when nothing was.
func (j *Job) Result() (contentType string, data []byte) {
	j.resultMu.Lock()
	defer j.resultMu.Unlock()
	return j.resultType, j.result
}

// ErrNoCheckpointStore is SaveCheckpoint's error for a job that no
// dispatcher handed out (a handler called directly, e.g. in a test).
var ErrNoCheckpointStore = errors.New("checkpoint: this job was not handed out by a dispatcher")

// SaveCheckpoint stores progress durably for the next attempt of this
// job, which finds it in Checkpoint: a handler that processes a long list
// saves where it got to and, after a crash or a retry, resumes there
// instead of starting over. Only the attempt that holds the job can save
// (ErrLeaseLost otherwise, and the handler should stop). At most 1 MiB;
// each save replaces the last.
func (j *Job) SaveCheckpoint(ctx context.Context, data []byte) error {
	if j.attempt == nil {
		return ErrNoCheckpointStore
	}
	return j.attempt.SaveCheckpoint(ctx, data)
}

// AttemptSecret proves this attempt to POST /v1/jobs/{id}/checkpoint
// (the function AttemptSecret); the HTTP target sends it to its URL. ""
// when the deployment has no attempt key or no dispatcher handed the job
// out. It is made when asked for, not for every attempt: an HMAC was a
// twelfth of a no-op job's CPU in the process.
func (j *Job) AttemptSecret() string {
	if j.attempt == nil {
		return ""
	}
	return j.attempt.Secret()
}

// Attempt is the lease a dispatcher holds for a job it hands out: what
// the job's SaveCheckpoint and AttemptSecret ask of it.
type Attempt interface {
	// SaveCheckpoint stores data under the attempt's fencing token
	// (ErrLeaseLost when the attempt no longer holds the job).
	SaveCheckpoint(ctx context.Context, data []byte) error
	// Secret is the attempt's AttemptSecret, "" for none.
	Secret() string
}

// SetAttempt is how a dispatcher gives a job it hands out its lease.
// Handlers do not call it.
func (j *Job) SetAttempt(a Attempt) { j.attempt = a }

// MarkFinished records that the job's outcome, state, was already
// committed by the handler itself (Applier.Apply completes the job, or
// skips a stale version, in the handler's own transaction); the
// dispatcher then writes nothing more for this attempt. Applier.Apply
// calls it; handlers do not, as the job would then stay running until
// its lease expired.
func (j *Job) MarkFinished(state jobstate.State) { j.finished.Store(&state) }

// Finished reports the state MarkFinished recorded, and whether it was
// called.
func (j *Job) Finished() (jobstate.State, bool) {
	if s := j.finished.Load(); s != nil {
		return *s, true
	}
	return "", false
}

// Header is one Kafka record header, kept in record order (keys may repeat).
type Header struct {
	Key   string
	Value []byte
}

// Source is the Kafka position a job was made from.
type Source struct {
	Topic     string
	Partition int32
	Offset    int64
}

// String renders the source as topic/partition/offset, the form used in
// the Switchyard-Source header and in logs.
func (s Source) String() string {
	return fmt.Sprintf("%s/%d/%d", s.Topic, s.Partition, s.Offset)
}

// Handler runs one attempt of a job. Returning nil marks the job
// succeeded; Permanent(err) makes it dead at once; RetryAfter(d, err)
// schedules the next attempt after d (capped by the route's backoff.max);
// any other error is transient and retried with backoff.
//
// The context is cancelled when the job is cancelled, its lease is lost,
// it runs past its queue's max_runtime, or the process shuts down;
// context.Cause tells which (ErrCancelled, ErrLeaseLost, ErrMaxRuntime,
// ErrShutdown).
type Handler interface {
	Handle(ctx context.Context, job *Job) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, job *Job) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, job *Job) error { return f(ctx, job) }

// Cancellation causes, readable with context.Cause inside a handler.
var (
	// ErrLeaseLost: the attempt no longer holds the job (its lease expired
	// and it may run elsewhere). Also what SaveCheckpoint and
	// Applier.Apply return when the attempt lost its lease.
	ErrLeaseLost = errors.New("switchyard: lease lost")
	// ErrShutdown: the process is stopping and its grace period is over;
	// the job goes back to its queue.
	ErrShutdown = errors.New("switchyard: process shutting down")
	// ErrMaxRuntime: the attempt ran past its queue's max_runtime; it
	// fails as a transient error would (retried, or dead when it was the
	// last attempt). The cause says the limit: "max_runtime exceeded (5m0s)".
	ErrMaxRuntime = errors.New("max_runtime exceeded")
	// ErrCancelled: an operator cancelled the job; it ends cancelled. The
	// handler learns it within a second (the cancel's NOTIFY), or at the
	// pool's next heartbeat when the notice was missed.
	ErrCancelled = errors.New("switchyard: job cancelled")
)

type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as not worth retrying: the job goes dead at once.
// A nil err is still a failure, recorded as "permanent failure": the
// handler asked for the job to end dead.
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err (or anything it wraps) was marked Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

type retryAfterError struct {
	after time.Duration
	err   error
}

func (e *retryAfterError) Error() string {
	return fmt.Sprintf("retry after %s: %v", e.after, e.err)
}
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfter asks for the next attempt no sooner than d. The delay is still
// capped by the route's backoff.max, and max_attempts still applies. A
// negative d counts as 0; a nil err is still a failure, recorded as
// "retry requested".
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	if d < 0 {
		d = 0
	}
	return &retryAfterError{after: d, err: err}
}

// RetryDelay returns the delay requested with RetryAfter, if any.
func RetryDelay(err error) (time.Duration, bool) {
	var r *retryAfterError
	if errors.As(err, &r) {
		return r.after, true
	}
	return 0, false
}

// AttemptSecret is the secret of attempt token of job id under a
// deployment's attempt key: HMAC-SHA256 of "id:token", hex. Whoever holds
// it may save a checkpoint for that attempt, and only while the attempt
// holds the job; it is worth nothing for another attempt or job.
//
// It runs for every attempt through the HTTP target, so it formats into
// stack buffers: fmt and hex.EncodeToString were half its cost.
func AttemptSecret(key []byte, id, token int64) string {
	m := hmac.New(sha256.New, key)
	var msg [41]byte // two int64s and a colon
	b := strconv.AppendInt(msg[:0], id, 10)
	b = append(b, ':')
	m.Write(strconv.AppendInt(b, token, 10))
	var sum [sha256.Size]byte
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], m.Sum(sum[:0]))
	return string(out[:])
}
