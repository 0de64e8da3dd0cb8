package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/dlq"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/jobstate"
)

// readyTimeout bounds all of /readyz's checks together, below the probe
// timeouts orchestrators use by default.
const readyTimeout = 2 * time.Second

// page is the SPEC's list shape. Next is the cursor to pass as ?after= for
// the following page, "" when there is none.
type page[T any] struct {
	Items []T    `json:"items"`
	Next  string `json:"next"`
}

// newPage trims rows fetched with limit+1 to limit. The extra row tells
// whether another page exists, so next is "" exactly on the last page and
// a client never has to fetch an empty one. cursor is the list's cursor
// of a row: where the next page starts after it.
func newPage[T any](rows []T, limit int, cursor func(T) string) page[T] {
	p := page[T]{Items: rows}
	if len(rows) > limit {
		p.Items = rows[:limit]
		p.Next = cursor(rows[limit-1])
	}
	if p.Items == nil {
		p.Items = []T{} // "items": [] rather than null
	}
	return p
}

func (s *Server) jobGet(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	job, err := s.store.JobGetDetail(r.Context(), id, s.cfg.Groups)
	if errors.Is(err, pgstore.ErrNotFound) {
		return jobNotFound(id)
	}
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, job)
	return nil
}

func jobNotFound(id int64) error {
	return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("job %d not found", id), field: "id"}
}

// jobResult answers a job's result raw, with its content type. The body
// is the target's or handler's data, not ours: the browser must neither
// sniff it nor run it as a page of this origin.
func (s *Server) jobResult(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	ct, data, err := s.store.JobResult(r.Context(), id)
	switch {
	case errors.Is(err, pgstore.ErrNotFound):
		return jobNotFound(id)
	case err != nil:
		return err
	case data == nil:
		return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("job %d has no result", id), field: "result"}
	}
	if ct == "" {
		ct = "application/octet-stream"
	}
	h := w.Header()
	h.Set("Content-Type", ct)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	h.Set("Content-Disposition", "attachment")
	h.Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
	return nil
}

func (s *Server) jobList(w http.ResponseWriter, r *http.Request) error {
	q, err := parseList(r)
	if err != nil {
		return err
	}
	if err := oneOf(q, "state", jobstate.All); err != nil {
		return err
	}
	after, err := q.afterID()
	if err != nil {
		return err
	}
	jobs, err := s.store.JobList(r.Context(), pgstore.JobFilter{
		State: jobstate.State(q.filters["state"]), Queue: q.filters["queue"], Key: q.filters["key"], Route: q.filters["route"],
		After: after, Limit: q.limit + 1,
	})
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, newPage(jobs, q.limit, func(j pgstore.JobRow) string { return idCursor(j.ID) }))
	return nil
}

func (s *Server) dlqGet(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	e, err := s.store.DLQGet(r.Context(), id)
	if errors.Is(err, pgstore.ErrNotFound) {
		return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("DLQ entry %d not found", id), field: "id"}
	}
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, e)
	return nil
}

func (s *Server) dlqList(w http.ResponseWriter, r *http.Request) error {
	q, err := parseList(r)
	if err != nil {
		return err
	}
	if err := oneOf(q, "reason", dlq.Reasons); err != nil {
		return err
	}
	if err := oneOf(q, "state", pgstore.DLQStates); err != nil {
		return err
	}
	after, err := q.afterID()
	if err != nil {
		return err
	}
	entries, err := s.store.DLQList(r.Context(), pgstore.DLQFilter{
		Queue: q.filters["queue"], Reason: q.filters["reason"], Route: q.filters["route"], State: q.filters["state"],
		After: after, Limit: q.limit + 1,
	})
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, newPage(entries, q.limit, func(e pgstore.DLQEntry) string { return idCursor(e.ID) }))
	return nil
}

// queueList is not paginated: queues come from configuration and are few.
// It still answers the list shape so clients handle every list alike.
func (s *Server) queueList(w http.ResponseWriter, r *http.Request) error {
	items, err := s.listing().QueueItems(r.Context(), s.store)
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, page[pgstore.QueueStat]{Items: items})
	return nil
}

func jobStateNames(states []jobstate.State) []string {
	out := make([]string, len(states))
	for i, st := range states {
		out[i] = string(st)
	}
	return out
}

func zeroFill[T ~string](counts map[string]int64, keys []T) {
	for _, k := range keys {
		if _, ok := counts[string(k)]; !ok {
			counts[string(k)] = 0
		}
	}
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) error {
	s.writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// readyBody is /readyz's answer: status on success, error on failure, and
// always the result of each check.
type readyBody struct {
	Status string            `json:"status,omitempty"`
	Error  string            `json:"error,omitempty"`
	Checks map[string]string `json:"checks"`
}

// readyTTL is how long a /readyz result is reused. Probes from every
// kubelet, load balancer and curious script then cost at most one round
// of checks a second, however many arrive: a flood of them can neither
// take the database's connections from the work nor make the process
// look unready because its checks queued behind each other.
const readyTTL = time.Second

// readiness is the last /readyz result, and the lock that makes one
// request compute it while the others wait for it.
type readiness struct {
	mu     sync.Mutex
	at     time.Time
	status int
	body   readyBody
}

// readyz reports whether this process can do its work: Postgres answers,
// the schema is at this binary's migration, and Config.Ready passes.
// It has no authentication (probes carry no token), so the Postgres
// failure is reported as a word and logged in full: pgx's errors name the
// database user, host and database.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	s.ready.mu.Lock()
	if time.Since(s.ready.at) >= readyTTL {
		s.ready.status, s.ready.body = s.checkReady(r.Context())
		s.ready.at = time.Now()
	}
	status, body := s.ready.status, s.ready.body
	s.ready.mu.Unlock()
	s.writeJSON(w, status, body)
	return nil
}

// checkReady runs the readiness checks, on a context that a client
// hanging up does not cancel: the result serves every waiting probe.
func (s *Server) checkReady(ctx context.Context) (int, readyBody) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readyTimeout)
	defer cancel()
	checks := map[string]string{"postgres": "ok", "migrations": "ok"}
	if err := s.store.Ping(ctx); err != nil {
		s.log.Warn("readyz: postgres unreachable", zap.Error(err))
		checks["postgres"] = "unreachable"
		checks["migrations"] = "unknown: postgres unreachable"
	} else if problem, err := s.store.SchemaCheck(ctx); err != nil {
		s.log.Warn("readyz: reading schema version", zap.Error(err))
		checks["migrations"] = "unknown: cannot read the schema version"
	} else if problem != "" {
		checks["migrations"] = problem
	}
	if s.cfg.Ready != nil {
		checks["kafka"] = "ok"
		if err := s.cfg.Ready(ctx); err != nil {
			checks["kafka"] = err.Error()
		}
	}
	for _, result := range checks {
		if result != "ok" {
			return http.StatusServiceUnavailable, readyBody{Error: "not ready", Checks: checks}
		}
	}
	return http.StatusOK, readyBody{Status: "ok", Checks: checks}
}

// auditList: GET /v1/audit, newest first; after is the id of the last
// entry of the previous page (the page holds older entries).
func (s *Server) auditList(w http.ResponseWriter, r *http.Request) error {
	q, err := parseList(r)
	if err != nil {
		return err
	}
	if err := oneOf(q, "action", pgstore.AuditActions); err != nil {
		return err
	}
	before, err := q.afterID()
	if err != nil {
		return err
	}
	entries, err := s.store.AuditList(r.Context(), pgstore.AuditFilter{
		Actor: q.filters["actor"], Action: q.filters["action"], Target: q.filters["target"],
		Before: before, Limit: q.limit + 1,
	})
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, newPage(entries, q.limit, func(e pgstore.AuditEntry) string { return idCursor(e.ID) }))
	return nil
}

// whoami: GET /v1/whoami, the caller's token name and role, so that a
// page can leave out the actions a read token may not take.
func (s *Server) whoami(w http.ResponseWriter, r *http.Request) error {
	who := caller(r)
	role := config.RoleRead
	if who.Operate {
		role = config.RoleOperate
	}
	s.writeJSON(w, http.StatusOK, map[string]string{"name": who.Name, "role": role})
	return nil
}
