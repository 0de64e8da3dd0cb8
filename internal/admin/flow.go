package admin

import (
	"fmt"
	"net/http"
	"slices"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/ingest"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

// Route is what GET /v1/routes says of one configured route.
type Route struct {
	Name  string `json:"name"`
	Topic string `json:"topic"`
	Queue string `json:"queue"`
	// Filter selects the records the route takes; nil: all of them.
	Filter *RouteFilter `json:"filter,omitempty"`
	// Paused: an operator paused the route's fetching (every process).
	Paused bool `json:"paused"`
	// Backpressured: the route's queue holds max_depth unstarted jobs or
	// more, so ingest holds its fetching (SPEC §3).
	Backpressured bool `json:"backpressured"`
	// HeldBy names the other routes of the same topic that are paused or
	// backpressured: the routes of a topic share its offsets, so their
	// hold stops this route's fetching too.
	HeldBy []string `json:"held_by,omitempty"`
	// Limits are its fleet-wide flow limits, as configured; nil: none.
	Limits *RouteLimits `json:"limits,omitempty"`
	// Lag is the fleet's lag on the route's topic, every partition's
	// stored position against its end; LagError says why it is missing
	// when Kafka could not be read (the rest of the answer stands).
	Lag      *ingest.TopicLag `json:"lag,omitempty"`
	LagError string           `json:"lag_error,omitempty"`
}

// RouteLimits are a route's flow limits as GET /v1/routes shows them,
// spelled as in the config file.
type RouteLimits struct {
	MaxRunning int             `json:"max_running"`
	Group      *GroupLimit     `json:"group,omitempty"`
	RateLimit  *RateLimitShown `json:"rate_limit,omitempty"`
}

// GroupLimit is a route's group cap.
type GroupLimit struct {
	Field      string `json:"field,omitempty"`
	Header     string `json:"header,omitempty"`
	MaxRunning int    `json:"max_running"`
}

// RateLimitShown is a route's rate limit; Per is a Go duration ("1s").
type RateLimitShown struct {
	Limit int    `json:"limit"`
	Per   string `json:"per"`
	Burst int    `json:"burst"`
}

// RouteFilter is a route's filter, spelled as in the config file.
type RouteFilter struct {
	Field  string   `json:"field,omitempty"`
	Header string   `json:"header,omitempty"`
	In     []string `json:"in"`
}

// NewRouteFilter shows a config route's filter; nil when it has none.
func NewRouteFilter(r config.Route) *RouteFilter {
	if r.Filter == nil {
		return nil
	}
	return &RouteFilter{Field: r.Filter.Field, Header: r.Filter.Header, In: r.Filter.In}
}

// NewRouteLimits shows a config route's limits; nil when it has none.
func NewRouteLimits(r config.Route) *RouteLimits {
	if r.MaxRunning == 0 && r.Group == nil && r.RateLimit == nil {
		return nil
	}
	l := &RouteLimits{MaxRunning: r.MaxRunning}
	if g := r.Group; g != nil {
		l.Group = &GroupLimit{Field: g.Field, Header: g.Header, MaxRunning: g.MaxRunning}
	}
	if rl := r.RateLimit; rl != nil {
		l.RateLimit = &RateLimitShown{Limit: rl.Limit, Per: rl.Per.String(), Burst: rl.Burst}
	}
	return l
}

// RouteConfig is a configured route as the admin server needs it.
type RouteConfig struct {
	Name, Topic, Queue string
	// Filter: nil when the route takes every record.
	Filter *RouteFilter
	// MaxDepth is its queue's max_depth; 0: none.
	MaxDepth int
	// Limits: nil when the route has none.
	Limits *RouteLimits
}

// pause is the answer to a pause or resume: the name and whether it is
// paused now.
type pause struct {
	Name   string `json:"name"`
	Paused bool   `json:"paused"`
}

func (s *Server) routeList(w http.ResponseWriter, r *http.Request) error {
	items, err := s.listing().RouteItems(r.Context(), s.store, s.cfg.Lag, s.log)
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, page[Route]{Items: items})
	return nil
}

// setPause pauses (or resumes) the queue, route or schedule named in
// the path, which must be configured.
func (s *Server) setPause(kind pgstore.PauseKind, paused bool) apiFunc {
	param := "queue"
	if kind != pgstore.PauseQueue {
		param = "name"
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		name := r.PathValue(param)
		var known bool
		switch kind {
		case pgstore.PauseQueue:
			known = slices.Contains(s.cfg.Queues, name)
		case pgstore.PauseRoute:
			known = slices.ContainsFunc(s.cfg.Routes, func(rc RouteConfig) bool { return rc.Name == name })
		case pgstore.PauseSchedule:
			_, known = s.schedule(name)
		}
		if !known {
			return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("no such %s: %q", kind, name), field: param}
		}
		change := s.store.Resume
		if paused {
			change = s.store.Pause
		}
		if _, err := change(r.Context(), kind, name, caller(r).Name); err != nil {
			return err
		}
		s.writeJSON(w, http.StatusOK, pause{Name: name, Paused: paused})
		return nil
	}
}
