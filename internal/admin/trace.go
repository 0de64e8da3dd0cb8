package admin

// Spans of the operator actions.

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard-dev/switchyard/internal/tracing"
)

// actionOf names the operator actions by route: each gets a span named
// admin.<action> when tracing is on. GETs and an HTTP target's checkpoint
// (an attempt's, not an operator's) get none.
var actionOf = map[string]string{
	"POST /v1/jobs/{id}/cancel":         "cancel",
	"POST /v1/jobs/{id}/retry":          "retry",
	"POST /v1/jobs/cancel":              "cancel_matching",
	"POST /v1/dlq/{id}/redrive":         "redrive",
	"POST /v1/dlq/{id}/discard":         "discard",
	"POST /v1/dlq/redrive":              "redrive_matching",
	"POST /v1/dlq/discard":              "discard_matching",
	"POST /v1/schedules/{name}/pause":   "pause",
	"POST /v1/schedules/{name}/resume":  "resume",
	"POST /v1/schedules/{name}/trigger": "trigger",
	"POST /v1/queues/{queue}/pause":     "pause",
	"POST /v1/queues/{queue}/resume":    "resume",
	"POST /v1/routes/{name}/pause":      "pause",
	"POST /v1/routes/{name}/resume":     "resume",
	"POST /v1/queues/{queue}/jobs":      "enqueue",
}

// traced wraps an action's handler in its span: a server span, the child
// of the request's traceparent when it has one, carrying the action, what
// it acted on and the actor (the token's name: never the token). The
// span is in the request's context, so that an enqueue can make it the
// parent of the job's attempts.
func (s *Server) traced(action, pattern string, next http.Handler) http.Handler {
	// "jobs", "dlq", "queues", … and the path value that names the object.
	kind, param := "", ""
	if parts := strings.Split(strings.TrimPrefix(strings.SplitN(pattern, " ", 2)[1], "/v1/"), "/"); len(parts) > 1 {
		kind = parts[0]
		if strings.HasPrefix(parts[1], "{") {
			param = strings.Trim(parts[1], "{}")
		}
	}
	name := tracing.SpanActionPrefix + action
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := tracing.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		target := kind
		if param != "" {
			target += "/" + r.PathValue(param)
		}
		ctx, span := s.cfg.Tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
			tracing.AttrAction.String(action), tracing.AttrActor.String(caller(r).Name), tracing.AttrTarget.String(target),
			tracing.AttrHTTPMethod.String(r.Method)))
		defer span.End()
		sw := &actionStatus{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r.WithContext(ctx))
		span.SetAttributes(tracing.AttrHTTPStatus.Int(sw.status))
		if sw.status >= 400 {
			span.SetStatus(codes.Error, http.StatusText(sw.status))
		}
	})
}

// actionStatus keeps the status an action answered, for its span.
type actionStatus struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *actionStatus) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *actionStatus) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets an http.ResponseController reach the connection's writer
// (a bulk re-drive's write deadline).
func (w *actionStatus) Unwrap() http.ResponseWriter { return w.ResponseWriter }
