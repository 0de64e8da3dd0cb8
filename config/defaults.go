package config

import (
	"time"

	"github.com/switchyard-dev/switchyard/jobstate"
)

// The policy of jobs that no route configures (API enqueues, schedules
// whose kind has no route), which is also a route's when it sets none.
const (
	DefaultMaxAttempts    = 8
	DefaultBackoffInitial = time.Second
	DefaultBackoffMax     = 10 * time.Minute
)

// The other defaults documented on the fields. They are applied here
// only: the components take the config as SetDefaults leaves it and
// refuse a zero they cannot use, so an embedder gets what the binary gets.
const (
	defaultClientID        = "switchyard"
	defaultFetchMaxRecords = 10000
	defaultFetchMaxBytes   = 2 << 20
	defaultSessionTimeout  = 10 * time.Second
	defaultMaxConns        = 20
	defaultSchema          = "switchyard"
	defaultShutdownGrace   = 30 * time.Second
	defaultGroup           = "switchyard"
	defaultReset           = "earliest"
	defaultListen          = "127.0.0.1:8080"
	defaultRetention       = 7 * 24 * time.Hour
	defaultAuditRetention  = 90 * 24 * time.Hour

	defaultConcurrency  = 4
	defaultLease        = 30 * time.Second
	defaultMaxRuntime   = 5 * time.Minute
	defaultPollInterval = time.Second

	defaultOnDead         = "continue"
	defaultMaxAttempts    = DefaultMaxAttempts
	defaultMaxRecordBytes = 1 << 20
	defaultDLQMaxBytes    = 64 << 10
	// DefaultResultMaxBytes is a route's result_max_bytes when unset.
	DefaultResultMaxBytes = 64 << 10
	maxResultMaxBytes     = 16 << 20
	defaultGapTimeout     = 5 * time.Minute
	defaultGapPolicy      = "park"
	defaultVersionPolicy  = "newer"
	defaultHTTPTimeout    = 10 * time.Second

	defaultTimezone = "UTC"
	defaultMisfire  = "run_once"
	defaultOverlap  = "skip"
)

// SetDefaults replaces every zero value that has a documented default. It
// is idempotent, and it never adds queues, routes or schedules: a pool or a
// topic nobody asked for would run or consume work silently.
func (c *Config) SetDefaults() {
	setDefault(&c.Kafka.Group, defaultGroup)
	setDefault(&c.Kafka.ClientID, defaultClientID)
	setDefault(&c.Kafka.Reset, defaultReset)
	setDefault(&c.Kafka.FetchMaxRecords, defaultFetchMaxRecords)
	setDefault(&c.Kafka.FetchMaxBytes, defaultFetchMaxBytes)
	setDefault(&c.Kafka.SessionTimeout, Duration(defaultSessionTimeout))
	setDefault(&c.Kafka.GroupProtocol, "classic")
	setDefault(&c.Postgres.MaxConns, defaultMaxConns)
	setDefault(&c.Postgres.Schema, defaultSchema)
	setDefault(&c.HTTP.Listen, defaultListen)
	setDefault(&c.ShutdownGrace, Duration(defaultShutdownGrace))
	if c.Retention == nil {
		c.Retention = map[string]Duration{}
	}
	if _, set := c.Retention[RetentionAudit]; !set {
		c.Retention[RetentionAudit] = Duration(defaultAuditRetention)
	}
	for i := range c.Admin.Tokens {
		setDefault(&c.Admin.Tokens[i].Role, RoleRead)
	}
	for _, st := range jobstate.Final {
		// Dead jobs stay until their DLQ entry is handled.
		if _, set := c.Retention[string(st)]; !set && st != jobstate.Dead {
			c.Retention[string(st)] = Duration(defaultRetention)
		}
	}

	for name, q := range c.Queues {
		setDefault(&q.Concurrency, defaultConcurrency)
		setDefault(&q.Lease, Duration(defaultLease))
		setDefault(&q.MaxRuntime, Duration(defaultMaxRuntime))
		setDefault(&q.PollInterval, Duration(defaultPollInterval))
		c.Queues[name] = q
	}

	perTopic := map[string]int{}
	for _, r := range c.Routes {
		perTopic[r.Topic]++
	}
	for i := range c.Routes {
		r := &c.Routes[i]
		if perTopic[r.Topic] == 1 {
			// A topic's one route is named after it, as every route was
			// before routes had names: existing jobs keep their route.
			setDefault(&r.Name, r.Topic)
		}
		setDefault(&r.OnDead, defaultOnDead)
		setDefault(&r.MaxAttempts, defaultMaxAttempts)
		setDefault(&r.Backoff.Initial, Duration(DefaultBackoffInitial))
		setDefault(&r.Backoff.Max, Duration(DefaultBackoffMax))
		setDefault(&r.MaxRecordBytes, defaultMaxRecordBytes)
		if r.DLQMaxBytes == nil {
			r.DLQMaxBytes = new(defaultDLQMaxBytes)
		}
		if r.ResultMaxBytes == nil {
			r.ResultMaxBytes = new(DefaultResultMaxBytes)
		}
		setDefault(&r.GapTimeout, Duration(defaultGapTimeout))
		setDefault(&r.GapPolicy, defaultGapPolicy)
		if r.Version != nil {
			setDefault(&r.Version.Policy, defaultVersionPolicy)
		}
		if r.Target.HTTP != nil {
			setDefault(&r.Target.HTTP.Timeout, Duration(defaultHTTPTimeout))
		}
	}

	for i := range c.Schedules {
		s := &c.Schedules[i]
		setDefault(&s.Timezone, defaultTimezone)
		setDefault(&s.Misfire, defaultMisfire)
		setDefault(&s.Overlap, defaultOverlap)
	}
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}
