package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/schedule"
)

// maxBodyBytes bounds every request body. No endpoint needs more: enqueued
// job payloads are capped well below it by max_record_bytes' default.
const maxBodyBytes = 1 << 20

// maxHeaderBytes bounds a request's headers. The http.Server's own limit
// (NewHTTPServer) is set far above it, so that the guard, not net/http,
// answers an oversized request: with the JSON error shape.
const maxHeaderBytes = 64 << 10

// Config configures the admin server.
type Config struct {
	// Token, when non-empty, is an operator token named "default"
	// (SWITCHYARD_ADMIN_TOKEN). When it or Tokens is set, every /v1
	// request needs "Authorization: Bearer <token>" of one of them. None
	// means no authentication, which the config allows only on a loopback
	// address; the actor is then "anonymous". Defaults to "".
	Token string
	// Tokens are the named tokens of admin.tokens. Defaults to none.
	Tokens []Token
	// Queues are the configured queue names. GET /v1/queues lists each of
	// them even when it has no rows yet, plus any queue found in the
	// database; only these can be paused. Defaults to none.
	Queues []string
	// Concurrency is each configured queue's concurrency, for GET
	// /v1/queues. Defaults to none.
	Concurrency map[string]int
	// Schedules are the configured schedules, for GET /v1/schedules and
	// their actions. Defaults to none.
	Schedules []schedule.Schedule
	// Routes are the configured routes, for GET /v1/routes and their
	// pauses. Defaults to none.
	Routes []RouteConfig
	// Groups are GroupsOf the config: GET /v1/queues counts a job its
	// group's cap holds as waiting, not runnable, and GET /v1/jobs/{id}
	// shows a grouped job's group. Defaults to none.
	Groups pgstore.Groups
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
	// AttemptKey checks the Switchyard-Attempt-Secret of
	// POST /v1/jobs/{id}/checkpoint (pgstore.Store.AttemptKey); nil
	// answers 501.
	AttemptKey []byte
	// Lag reads the fleet's Kafka lag by topic for GET /v1/routes
	// (ingest.LagReader.Lag); nil leaves lag out.
	Lag LagFunc
	// AllowedHosts are the host names (without port) that requests may
	// name in their Host header besides loopback names and IP addresses:
	// the names this server is reached by (http.allowed_hosts). Any other
	// name is answered 421, which is what defeats DNS rebinding: a page
	// whose own name was pointed at this server sends its name. Defaults
	// to none.
	AllowedHosts []string
	// Tracer, when set, gives every operator action a span (trace.go);
	// nil, tracing is off.
	Tracer trace.Tracer
}

// Server is the admin HTTP API. It is stateless apart from its
// configuration and the last /readyz result; every answer comes from the
// store.
type Server struct {
	cfg     Config
	tokens  []Token // Token and Tokens, with the SHA-256 of each secret
	store   *pgstore.Store
	log     *zap.Logger
	handler http.Handler
	ready   readiness
}

// listing is the server's configured queues, routes and schedules.
func (s *Server) listing() Listing {
	return Listing{Queues: s.cfg.Queues, Concurrency: s.cfg.Concurrency, Schedules: s.cfg.Schedules, Routes: s.cfg.Routes,
		Groups: s.cfg.Groups}
}

// New builds the server. cfg is copied, so the caller may reuse it; log
// must not be nil (pass zap.NewNop() to discard).
func New(cfg Config, store *pgstore.Store, log *zap.Logger) *Server {
	cfg.Queues = append([]string(nil), cfg.Queues...)
	cfg.Routes = slices.Clone(cfg.Routes)
	cfg.Concurrency = maps.Clone(cfg.Concurrency)
	cfg.Schedules = slices.Clone(cfg.Schedules)
	cfg.AllowedHosts = slices.Clone(cfg.AllowedHosts)
	for i, h := range cfg.AllowedHosts {
		cfg.AllowedHosts[i] = normalHost(h)
	}
	s := &Server{cfg: cfg, store: store, log: log.Named("admin"), tokens: slices.Clone(cfg.Tokens)}
	if cfg.Token != "" {
		s.tokens = append(s.tokens, Token{Name: config.DefaultTokenName, Secret: cfg.Token, Operate: true})
	}
	for i := range s.tokens {
		s.tokens[i].digest = sha256.Sum256([]byte(s.tokens[i].Secret))
	}
	s.handler = s.guard(s.routes())
	return s
}

// Handler returns the root handler: mount it at "/".
func (s *Server) Handler() http.Handler { return s.handler }

// apiFunc is an endpoint that reports failures as errors; api turns them
// into the SPEC's JSON error shape.
type apiFunc func(w http.ResponseWriter, r *http.Request) error

// route is one method and ServeMux path pattern, with the query
// parameters it accepts: any other is refused, so that a typo
// (?stat=dead) is an error instead of an answer that looks right.
type route struct {
	method, path string
	params       []string
	h            apiFunc
}

// listParams are what every list endpoint takes besides its filters.
var listParams = []string{"limit", "after"}

func (s *Server) routes() http.Handler {
	routes := []route{
		{"GET", "/{$}", nil, s.dashboard},
		{"GET", "/ui/{file}", nil, s.uiFile},
		{"GET", "/healthz", nil, s.healthz},
		{"GET", "/readyz", nil, s.readyz},
		{"GET", "/v1/jobs", append([]string{"state", "queue", "key", "route"}, listParams...), s.jobList},
		{"GET", "/v1/jobs/{id}", nil, s.jobGet},
		{"GET", "/v1/jobs/count", []string{"state", "queue", "key", "route"}, s.jobCount},
		{"POST", "/v1/jobs/cancel", []string{"state", "queue", "key", "route", "expect"}, s.bulkAction("cancelled", s.jobCancelMatching)},
		{"GET", "/v1/jobs/{id}/result", nil, s.jobResult},
		{"POST", "/v1/jobs/{id}/cancel", nil, s.jobCancel},
		{"POST", "/v1/jobs/{id}/retry", nil, s.jobRetry},
		{"POST", "/v1/jobs/{id}/checkpoint", nil, s.jobCheckpoint},
		{"GET", "/v1/dlq", append([]string{"queue", "reason", "route", "state"}, listParams...), s.dlqList},
		{"GET", "/v1/dlq/{id}", nil, s.dlqGet},
		{"POST", "/v1/dlq/{id}/redrive", nil, s.dlqRedrive},
		{"POST", "/v1/dlq/{id}/discard", nil, s.dlqDiscard},
		{"GET", "/v1/dlq/count", []string{"queue", "reason", "route"}, s.dlqCount},
		{"POST", "/v1/dlq/redrive", []string{"queue", "reason", "route", "expect"}, s.dlqBulk("redriven", DLQActions.RedriveMatching)},
		{"POST", "/v1/dlq/discard", []string{"queue", "reason", "route", "expect"}, s.dlqBulk("discarded", DLQActions.DiscardMatching)},
		{"GET", "/v1/lanes", append([]string{"route", "blocked"}, listParams...), s.laneList},
		{"GET", "/v1/schedules", nil, s.scheduleList},
		{"POST", "/v1/schedules/{name}/pause", nil, s.setPause(pgstore.PauseSchedule, true)},
		{"POST", "/v1/schedules/{name}/resume", nil, s.setPause(pgstore.PauseSchedule, false)},
		{"POST", "/v1/schedules/{name}/trigger", nil, s.scheduleTrigger},
		{"GET", "/v1/queues", nil, s.queueList},
		{"POST", "/v1/queues/{queue}/pause", nil, s.setPause(pgstore.PauseQueue, true)},
		{"POST", "/v1/queues/{queue}/resume", nil, s.setPause(pgstore.PauseQueue, false)},
		{"GET", "/v1/routes", nil, s.routeList},
		{"POST", "/v1/routes/{name}/pause", nil, s.setPause(pgstore.PauseRoute, true)},
		{"POST", "/v1/routes/{name}/resume", nil, s.setPause(pgstore.PauseRoute, false)},
		{"GET", "/v1/openapi.json", nil, s.openapi},
		{"GET", "/v1/audit", append([]string{"actor", "action", "target"}, listParams...), s.auditList},
		{"GET", "/v1/whoami", nil, s.whoami},
		{"POST", "/v1/queues/{queue}/jobs", []string{"kind"}, s.jobEnqueue},
	}
	mux := http.NewServeMux()
	for _, rt := range routes {
		h := s.api(checkParams(rt.params, rt.h))
		if action, ok := actionOf[rt.method+" "+rt.path]; ok && s.cfg.Tracer != nil {
			h = s.traced(action, rt.method+" "+rt.path, h)
		}
		if strings.Contains(rt.path, "{id}") {
			h = s.notAnID(mux, h)
		}
		mux.Handle(rt.method+" "+rt.path, h)
	}
	if s.cfg.Metrics != nil {
		mux.Handle("GET /metrics", s.cfg.Metrics)
	}
	// ServeMux's own 404 and 405 answers are plain text, so "/" catches
	// every request no pattern takes and answers it in the API's shape:
	// 405 naming the methods the path takes, else 404. (Method-less
	// patterns per path would conflict: /v1/dlq/count beside GET
	// /v1/dlq/{id}.)
	mux.Handle("/", s.api(func(w http.ResponseWriter, r *http.Request) error {
		if err := methodNotAllowed(w, mux, r); err != nil {
			return err
		}
		return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("no such endpoint: %s", r.URL.Path)}
	}))
	return mux
}

// notAnID answers a request whose {id} is not a number 405 when its path
// names another endpoint (GET /v1/dlq/count is not GET /v1/dlq/{id}
// with id "count"; POST /v1/dlq/redrive has no GET), and hands every
// other to next, which answers a bad id 400.
func (s *Server) notAnID(mux *http.ServeMux, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := strconv.ParseInt(r.PathValue("id"), 10, 64); err != nil {
			if err := methodNotAllowed(w, mux, r); err != nil {
				s.writeError(w, r, err)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// methodNotAllowed returns the 405 of a path that other methods take (of
// those the routes use: ServeMux answers HEAD with a GET pattern), with
// its Allow header set; nil when none does.
func methodNotAllowed(w http.ResponseWriter, mux *http.ServeMux, r *http.Request) error {
	var allow []string
	for _, m := range []string{"GET", "HEAD", "POST"} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := mux.Handler(probe); pattern != "/" && pattern != "" && idsNumeric(pattern, r.URL.Path) {
			allow = append(allow, m)
		}
	}
	if len(allow) == 0 {
		return nil
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	return &httpError{status: http.StatusMethodNotAllowed,
		msg: fmt.Sprintf("method %s not allowed; use %s", r.Method, strings.Join(allow, ", "))}
}

// idsNumeric reports whether every {id} segment of pattern is a number
// in path: POST /v1/dlq/redrive is not GET /v1/dlq/{id} with id
// "redrive", though ServeMux would match it.
func idsNumeric(pattern, path string) bool {
	_, pat, _ := strings.Cut(pattern, " ")
	segs, have := strings.Split(pat, "/"), strings.Split(path, "/")
	for i, seg := range segs {
		if seg == "{id}" && i < len(have) {
			if _, err := strconv.ParseInt(have[i], 10, 64); err != nil {
				return false
			}
		}
	}
	return true
}

// checkParams refuses query parameters the endpoint does not take, and
// any given twice.
func checkParams(params []string, h apiFunc) apiFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		vals, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			return badRequest("", "malformed query string")
		}
		// Sorted, so that the same parameter is reported first every time.
		for _, name := range slices.Sorted(maps.Keys(vals)) {
			if !slices.Contains(params, name) {
				accepted := "none"
				if len(params) > 0 {
					accepted = strings.Join(params, ", ")
				}
				return badRequest(name, "unknown query parameter %q; accepted: %s", name, accepted)
			}
			if len(vals[name]) > 1 {
				return badRequest(name, "%s may be given only once", name)
			}
		}
		return h(w, r)
	}
}

// guard applies what holds for every request before routing: the Host
// allow-list, the cross-origin refusal, security headers, authentication
// of /v1 (before routing, so that an unauthenticated client cannot even
// probe which paths exist) and the size limits.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if !s.hostAllowed(r.Host) {
			s.writeError(w, r, &httpError{status: http.StatusMisdirectedRequest, field: "Host",
				msg: "this server does not answer to that host name; add it to http.allowed_hosts if it is one of its own"})
			return
		}
		if by := crossOrigin(r); stateChanging(r.Method) && by != "" {
			s.writeError(w, r, &httpError{status: http.StatusForbidden, field: by,
				msg: "cross-origin request refused: actions are taken only from this server's own pages or from clients that are not browsers"})
			return
		}
		if headerBytes(r.Header) > maxHeaderBytes {
			s.writeError(w, r, &httpError{status: http.StatusRequestHeaderFieldsTooLarge,
				msg: fmt.Sprintf("request headers over %d bytes", maxHeaderBytes)})
			return
		}
		if r.URL.Path == "/v1" || strings.HasPrefix(r.URL.Path, "/v1/") {
			w.Header().Set("Cache-Control", "no-store")
			// A checkpoint is authorized by its attempt's secret, which
			// the target got with the attempt: targets hold no admin token.
			who, ok := s.authenticate(r)
			switch {
			case isCheckpoint(r):
			case !ok:
				w.Header().Set("WWW-Authenticate", "Bearer")
				s.writeError(w, r, &httpError{status: http.StatusUnauthorized, msg: "missing or invalid bearer token"})
				return
			case stateChanging(r.Method) && !who.Operate:
				s.writeError(w, r, &httpError{status: http.StatusForbidden, field: "Authorization",
					msg: fmt.Sprintf("token %s has role read: actions need a token with role operate", who.Name)})
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), callerKey{}, who))
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

// hostAllowed reports whether a Host header names this server: an IP
// address (DNS rebinding needs a name, so a literal address is never
// one), a loopback name, or one of Config.AllowedHosts.
func (s *Server) hostAllowed(hostport string) bool {
	host := normalHost(hostport)
	if host == "" {
		return true // HTTP/1.0 without Host: no browser sends that
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	return slices.Contains(s.cfg.AllowedHosts, host)
}

// normalHost is a Host header's name: without port, brackets, trailing
// dot, in lower case.
func normalHost(hostport string) string {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

func stateChanging(method string) bool {
	return method != http.MethodGet && method != http.MethodHead && method != http.MethodOptions
}

// crossOrigin names the header by which a browser said it sent the
// request for a page of another origin, or is "". Browsers say so in
// Sec-Fetch-Site (a page on another port of localhost is "same-site",
// and refused too) and, older ones, only in Origin, which must then name
// this very host (not its scheme: behind a TLS proxy the page is https
// and this server plain http). A request with neither comes from a
// program (curl, the CLI, a target's checkpoint), which a page cannot
// make a browser send.
func crossOrigin(r *http.Request) string {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return "Sec-Fetch-Site"
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return ""
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) { // "null": a sandboxed or file page
		return "Origin"
	}
	return ""
}

// headerBytes is about what a request's headers took on the wire.
func headerBytes(h http.Header) int {
	n := 0
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4 // ": " and CRLF
		}
	}
	return n
}

// Token is a bearer token the API accepts: its holder's name, which the
// audit log records as the actor, and whether it may act (role operate)
// or only read.
type Token struct {
	Name, Secret string
	Operate      bool
	digest       [sha256.Size]byte
}

// anonymous is the caller when no token is configured (loopback only).
var anonymous = Token{Name: "anonymous", Operate: true}

// callerKey carries the authenticated Token in a request's context.
type callerKey struct{}

// caller is who sent r, as the guard authenticated it.
func caller(r *http.Request) Token {
	if t, ok := r.Context().Value(callerKey{}).(Token); ok {
		return t
	}
	return anonymous
}

// authenticate finds the token a request carries. It compares SHA-256
// digests rather than the raw strings, so that the constant-time compare
// does not return early on a length mismatch and reveal a token's length,
// and it compares against every token, so that the time taken does not
// say which one matched.
func (s *Server) authenticate(r *http.Request) (Token, bool) {
	if len(s.tokens) == 0 {
		return anonymous, true
	}
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return Token{}, false
	}
	got = strings.TrimLeft(got, " ") // RFC 9110: one or more spaces after the scheme
	have := sha256.Sum256([]byte(got))
	match := -1
	for i := range s.tokens {
		if subtle.ConstantTimeCompare(s.tokens[i].digest[:], have[:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return Token{}, false
	}
	return s.tokens[match], true
}

// httpError is a failure the client should see as is.
type httpError struct {
	status int
	msg    string
	field  string
	// retryAfter, when set, is sent as Retry-After (seconds).
	retryAfter string
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

// unavailableRetryAfter is what a client is told to wait while Postgres
// cannot be reached.
const unavailableRetryAfter = "5"

// writeError answers an *httpError as is. Anything else is unexpected: a
// database that cannot be reached is a 503 with Retry-After (the client
// did nothing wrong and may try again), anything else a bug. The text of
// either may hold SQL or connection details, so it goes to the log and
// the client gets a generic message.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var he *httpError
	if !errors.As(err, &he) {
		switch {
		case r.Context().Err() != nil:
			// The client went away mid-query; nobody reads the answer.
			s.log.Debug("request abandoned", zap.String("method", r.Method),
				zap.String("path", r.URL.Path), zap.Error(err))
			return
		case pgstore.Unavailable(err):
			s.log.Warn("request failed: postgres unavailable", zap.String("method", r.Method),
				zap.String("path", r.URL.Path), zap.Error(err))
			he = &httpError{status: http.StatusServiceUnavailable, msg: "the database is unavailable; retry later",
				retryAfter: unavailableRetryAfter}
		default:
			s.log.Error("request failed", zap.String("method", r.Method),
				zap.String("path", r.URL.Path), zap.Error(err))
			he = &httpError{status: http.StatusInternalServerError, msg: "internal error; see the server log"}
		}
	}
	if he.retryAfter != "" {
		w.Header().Set("Retry-After", he.retryAfter)
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
