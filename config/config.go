package config

import (
	"maps"
	"slices"
	"time"
)

// Config is the whole file.
type Config struct {
	Kafka    Kafka    `yaml:"kafka"`
	Postgres Postgres `yaml:"postgres"`
	HTTP     HTTP     `yaml:"http"`
	Admin    Admin    `yaml:"admin"`
	// Queues are the worker pools by name. At least one is required;
	// SetDefaults never adds one.
	Queues map[string]Queue `yaml:"queues"`
	// Routes map topics to jobs. At least one is required.
	Routes []Route `yaml:"routes"`
	// Schedules are optional.
	Schedules []Schedule `yaml:"schedules"`
	// ShutdownGrace is how long in-flight jobs may run after SIGTERM before
	// they are cancelled and released. Defaults to 30s.
	ShutdownGrace Duration `yaml:"shutdown_grace"`
	// Retention is how long finished jobs are kept, by final state
	// (succeeded, skipped, cancelled, expired, dead); 0 keeps them forever.
	// It is also the dedupe window against replays. Defaults to 168h for
	// every state but dead, which is kept until its DLQ entry is handled.
	// The key audit is how long the audit log keeps an action: defaults
	// to 2160h (90 days). The key versions is how long an idle versioned
	// lane keeps its last applied version, against which a late record of
	// its key is judged stale: unset (or 0), for good.
	Retention map[string]Duration `yaml:"retention"`
	// Tracing configures OpenTelemetry tracing (v2). Off unless an
	// endpoint is set here or in OTEL_EXPORTER_OTLP_ENDPOINT.
	Tracing Tracing `yaml:"tracing"`
}

// Tracing configures OpenTelemetry tracing: OTLP over gRPC. The standard
// OTEL_* environment variables are honoured (internal/tracing).
type Tracing struct {
	// OTLPEndpoint is host:port of an OTLP gRPC receiver (a collector),
	// e.g. 127.0.0.1:4317; it wins over OTEL_EXPORTER_OTLP_ENDPOINT.
	// Defaults to "": the environment's endpoint, else tracing is off.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// SampleRatio is the share of new traces sampled, in [0, 1]; a
	// record's sampled traceparent is followed whatever it is. Defaults
	// to 1.0 (nil); 0 samples no new trace.
	SampleRatio *float64 `yaml:"sample_ratio"`
}

// DefaultSampleRatio is tracing.sample_ratio when unset.
const DefaultSampleRatio = 1.0

// Ratio is the sample ratio, its default filled in.
func (t Tracing) Ratio() float64 {
	if t.SampleRatio == nil {
		return DefaultSampleRatio
	}
	return *t.SampleRatio
}

// RetentionAudit is the retention key of the audit log.
const RetentionAudit = "audit"

// RetentionVersions is the retention key of an idle versioned lane's last
// applied version.
const RetentionVersions = "versions"

// Admin configures who may use the admin API besides the operator token
// of SWITCHYARD_ADMIN_TOKEN (http.token), which is named "default".
type Admin struct {
	// Tokens are named bearer tokens. Optional.
	Tokens []AdminToken `yaml:"tokens"`
}

// Admin token roles.
const (
	RoleRead    = "read"    // GETs only
	RoleOperate = "operate" // read, and every action
)

// DefaultTokenName names the token of SWITCHYARD_ADMIN_TOKEN.
const DefaultTokenName = "default"

// AdminToken is one named bearer token. The token itself is read from
// the environment variable TokenEnv at load, never from the file, and is
// never logged or shown.
type AdminToken struct {
	// Name identifies the token's holder: the actor in the audit log.
	// Required, unique, not "default".
	Name string `yaml:"name"`
	// TokenEnv names the environment variable that holds the token.
	// Required; the variable must be set.
	TokenEnv string `yaml:"token_env"`
	// Role is read (GETs only) or operate (every action too). Defaults
	// to read.
	Role string `yaml:"role"`
	// Token is the variable's value, set by Load.
	Token string `yaml:"-"`
}

// Kafka configures the consumer.
type Kafka struct {
	// Brokers are host:port seeds. Overridden by SWITCHYARD_KAFKA_BROKERS
	// (comma-separated). Required.
	Brokers []string `yaml:"brokers"`
	// Group is the consumer group id. Defaults to "switchyard".
	Group string `yaml:"group"`
	// ClientID defaults to "switchyard".
	ClientID string `yaml:"client_id"`
	// Reset is where a partition with no stored offset starts:
	// earliest | latest. Defaults to earliest.
	Reset string `yaml:"reset"`
	// FetchMaxRecords caps records per poll. Defaults to 10000.
	FetchMaxRecords int `yaml:"fetch_max_records"`
	// FetchMaxBytes bounds what one fetch from a broker returns, as
	// compressed on the wire, and so the records a client holds buffered
	// (decompressed, several times that) beside the poll it is storing. A
	// partition's share is at most 1 MiB, the client's default. A record
	// larger than the bound still arrives, alone. Defaults to 2 MiB.
	FetchMaxBytes int `yaml:"fetch_max_bytes"`
	// GroupProtocol is classic or consumer (KIP-848, where the broker
	// assigns partitions; Kafka 4.0+, best on 4.3+). Defaults to classic.
	GroupProtocol string `yaml:"group_protocol"`
	// SessionTimeout is how long the group waits for a silent member
	// (a crashed process) before handing its partitions to others.
	// Defaults to 10s; the broker bounds it (group.min.session.timeout.ms).
	SessionTimeout Duration `yaml:"session_timeout"`
	// InstanceID enables static membership: a restarted process with the
	// same id takes its partitions back without a rebalance. Unique per
	// process; SWITCHYARD_KAFKA_INSTANCE_ID wins. Defaults to none.
	InstanceID string `yaml:"instance_id"`
	// TLS, when present, encrypts broker connections.
	TLS *KafkaTLS `yaml:"tls"`
	// SASL, when present, authenticates to the brokers.
	SASL *KafkaSASL `yaml:"sasl"`
}

// The bounds of kafka.fetch_max_bytes: a fetch's sizes are int32s on the
// wire, and below a KiB a fetch would hardly ever bring two records.
const (
	MinFetchMaxBytes = 1 << 10
	MaxFetchMaxBytes = 1 << 30
)

// KafkaTLS configures TLS to the brokers. All files are PEM. An empty
// block (tls: {}) means TLS with the system roots.
type KafkaTLS struct {
	// CAFile replaces the system roots. Defaults to the system roots.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a client certificate for mutual TLS; both
	// or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName overrides the name checked in the broker's certificate.
	ServerName string `yaml:"server_name"`
}

// KafkaSASL configures SASL authentication.
type KafkaSASL struct {
	// Mechanism is PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER.
	Mechanism string `yaml:"mechanism"`
	// Username for PLAIN and SCRAM.
	Username string `yaml:"username"`
	// Password for PLAIN and SCRAM; SWITCHYARD_KAFKA_SASL_PASSWORD wins.
	// Never logged.
	Password string `yaml:"password"`
	// TokenFile holds the OAUTHBEARER token, read again at every
	// authentication so that an external refresher can rotate it. Go
	// embedders may pass a token hook instead (Options.OAuthToken).
	TokenFile string `yaml:"token_file"`
}

// Postgres configures the database.
type Postgres struct {
	// URL is a libpq URL or DSN. Overridden by SWITCHYARD_DATABASE_URL.
	// Required.
	URL string `yaml:"url"`
	// MaxConns caps the pool. Defaults to 20.
	MaxConns int32 `yaml:"max_conns"`
	// Schema holds all tables. Defaults to "switchyard". Must match
	// ^[a-z_][a-z0-9_]{0,62}$.
	Schema string `yaml:"schema"`
}

// HTTP configures the admin server.
type HTTP struct {
	// Listen is host:port. Defaults to 127.0.0.1:8080. Empty string after
	// defaults is impossible; use "off" to disable the server.
	Listen string `yaml:"listen"`
	// Token is the admin bearer token. Only from SWITCHYARD_ADMIN_TOKEN or
	// this field; never logged.
	Token string `yaml:"token"`
	// AllowedHosts are the host names (no port) by which clients reach
	// the server, besides loopback names and IP addresses: a request whose
	// Host header names anything else is refused (421), which defeats DNS
	// rebinding. Behind a load balancer or a Kubernetes Service, list the
	// names clients use. Defaults to none.
	AllowedHosts []string `yaml:"allowed_hosts"`
}

// MaxPrefetch bounds a queue's prefetch at MaxPrefetch × its concurrency:
// room for a local queue of graphile-worker's size (500) beside 64
// workers, refilled by claims of ~155 jobs, where 3 × gave claims of
// 75-100 (docs/performance.md, "A local queue as large as a peer's").
const MaxPrefetch = 8

// Queue is one worker pool (bulkhead).
type Queue struct {
	// Concurrency is the number of jobs run at once by one process.
	// Defaults to 4.
	Concurrency int `yaml:"concurrency"`
	// Lease is how long a claim lasts without a heartbeat. Defaults to 30s.
	Lease Duration `yaml:"lease"`
	// MaxRuntime caps one attempt. Defaults to 5m.
	MaxRuntime Duration `yaml:"max_runtime"`
	// MaxDepth bounds the queue's unstarted jobs (waiting, queued,
	// retrying): API enqueues past it are refused (429), and ingest holds
	// the routes that feed the queue (backpressure: records wait in
	// Kafka) until it is below 90 % of it. 0 = no limit.
	MaxDepth int `yaml:"max_depth"`
	// Prefetch is how many jobs one process may hold claimed beyond its
	// idle workers while the queue has a backlog, each waiting (leased)
	// for the next worker to free: claims come in larger batches and a
	// freed worker starts its next job without a round trip. Right for
	// fast, uniform jobs; for slow or variable ones a prefetched job waits
	// behind a long one while another process's worker could run it.
	// Defaults to 0: claim only for idle workers. At most MaxPrefetch ×
	// concurrency.
	Prefetch int `yaml:"prefetch"`
	// StealFrom lists queues whose runnable jobs this pool's idle workers
	// run when its own queue has none, in order, under this pool's lease
	// and max_runtime. A queue never steals from itself. Defaults to none.
	StealFrom []string `yaml:"steal_from"`
	// PollInterval is how often an idle pool looks for work. Defaults to 1s.
	PollInterval Duration `yaml:"poll_interval"`
}

// Route maps the records of a topic to jobs. A route is identified by
// its name: jobs, lanes, DLQ entries, pauses and metrics carry it. A
// topic may have several routes; each record becomes one job per route
// whose filter takes it.
type Route struct {
	// Topic is the Kafka topic read. Required.
	Topic string `yaml:"topic"`
	// Name identifies the route, unique across routes. Defaults to the
	// topic when the topic has one route; required when it has several.
	// Renaming a route leaves its unfinished jobs without a route, so an
	// existing route keeps its topic as its name.
	Name string `yaml:"name"`
	// Filter selects the records the route takes. Optional: without it
	// the route takes every record of its topic.
	Filter *Filter `yaml:"filter"`
	// Kind is the job kind handlers register for. Required.
	Kind string `yaml:"kind"`
	// Queue names the configured queue whose pool runs the jobs. Required.
	Queue string `yaml:"queue"`
	// Key is the job key (the lane of an ordered route). Defaults to the
	// record key.
	Key FieldRef `yaml:"key"`
	// Version is optional; it needs Ordered, because versions are compared
	// within one key's lane.
	Version *Version `yaml:"version"`
	// Dedupe is the dedupe key. Defaults to topic/partition/offset.
	Dedupe FieldRef `yaml:"dedupe"`
	// Ordered runs one job per key at a time, in order. Defaults to false.
	Ordered bool `yaml:"ordered"`
	// OnDead is continue | block. Defaults to continue.
	OnDead string `yaml:"on_dead"`
	// MaxAttempts defaults to 8.
	MaxAttempts int     `yaml:"max_attempts"`
	Backoff     Backoff `yaml:"backoff"`
	// TTL is the deadline to start a job, from when it may run; 0 = none.
	TTL Duration `yaml:"ttl"`
	// RunAt reads when a record's job may run first: an RFC 3339 time or
	// integer Unix milliseconds, from a field of the JSON value or a
	// header. A time past (or a record without the value) runs now; one
	// that parses as neither is poison (decode). Optional; not with Delay.
	RunAt FieldRef `yaml:"run_at"`
	// Delay runs a record's job this long after the record's timestamp.
	// Defaults to 0 (at once); not with RunAt.
	Delay Duration `yaml:"delay"`
	// MaxRunning caps this route's running jobs across every process of
	// the fleet together (SPEC §2 I9): a dependency that sustains so many
	// calls at once gets no more, however many processes and workers
	// there are. Each process leases a share of it and starts the
	// route's jobs only on its share (internal/flow), and they are never
	// handed off in a lane. 0 = no cap. Defaults to 0.
	MaxRunning int `yaml:"max_running"`
	// Group caps the running jobs of each group value of this route (a
	// tenant id, say) across the fleet: a flood from one value cannot
	// hold back the others. Optional.
	Group *Group `yaml:"group"`
	// RateLimit caps this route's attempt starts across the fleet.
	// Optional.
	RateLimit *RateLimit `yaml:"rate_limit"`
	// Coalesce is "latest", or "none" (the default, also when empty).
	// latest: a key has at most one
	// unstarted job of this route — a newer record's job replaces the
	// waiting, queued or retrying ones of its key, which end coalesced
	// without running; in an ordered route the lane's head, once
	// promoted, runs, and its waiting jobs collapse to the newest. Jobs
	// with an empty key are never coalesced. Not with version policy
	// strict, whose lanes wait for every version. Defaults to empty (off).
	Coalesce string `yaml:"coalesce"`
	// ResultMaxBytes is how much of a job's result is kept: the first
	// bytes of an HTTP target's 2xx body (with its Content-Type), or what
	// a Go handler passed to Job.SetResult. 0 keeps none. Defaults to
	// 64 KiB; at most 16 MiB.
	ResultMaxBytes *int `yaml:"result_max_bytes"`
	// MaxRecordBytes: larger records are parked as too_large. Defaults to 1 MiB.
	MaxRecordBytes int `yaml:"max_record_bytes"`
	// DLQMaxBytes is how much of a too_large record its DLQ entry keeps
	// (its key, headers, then a prefix of its value); a re-drive reads the
	// whole record from Kafka again while the topic retains it. 0 keeps
	// only its position. Defaults to 64 KiB (a pointer: 0 is a value).
	DLQMaxBytes *int `yaml:"dlq_max_bytes"`
	// GapTimeout is how long a strict-version lane waits for a missing
	// version before GapPolicy applies. Defaults to 5m.
	GapTimeout Duration `yaml:"gap_timeout"`
	// GapPolicy is proceed | park. Defaults to park.
	GapPolicy string `yaml:"gap_policy"`
	Target    Target `yaml:"target"`
}

// FieldRef names where a value comes from: a dotted JSON path into the
// record value (Field) or a record header (Header). Both empty means the
// default for that use (record key; topic/partition/offset for dedupe).
type FieldRef struct {
	Field  string `yaml:"field"`
	Header string `yaml:"header"`
}

// IsZero reports whether neither field nor header is set.
func (f FieldRef) IsZero() bool { return f.Field == "" && f.Header == "" }

// Filter takes the records whose field (a dotted JSON path into the
// value) or header reads one of In. A record the filter cannot read — the
// field or header missing, the value not JSON, the field not a scalar —
// is not taken. JSON strings compare by their text, numbers and booleans
// by their JSON spelling (42, true).
type Filter struct {
	FieldRef `yaml:",inline"`
	// In lists the values taken. Required, at least one.
	In []string `yaml:"in"`
}

// Group is a route's per-group cap: the group value is read like a key
// (a field of the JSON value, or a header), and at most MaxRunning jobs
// of one value run at once, fleet-wide. A record without the value is
// parked (missing_field).
type Group struct {
	FieldRef `yaml:",inline"`
	// MaxRunning is required, at least 1.
	MaxRunning int `yaml:"max_running"`
}

// RateLimit caps a route's attempt starts, fleet-wide: at most Limit +
// Burst in any window of Per (one more at a window's edge), spaced Per /
// Limit apart once a burst is spent.
type RateLimit struct {
	// Limit is the starts allowed per Per. Required, at least 1.
	Limit int `yaml:"limit"`
	// Per is the window. Required, positive.
	Per Duration `yaml:"per"`
	// Burst is how many starts beyond the rate an idle route may make at
	// once. Defaults to 0.
	Burst int `yaml:"burst"`
}

// Interval is the spacing of starts at the limit: Per / Limit.
func (r RateLimit) Interval() time.Duration { return r.Per.D() / time.Duration(r.Limit) }

// Version configures per-key versions.
type Version struct {
	FieldRef `yaml:",inline"`
	// Policy is newer | strict. Defaults to newer.
	Policy string `yaml:"policy"`
}

// Backoff is exponential with full jitter.
type Backoff struct {
	// Initial defaults to 1s.
	Initial Duration `yaml:"initial"`
	// Max defaults to 10m.
	Max Duration `yaml:"max"`
}

// Target says who runs a route's jobs: exactly one of HTTP or Go.
type Target struct {
	HTTP *HTTPTarget `yaml:"http"`
	// Go means a handler registered in-process for the route's kind.
	Go bool `yaml:"go"`
}

// HTTPTarget is the SPEC §5 protocol endpoint.
type HTTPTarget struct {
	// URL is an absolute http or https URL. Required.
	URL string `yaml:"url"`
	// Timeout per attempt. Defaults to 10s.
	Timeout Duration `yaml:"timeout"`
	// FollowRedirects defaults to false.
	FollowRedirects bool `yaml:"follow_redirects"`
}

// Schedule is a cron job: at every minute its expression names, in its
// time zone, one job of Kind is enqueued on Queue.
type Schedule struct {
	// Name identifies the schedule. Required, unique.
	Name string `yaml:"name"`
	// Cron is five fields: minute hour day-of-month month day-of-week,
	// each a comma-separated list of *, N, N-M, */S or N-M/S. Names (MON),
	// N/S and macros (@daily) are refused. Required.
	Cron string `yaml:"cron"`
	// Timezone is an IANA zone name. Defaults to UTC.
	Timezone string `yaml:"timezone"`
	// Kind is the job kind enqueued. Required.
	Kind string `yaml:"kind"`
	// Queue names the configured queue. Required.
	Queue string `yaml:"queue"`
	// Misfire is run_once | skip | catch_up. Defaults to run_once.
	Misfire string `yaml:"misfire"`
	// Overlap is skip | allow. Defaults to skip.
	Overlap string `yaml:"overlap"`
	// Jitter delays each run by a random amount up to it. Defaults to 0.
	Jitter Duration `yaml:"jitter"`
}

// Duration is a time.Duration written as a Go duration string ("30s").
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// QueueNames returns the configured queue names, sorted.
func (c *Config) QueueNames() []string {
	return slices.Sorted(maps.Keys(c.Queues))
}

// RoutesOfTopic returns the routes of topic, in config order.
func (c *Config) RoutesOfTopic(topic string) []Route {
	var out []Route
	for _, r := range c.Routes {
		if r.Topic == topic {
			out = append(out, r)
		}
	}
	return out
}

// RouteNamed returns the route called name.
func (c *Config) RouteNamed(name string) (Route, bool) {
	for _, r := range c.Routes {
		if r.Name == name {
			return r, true
		}
	}
	return Route{}, false
}

// RouteOfKind returns the first route of kind, in config order, and
// with queue set the first of kind in that queue.
func (c *Config) RouteOfKind(kind, queue string) (Route, bool) {
	for _, r := range c.Routes {
		if r.Kind == kind && (queue == "" || r.Queue == queue) {
			return r, true
		}
	}
	return Route{}, false
}

// FlowLimited reports whether the route has a fleet-wide limit
// (max_running, group or rate_limit).
func (r Route) FlowLimited() bool {
	return r.MaxRunning > 0 || r.Group != nil || r.RateLimit != nil
}

// ResultLimit is ResultMaxBytes, set by SetDefaults.
func (r Route) ResultLimit() int {
	if r.ResultMaxBytes == nil {
		return DefaultResultMaxBytes
	}
	return *r.ResultMaxBytes
}

// CoalesceLatest reports whether coalesce is latest.
func (r Route) CoalesceLatest() bool { return r.Coalesce == "latest" }

// DLQLimit is DLQMaxBytes, set by SetDefaults.
func (r Route) DLQLimit() int {
	if r.DLQMaxBytes == nil {
		return defaultDLQMaxBytes
	}
	return *r.DLQMaxBytes
}
