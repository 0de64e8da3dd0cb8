package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"go.uber.org/zap"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

// maxBodyBytes bounds every request body. No endpoint needs more: enqueued
// job payloads are capped well below it by max_record_bytes' default.
const maxBodyBytes = 1 << 20

// Config configures the admin server.
type Config struct {
	// Token, when non-empty, is required as "Authorization: Bearer <token>"
	// on every /v1 request. Empty means no authentication, which
	// CheckListen only allows on a loopback address. Defaults to "".
	Token string
	// Queues are the configured queue names. GET /v1/queues lists each of
	// them even when it has no rows yet, plus any queue found in the
	// database. Defaults to none.
	Queues []string
	// Metrics is served at /metrics without authentication, as Prometheus
	// scrapers expect. Nil means /metrics answers 404.
	Metrics http.Handler
	// Ready is checked by /readyz after the database checks and reported
	// as the "kafka" check; nil means the process has no Kafka dependency
	// (e.g. a work-only role) and the check is left out. Its error text is
	// shown on /readyz, which has no authentication: keep secrets out of it.
	Ready func(ctx context.Context) error
	// DLQ serves re-drive and discard; nil answers 501.
	DLQ DLQActions
	// Enqueue serves POST /v1/queues/{queue}/jobs (ingest.Enqueuer); nil
	// answers 501.
	Enqueue Enqueuer
}

// Server is the admin HTTP API. It is stateless apart from its
// configuration; every answer comes from the store.
type Server struct {
	cfg     Config
	store   *pgstore.Store
	log     *zap.Logger
	handler http.Handler
}

// New builds the server. cfg is copied, so the caller may reuse it; log
// must not be nil (pass zap.NewNop() to discard).
func New(cfg Config, store *pgstore.Store, log *zap.Logger) *Server {
	cfg.Queues = append([]string(nil), cfg.Queues...)
	s := &Server{cfg: cfg, store: store, log: log.Named("admin")}
	s.handler = s.guard(s.routes())
	return s
}

// Handler returns the root handler: mount it at "/".
func (s *Server) Handler() http.Handler { return s.handler }

// apiFunc is an endpoint that reports failures as errors; api turns them
// into the SPEC's JSON error shape.
type apiFunc func(w http.ResponseWriter, r *http.Request) error

// route is one method and ServeMux path pattern.
type route struct {
	method, path string
	h            apiFunc
}

func (s *Server) routes() http.Handler {
	routes := []route{
		{"GET", "/{$}", s.dashboard},
		{"GET", "/healthz", s.healthz},
		{"GET", "/readyz", s.readyz},
		{"GET", "/v1/jobs", s.jobList},
		{"GET", "/v1/jobs/{id}", s.jobGet},
		{"POST", "/v1/jobs/{id}/cancel", s.jobCancel},
		{"GET", "/v1/dlq", s.dlqList},
		{"GET", "/v1/dlq/{id}", s.dlqGet},
		{"POST", "/v1/dlq/{id}/redrive", s.dlqRedrive},
		{"POST", "/v1/dlq/{id}/discard", s.dlqDiscard},
		{"GET", "/v1/queues", s.queueList},
		{"GET", "/v1/openapi.json", s.openapi},
		{"POST", "/v1/queues/{queue}/jobs", s.jobEnqueue},
	}
	mux := http.NewServeMux()
	allowed := map[string][]string{}
	for _, rt := range routes {
		mux.Handle(rt.method+" "+rt.path, s.api(rt.h))
		allowed[rt.path] = append(allowed[rt.path], rt.method)
		if rt.method == "GET" {
			// ServeMux answers HEAD with the GET handler.
			allowed[rt.path] = append(allowed[rt.path], "HEAD")
		}
	}
	if s.cfg.Metrics != nil {
		mux.Handle("GET /metrics", s.cfg.Metrics)
	}
	// ServeMux's own 404 and 405 answers are plain text. Method-less
	// patterns lose to the method patterns above, so they only catch a
	// known path with the wrong method, and "/" catches everything else.
	for path, methods := range allowed {
		allow := strings.Join(methods, ", ")
		mux.Handle(path, s.api(func(w http.ResponseWriter, r *http.Request) error {
			w.Header().Set("Allow", allow)
			return &httpError{status: http.StatusMethodNotAllowed,
				msg: fmt.Sprintf("method %s not allowed; use %s", r.Method, allow)}
		}))
	}
	mux.Handle("/", s.api(func(w http.ResponseWriter, r *http.Request) error {
		return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("no such endpoint: %s", r.URL.Path)}
	}))
	return mux
}

// guard applies what holds for every request before routing: security
// headers, authentication of /v1 (before routing, so that an
// unauthenticated client cannot even probe which paths exist) and the
// body limit.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if r.URL.Path == "/v1" || strings.HasPrefix(r.URL.Path, "/v1/") {
			w.Header().Set("Cache-Control", "no-store")
			if !s.authorized(r) {
				w.Header().Set("WWW-Authenticate", "Bearer")
				s.writeError(w, r, &httpError{status: http.StatusUnauthorized, msg: "missing or invalid bearer token"})
				return
			}
		}
		// A declared oversized body is refused before any handler runs;
		// MaxBytesReader catches chunked bodies that grow past the limit.
		if r.ContentLength > maxBodyBytes {
			s.writeError(w, r, &httpError{status: http.StatusRequestEntityTooLarge,
				msg: fmt.Sprintf("request body over %d bytes", maxBodyBytes)})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
		next.ServeHTTP(w, r)
	})
}

// authorized compares SHA-256 digests rather than the raw strings so that
// the constant-time compare does not return early on a length mismatch and
// reveal the token's length.
func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.Token == "" {
		return true
	}
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	want := sha256.Sum256([]byte(s.cfg.Token))
	have := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(want[:], have[:]) == 1
}

// httpError is a failure the client should see as is.
type httpError struct {
	status int
	msg    string
	field  string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(field, format string, args ...any) *httpError {
	return &httpError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...), field: field}
}

func notImplemented(http.ResponseWriter, *http.Request) error {
	return &httpError{status: http.StatusNotImplemented, msg: "not implemented yet"}
}

func (s *Server) api(h apiFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	})
}

// errorBody is the SPEC's error shape.
type errorBody struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

// writeError answers an *httpError as is. Anything else is unexpected
// (database down, a bug): its text may hold SQL or connection details, so
// it goes to the log and the client gets a generic 500.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var he *httpError
	if !errors.As(err, &he) {
		if r.Context().Err() != nil {
			// The client went away mid-query; nobody reads the answer.
			s.log.Debug("request abandoned", zap.String("method", r.Method),
				zap.String("path", r.URL.Path), zap.Error(err))
			return
		}
		s.log.Error("request failed", zap.String("method", r.Method),
			zap.String("path", r.URL.Path), zap.Error(err))
		he = &httpError{status: http.StatusInternalServerError, msg: "internal error; see the server log"}
	}
	s.writeJSON(w, he.status, errorBody{Error: he.msg, Field: he.field})
}

func (s *Server) writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		// The status is already sent; a failed write means the client left.
		s.log.Debug("writing response", zap.Error(err))
	}
}
