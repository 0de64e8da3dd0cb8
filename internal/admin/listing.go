package admin

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/dlq"
	"github.com/switchyard-dev/switchyard/internal/ingest"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/schedule"
	"github.com/switchyard-dev/switchyard/jobstate"
)

// Listing is what GET /v1/queues, /v1/routes and /v1/schedules list: the
// configured queues, routes and schedules. The server answers from its
// Config's; the CLI's listing verbs print the same items with --json,
// so that a script reads one shape from either.
type Listing struct {
	Queues      []string
	Concurrency map[string]int
	Schedules   []schedule.Schedule
	Routes      []RouteConfig
	Groups      pgstore.Groups // GroupsOf the config
}

// ListingOf is a loaded config's Listing.
func ListingOf(cfg *config.Config) Listing {
	l := Listing{Queues: cfg.QueueNames(), Concurrency: map[string]int{}, Schedules: schedule.Of(cfg), Groups: GroupsOf(cfg)}
	for name, q := range cfg.Queues {
		l.Concurrency[name] = q.Concurrency
	}
	for _, r := range cfg.Routes {
		l.Routes = append(l.Routes, RouteConfig{Name: r.Name, Topic: r.Topic, Queue: r.Queue, Filter: NewRouteFilter(r),
			MaxDepth: cfg.Queues[r.Queue].MaxDepth, Limits: NewRouteLimits(r)})
	}
	return l
}

// GroupsOf is what pgstore.QueueStats needs of cfg's group caps: each
// grouped route's queue and cap, and the queues that only grouped routes
// feed.
func GroupsOf(cfg *config.Config) pgstore.Groups {
	g := pgstore.Groups{Routes: map[string]pgstore.GroupRoute{}, Only: map[string]bool{}}
	for _, r := range cfg.Routes {
		if r.Group != nil {
			g.Routes[r.Name] = pgstore.GroupRoute{Queue: r.Queue, Cap: r.Group.MaxRunning}
			if _, seen := g.Only[r.Queue]; !seen {
				g.Only[r.Queue] = true
			}
		} else {
			g.Only[r.Queue] = false
		}
	}
	return g
}

// QueueItems are GET /v1/queues' items: each configured queue even when
// it has no rows yet, and any other queue found in the database.
func (l Listing) QueueItems(ctx context.Context, store *pgstore.Store) ([]pgstore.QueueStat, error) {
	stats, err := store.QueueStats(ctx, l.Groups)
	if err != nil {
		return nil, err
	}
	pauses, err := store.Pauses(ctx)
	if err != nil {
		return nil, err
	}
	names := slices.Clone(l.Queues)
	for name := range stats {
		names = append(names, name)
	}
	sort.Strings(names)
	names = slices.Compact(names)
	items := make([]pgstore.QueueStat, 0, len(names))
	for _, name := range names {
		st := stats[name]
		if st == nil {
			st = &pgstore.QueueStat{Queue: name, Jobs: map[string]int64{}, DLQ: map[string]int64{}}
		}
		// Every queue reports each depth state and every DLQ reason, zero
		// included, so that its shape does not change as work comes and goes.
		zeroFill(st.Jobs, append(jobStateNames(jobstate.Depth), pgstore.Reserved))
		zeroFill(st.DLQ, dlq.Reasons)
		_, st.Paused = pauses[pgstore.PauseQueue][name]
		st.Concurrency = l.Concurrency[name]
		items = append(items, *st)
	}
	return items, nil
}

// LagFunc reads the fleet's Kafka lag by topic (ingest.LagReader.Lag).
type LagFunc func(ctx context.Context, topics []string) (map[string]ingest.TopicLag, error)

// RouteItems are GET /v1/routes' items, by name. lag nil leaves lag out;
// a lag that cannot be read is each item's lag_error, logged to log, and
// the rest of the answer stands.
func (l Listing) RouteItems(ctx context.Context, store *pgstore.Store, lag LagFunc, log *zap.Logger) ([]Route, error) {
	pauses, err := store.Pauses(ctx)
	if err != nil {
		return nil, err
	}
	routes := slices.Clone(l.Routes)
	sort.Slice(routes, func(i, j int) bool { return routes[i].Name < routes[j].Name })
	var lags map[string]ingest.TopicLag
	var lagErr error
	if lag != nil && len(routes) > 0 {
		var topics []string
		for _, rc := range routes {
			topics = append(topics, rc.Topic)
		}
		if lags, lagErr = lag(ctx, topics); lagErr != nil {
			log.Warn("reading kafka lag for the routes failed", zap.Error(lagErr))
		}
	}
	items := make([]Route, 0, len(routes))
	for _, rc := range routes {
		item := Route{Name: rc.Name, Topic: rc.Topic, Queue: rc.Queue, Filter: rc.Filter, Limits: rc.Limits}
		switch lag, ok := lags[rc.Topic]; {
		case lagErr != nil:
			item.LagError = lagErr.Error()
		case ok:
			item.Lag = &lag
		case lags != nil:
			// Kafka answered, without the topic: no lag and no error
			// would read as a route with nothing to say.
			item.LagError = fmt.Sprintf("kafka has no topic %q: it does not exist yet, or the route names another", rc.Topic)
		}
		_, item.Paused = pauses[pgstore.PauseRoute][rc.Name]
		if rc.MaxDepth > 0 {
			depth, err := store.QueueDepth(ctx, rc.Queue, rc.MaxDepth)
			if err != nil {
				return nil, err
			}
			item.Backpressured = depth >= rc.MaxDepth
		}
		items = append(items, item)
	}
	for i := range items {
		for _, o := range items {
			if o.Topic == items[i].Topic && o.Name != items[i].Name && (o.Paused || o.Backpressured) {
				items[i].HeldBy = append(items[i].HeldBy, o.Name)
			}
		}
	}
	return items, nil
}

// ScheduleItems are GET /v1/schedules' items, each with its next and
// last slot at now, in config order.
func (l Listing) ScheduleItems(ctx context.Context, store *pgstore.Store, now time.Time) ([]schedule.Status, error) {
	pauses, err := store.Pauses(ctx)
	if err != nil {
		return nil, err
	}
	items := make([]schedule.Status, 0, len(l.Schedules))
	for _, sc := range l.Schedules {
		_, paused := pauses[pgstore.PauseSchedule][sc.Name]
		st, err := schedule.StatusOf(ctx, store, sc, paused, now)
		if err != nil {
			return nil, err
		}
		items = append(items, st)
	}
	return items, nil
}
