package admin

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-dev/switchyard/internal/bulk"
	"github.com/switchyard-dev/switchyard/internal/dlq"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/schedule"
	"github.com/switchyard-dev/switchyard/jobstate"
)

// The endpoints below serve the operator console's pages beyond the
// lists: retry-now, counted bulk re-drive, discard and cancel, lanes and
// schedules.

// jobRetry: POST /v1/jobs/{id}/retry runs a job that waits for its time
// (a retry's backoff, a run_at or delay) now.
func (s *Server) jobRetry(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := s.store.JobRetryNow(r.Context(), id, caller(r).Name); err != nil {
		if errors.Is(err, pgstore.ErrConflict) {
			return &httpError{status: http.StatusConflict, msg: pgstore.NotWaiting(id)}
		}
		return actionError(err, "job", id)
	}
	job, err := s.store.JobGet(r.Context(), id)
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, job)
	return nil
}

// dlqFilter reads the filters of the DLQ's count and bulk re-drive.
func dlqFilter(r *http.Request) (pgstore.DLQFilter, error) {
	q, err := parseList(r)
	if err != nil {
		return pgstore.DLQFilter{}, err
	}
	if err := oneOf(q, "reason", dlq.Reasons); err != nil {
		return pgstore.DLQFilter{}, err
	}
	return pgstore.DLQFilter{Queue: q.filters["queue"], Reason: q.filters["reason"], Route: q.filters["route"]}, nil
}

// dlqCount: GET /v1/dlq/count, the parked entries a re-drive of all
// matching would take.
func (s *Server) dlqCount(w http.ResponseWriter, r *http.Request) error {
	f, err := dlqFilter(r)
	if err != nil {
		return err
	}
	n, err := s.store.DLQCount(r.Context(), f)
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, map[string]int64{"count": n})
	return nil
}

// bulkWrite bounds how long a bulk action's answer may take to write:
// a million entries at the pace below.
const bulkWrite = 30 * time.Minute

// bulkAction is a counted bulk action: POST /v1/dlq/redrive?…&expect=N,
// POST /v1/dlq/discard?…&expect=N, POST /v1/jobs/cancel?…&expect=N act
// on every item matching, if N of them match now. The confirmation a
// person gave was for N items, and a different number is asked again
// (409) rather than acted on. The answer counts what was done under the
// action's name (done: "redriven", "discarded", "cancelled") and lists
// the items that failed. act reads its filters from the request.
func (s *Server) bulkAction(done string, act func(r *http.Request, opt bulk.Options) (bulk.Result, error)) apiFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		expect, err := strconv.ParseInt(r.URL.Query().Get("expect"), 10, 64)
		if err != nil || expect < 0 {
			return badRequest("expect", "expect is required: the number of items the action was confirmed for (their count: GET …/count with the same filters)")
		}
		// A bulk action takes about 10,000–20,000 items a second in
		// chunks, and hundreds a second where they go one at a time (a
		// lane's head, a record read again from Kafka): hundreds of
		// thousands run past the server's
		// WriteTimeout, and the answer (how many, which failed) was lost
		// for an action that was done. This one has as long as bulkWrite
		// (a writer that cannot say so still gets the action).
		rc := http.NewResponseController(w)
		if err := rc.SetWriteDeadline(time.Now().Add(bulkWrite)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return err
		}
		res, err := act(r, bulk.Options{Expect: expect})
		var changed *bulk.CountChanged
		if errors.As(err, &changed) {
			return &httpError{status: http.StatusConflict, field: "expect", msg: changed.Error()}
		}
		if err != nil {
			return err
		}
		if res.Failed == nil {
			res.Failed = []bulk.Failure{}
		}
		s.writeJSON(w, http.StatusOK, map[string]any{done: res.Done, "failed": res.Failed})
		return nil
	}
}

// dlqBulk is bulkAction on the DLQ: act is one of DLQActions' bulk
// methods.
func (s *Server) dlqBulk(done string, act func(DLQActions, context.Context, dlq.Bulk) (bulk.Result, error)) apiFunc {
	return s.bulkAction(done, func(r *http.Request, opt bulk.Options) (bulk.Result, error) {
		if s.cfg.DLQ == nil {
			return bulk.Result{}, notImplemented(nil, r)
		}
		f, err := dlqFilter(r)
		if err != nil {
			return bulk.Result{}, err
		}
		return act(s.cfg.DLQ, r.Context(), dlq.Bulk{Filter: f, By: caller(r).Name, Options: opt})
	})
}

// jobFilter reads the filters of the jobs' count and bulk cancel: a
// state, if given, is one a job leaves on its own.
func jobFilter(r *http.Request) (pgstore.JobFilter, error) {
	q, err := parseList(r)
	if err != nil {
		return pgstore.JobFilter{}, err
	}
	if err := oneOf(q, "state", jobstate.Unfinished); err != nil {
		return pgstore.JobFilter{}, err
	}
	return pgstore.JobFilter{State: jobstate.State(q.filters["state"]), Queue: q.filters["queue"],
		Key: q.filters["key"], Route: q.filters["route"]}, nil
}

// jobCount: GET /v1/jobs/count, the unfinished jobs a cancel of all
// matching would take.
func (s *Server) jobCount(w http.ResponseWriter, r *http.Request) error {
	f, err := jobFilter(r)
	if err != nil {
		return err
	}
	n, err := s.store.JobCountUnfinished(r.Context(), f)
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, map[string]int64{"count": n})
	return nil
}

// jobCancelMatching is POST /v1/jobs/cancel's action (bulkAction).
func (s *Server) jobCancelMatching(r *http.Request, opt bulk.Options) (bulk.Result, error) {
	f, err := jobFilter(r)
	if err != nil {
		return bulk.Result{}, err
	}
	return s.store.JobCancelMatching(r.Context(), f, caller(r).Name, opt)
}

// laneList: GET /v1/lanes, blocked lanes first, then the longest.
func (s *Server) laneList(w http.ResponseWriter, r *http.Request) error {
	q, err := parseList(r)
	if err != nil {
		return err
	}
	blocked := false
	switch v := q.filters["blocked"]; v {
	case "", "false":
	case "true":
		blocked = true
	default:
		return badRequest("blocked", "blocked must be true or false")
	}
	after, err := parseLaneCursor(q.after)
	if err != nil {
		return err
	}
	lanes, err := s.store.LaneList(r.Context(), pgstore.LaneFilter{Route: q.filters["route"], BlockedOnly: blocked,
		After: after, Limit: q.limit + 1})
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, newPage(lanes, q.limit, laneCursor))
	return nil
}

// laneCursor is the cursor of GET /v1/lanes: a lane's place in the list
// (pgstore.LanePlace), as blocked.waiting.route.key with route and key in
// lower-case hex, so that the cursor is plain in a URL whatever a key
// holds, and its form is a pattern openapi.json can state exactly. Lanes
// have no id to page by.
func laneCursor(l pgstore.LaneRow) string {
	return fmt.Sprintf("%t.%d.%x.%x", l.Blocked, l.Waiting, l.Route, l.Key)
}

// laneCursorForm is openapi.json's pattern of a lane cursor: every cursor
// of that form is accepted. Eighteen digits at most keep waiting an int64.
var laneCursorForm = regexp.MustCompile(`^(true|false)\.([0-9]{1,18})\.((?:[0-9a-f]{2})*)\.((?:[0-9a-f]{2})*)$`)

// parseLaneCursor reads laneCursor's text; nil for "" (the first page).
func parseLaneCursor(s string) (*pgstore.LanePlace, error) {
	if s == "" {
		return nil, nil
	}
	m := laneCursorForm.FindStringSubmatch(s)
	if m == nil {
		return nil, badCursor()
	}
	waiting, _ := strconv.ParseInt(m[2], 10, 64) // at most 18 digits
	// A cursor this server wrote holds text; a made-up one may hold bytes
	// that Postgres text refuses, which become U+FFFD: such a cursor is
	// still a place in the list, and the page starts there.
	text := func(h string) string {
		b, _ := hex.DecodeString(h) // pairs of hex digits
		return strings.ToValidUTF8(strings.ReplaceAll(string(b), "\x00", "\uFFFD"), "\uFFFD")
	}
	return &pgstore.LanePlace{Blocked: m[1] == "true", Waiting: waiting, Route: text(m[3]), Key: text(m[4])}, nil
}

// schedule finds a configured schedule by name.
func (s *Server) schedule(name string) (schedule.Schedule, bool) {
	for _, sc := range s.cfg.Schedules {
		if sc.Name == name {
			return sc, true
		}
	}
	return schedule.Schedule{}, false
}

// scheduleList: GET /v1/schedules, each with its next and last slot.
func (s *Server) scheduleList(w http.ResponseWriter, r *http.Request) error {
	items, err := s.listing().ScheduleItems(r.Context(), s.store, time.Now())
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, page[schedule.Status]{Items: items})
	return nil
}

// scheduleTrigger: POST /v1/schedules/{name}/trigger enqueues one job of
// the schedule now.
func (s *Server) scheduleTrigger(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	sc, ok := s.schedule(name)
	if !ok {
		return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("no such schedule: %q", name), field: "name"}
	}
	enq, err := schedule.Trigger(r.Context(), s.store, sc, caller(r).Name, time.Now())
	if err != nil {
		return err
	}
	job, err := s.store.JobGet(r.Context(), enq.ID)
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"name": name, "job": job})
	return nil
}
