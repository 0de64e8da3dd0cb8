package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	// Schedules name IANA zones; without the embedded database a config
	// that validates on a laptop would fail in a slim container image.
	_ "time/tzdata"

	"github.com/switchyard-dev/switchyard/internal/cron"
	"github.com/switchyard-dev/switchyard/jobstate"
)

// FieldError is one problem with one setting.
type FieldError struct {
	Field string // path as written in the file: "routes[1].queue"
	Msg   string
	// Line is where the file sets the field, or, for one it leaves out,
	// the nearest setting around it that it has; 0 when unknown (a value
	// from the environment, a config built in Go).
	Line int
}

func (e *FieldError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s: %s", e.Line, e.Field, e.Msg)
	}
	return e.Field + ": " + e.Msg
}

// Limits past which a value is almost certainly a typo, or would hurt
// Postgres more than it helps.
const (
	maxConcurrency    = 10000
	minLease          = time.Second
	minPollInterval   = 10 * time.Millisecond
	maxMaxAttempts    = 1000
	maxMaxRecordBytes = 64 << 20
)

var (
	reSchema = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
	reQueue  = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)
	reTopic  = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)
	reKind   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`)
	// reName is a route name: any topic name (the default) and ':' too,
	// but never '/', which schedules' routes (schedule/<name>) use.
	reName = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,249}$`)
	// reHostName is a DNS name: dot-separated labels of letters, digits and
	// hyphens.
	reHostName = regexp.MustCompile(`^(?i:[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.(?i:[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?))*\.?$`)
)

// Validate reports every problem in c, each a *FieldError, joined with
// errors.Join; nil means c is usable. It expects SetDefaults to have run:
// a zero where a default belongs is reported as out of range.
func (c *Config) Validate() error {
	if c == nil {
		return ErrNil
	}
	var p problems
	c.validateKafka(&p)
	c.validatePostgres(&p)
	c.validateHTTP(&p)
	if c.ShutdownGrace <= 0 {
		p.add("shutdown_grace", "must be positive")
	}
	for st := range c.Retention {
		if st != RetentionAudit && st != RetentionVersions && !jobstate.State(st).IsFinal() {
			p.add("retention."+st, "not a final state: want one of %s, audit or versions", jobstate.Join(jobstate.Final))
		}
	}
	c.validateAdmin(&p)
	c.validateTracing(&p)
	c.validateQueues(&p)
	c.validateRoutes(&p)
	c.validateSchedules(&p)
	return errors.Join(p...)
}

type problems []error

func (p *problems) add(field, format string, args ...any) {
	*p = append(*p, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
}

// oneOf checks an enumerated setting.
// ErrNil is what a nil config is, wherever one is taken (Validate, and
// the users of a config that need only part of it).
var ErrNil = errors.New("config: nil: load one with config.Load or config.Parse")

func (p *problems) oneOf(field, v string, allowed ...string) {
	if !slices.Contains(allowed, v) {
		p.add(field, "%q is not one of %s", v, strings.Join(allowed, ", "))
	}
}

func (p *problems) between(field string, v, lo, hi int) {
	if v < lo || v > hi {
		p.add(field, "%d is out of range %d..%d", v, lo, hi)
	}
}

func (c *Config) validateKafka(p *problems) {
	if len(c.Kafka.Brokers) == 0 {
		p.add("kafka.brokers", "required: list host:port seeds or set %s", EnvKafkaBrokers)
	}
	for i, b := range c.Kafka.Brokers {
		if msg := checkHostPort(b, false); msg != "" {
			p.add(fmt.Sprintf("kafka.brokers[%d]", i), "%q: %s", b, msg)
		}
	}
	p.oneOf("kafka.reset", c.Kafka.Reset, "earliest", "latest")
	p.oneOf("kafka.group_protocol", c.Kafka.GroupProtocol, "classic", "consumer")
	if c.Kafka.SessionTimeout < Duration(time.Second) || c.Kafka.SessionTimeout > Duration(30*time.Minute) {
		p.add("kafka.session_timeout", "%s is outside 1s..30m", c.Kafka.SessionTimeout)
	}
	if t := c.Kafka.TLS; t != nil && (t.CertFile == "") != (t.KeyFile == "") {
		p.add("kafka.tls", "cert_file and key_file go together: set both or neither")
	}
	if s := c.Kafka.SASL; s != nil {
		p.oneOf("kafka.sasl.mechanism", s.Mechanism, "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
		switch s.Mechanism {
		case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
			if s.Username == "" {
				p.add("kafka.sasl.username", "required for %s", s.Mechanism)
			}
			if s.Password == "" {
				p.add("kafka.sasl.password", "required for %s: set it or %s", s.Mechanism, EnvKafkaSASLPassword)
			}
		}
	}
	if c.Kafka.FetchMaxRecords < 1 {
		p.add("kafka.fetch_max_records", "must be at least 1")
	}
	if b := c.Kafka.FetchMaxBytes; b < MinFetchMaxBytes || b > MaxFetchMaxBytes {
		p.add("kafka.fetch_max_bytes", "%d is not between %d and %d", b, MinFetchMaxBytes, MaxFetchMaxBytes)
	}
}

// checkHostPort returns what is wrong with a host:port address, or "".
// A listener may leave the host empty (all interfaces) and use port 0.
func checkHostPort(s string, listener bool) string {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "want host:port"
	}
	if host == "" && !listener {
		return "missing host"
	}
	if strings.ContainsFunc(host, unicode.IsSpace) {
		return "host contains whitespace"
	}
	n, err := strconv.Atoi(port)
	lo := 1
	if listener {
		lo = 0
	}
	if err != nil || n < lo || n > 65535 {
		return fmt.Sprintf("port must be a number %d..65535", lo)
	}
	return ""
}

func (c *Config) validatePostgres(p *problems) {
	if c.Postgres.URL == "" {
		p.add("postgres.url", "required: set it or %s", EnvDatabaseURL)
	} else if err := CheckPostgresURL(c.Postgres.URL); err != nil {
		*p = append(*p, err)
	}
	if c.Postgres.MaxConns < 1 {
		p.add("postgres.max_conns", "must be at least 1")
	}
	switch s := c.Postgres.Schema; {
	case !reSchema.MatchString(s):
		p.add("postgres.schema", "%q: use lowercase letters, digits and _, not starting with a digit, at most 63 characters", s)
	case strings.HasPrefix(s, "pg_"):
		p.add("postgres.schema", "%q: names starting with pg_ are reserved by PostgreSQL", s)
	}
}

func (c *Config) validateHTTP(p *problems) {
	for i, h := range c.HTTP.AllowedHosts {
		if !reHostName.MatchString(h) {
			p.add(fmt.Sprintf("http.allowed_hosts[%d]", i), "%q: want a host name such as switchyard.example.com, without scheme, port or path", h)
		}
	}
	if c.HTTP.Listen == "off" {
		return
	}
	if msg := checkHostPort(c.HTTP.Listen, true); msg != "" {
		p.add("http.listen", "%q: %s, or \"off\"", c.HTTP.Listen, msg)
	}
}

// validateTracing checks the OTLP endpoint's shape (host:port: OTLP
// gRPC takes no scheme or path) and the sample ratio's range.
func (c *Config) validateTracing(p *problems) {
	t := c.Tracing
	if t.OTLPEndpoint != "" {
		if msg := checkHostPort(t.OTLPEndpoint, false); msg != "" {
			p.add("tracing.otlp_endpoint", "%q: %s, such as 127.0.0.1:4317 (no scheme or path)", t.OTLPEndpoint, msg)
		}
	}
	if r := t.Ratio(); !(r >= 0 && r <= 1) {
		p.add("tracing.sample_ratio", "%v is out of range 0..1", r)
	}
}

// validateAdmin checks the named tokens' names, roles and variables. The
// variables' values are checked by ServingErrors, by the processes that
// serve the API only: the CLI's verbs read the same file from an
// operator's shell, which holds none of the tokens.
func (c *Config) validateAdmin(p *problems) {
	byName := map[string]int{}
	for i, t := range c.Admin.Tokens {
		f := fmt.Sprintf("admin.tokens[%d]", i)
		switch first, dup := byName[t.Name]; {
		case t.Name == "":
			p.add(f+".name", "required: it names the token's holder in the audit log")
		case t.Name == DefaultTokenName:
			p.add(f+".name", "%q is the name of %s's token; choose another", t.Name, EnvAdminToken)
		case !reName.MatchString(t.Name):
			p.add(f+".name", "%q: use letters, digits, _ . : and -", t.Name)
		case dup:
			p.add(f+".name", "%q is already the name of admin.tokens[%d]", t.Name, first)
		default:
			byName[t.Name] = i
		}
		p.oneOf(f+".role", t.Role, RoleRead, RoleOperate)
		if t.TokenEnv == "" {
			p.add(f+".token_env", "required: the environment variable that holds the token (tokens are never written in the file)")
		}
	}
}

// minTokenBytes is the shortest admin token Warnings lets pass on an
// address others can reach: the API answers a wrong token at once, so a
// short one can be guessed online.
const minTokenBytes = 16

// Warnings are what a serving process should tell its operator about the
// config, though it runs: a secret it would send in clear, a token short
// enough to guess. Each names its field; none echoes a value.
func (c *Config) Warnings() []string {
	var w []string
	if s := c.Kafka.SASL; s != nil && c.Kafka.TLS == nil && (s.Mechanism == "PLAIN" || s.Mechanism == "OAUTHBEARER") {
		w = append(w, fmt.Sprintf("kafka.sasl.mechanism: %s without kafka.tls sends the credentials to the brokers in clear text; "+
			"add kafka.tls (tls: {} for the system roots)", s.Mechanism))
	}
	if c.HTTP.Listen == "off" || Loopback(c.HTTP.Listen) {
		return w
	}
	short := func(field, token string) {
		if token != "" && len(token) < minTokenBytes {
			w = append(w, fmt.Sprintf("%s: the token is %d bytes on %s, which others can reach; "+
				"use %d or more random bytes (openssl rand -hex 32)", field, len(token), c.HTTP.Listen, minTokenBytes))
		}
	}
	short("http.token", c.HTTP.Token)
	for i, t := range c.Admin.Tokens {
		short(fmt.Sprintf("admin.tokens[%d].token_env", i), t.Token)
	}
	return w
}

// ServingErrors reports what keeps a process from serving the admin API
// on http.listen (not "off"): an address others can reach with no token
// to require, and named tokens whose variable is unset or empty, or
// holds another holder's token. The CLI's verbs, which serve nothing and
// run where none of the tokens is set, read the same file without these
// checks. Token values are never echoed.
func (c *Config) ServingErrors() error {
	var p problems
	if c.HTTP.Listen != "off" && c.HTTP.Token == "" && len(c.Admin.Tokens) == 0 && !Loopback(c.HTTP.Listen) {
		p.add("http.listen", "%s is not a loopback address; set %s (or admin.tokens) to listen on it", c.HTTP.Listen, EnvAdminToken)
	}
	byToken := map[string]int{}
	for i, t := range c.Admin.Tokens {
		f := fmt.Sprintf("admin.tokens[%d]", i)
		switch first, dup := byToken[t.Token]; {
		case t.TokenEnv == "":
		case t.Token == "":
			p.add(f+".token_env", "%s is not set, or empty", t.TokenEnv)
		case t.Token == c.HTTP.Token:
			p.add(f+".token_env", "%s holds the same token as %s: each holder needs a token of its own", t.TokenEnv, EnvAdminToken)
		case dup:
			p.add(f+".token_env", "%s holds the same token as admin.tokens[%d]: each holder needs a token of its own", t.TokenEnv, first)
		default:
			byToken[t.Token] = i
		}
	}
	return errors.Join(p...)
}

// Loopback reports whether a host:port address is this host's only: the
// admin API must listen on one without a token (it shows payloads and
// changes state), and tracing speaks plain gRPC to one. Loopback is
// 127.0.0.0/8, ::1 and "localhost"; an empty host (":8080") binds every
// interface and so is not loopback. Other host names are not either,
// since what they resolve to can change.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

func (c *Config) validateQueues(p *problems) {
	if len(c.Queues) == 0 {
		p.add("queues", "at least one queue is required")
	}
	for _, name := range c.QueueNames() {
		q := c.Queues[name]
		f := queueField(name)
		if !reQueue.MatchString(name) {
			p.add(f, "invalid queue name: use lowercase letters, digits, _ . and -, starting with a letter or digit, at most 63 characters")
		}
		p.between(f+".concurrency", q.Concurrency, 1, maxConcurrency)
		if q.Lease < Duration(minLease) {
			p.add(f+".lease", "%s is shorter than %s", q.Lease, minLease)
		}
		if q.MaxRuntime <= 0 {
			p.add(f+".max_runtime", "must be positive")
		}
		if q.MaxDepth < 0 {
			p.add(f+".max_depth", "must not be negative (0 means no limit)")
		}
		// Its bound follows from concurrency, which is reported on its own
		// when out of range ("0 is not between 0 and … (-24)" is noise).
		if q.Prefetch < 0 || (q.Concurrency > 0 && q.Prefetch > MaxPrefetch*q.Concurrency) {
			p.add(f+".prefetch", "%d is not between 0 and %d × concurrency (%d)",
				q.Prefetch, MaxPrefetch, MaxPrefetch*q.Concurrency)
		}
		if q.PollInterval < Duration(minPollInterval) {
			p.add(f+".poll_interval", "%s is shorter than %s", q.PollInterval, minPollInterval)
		}
		for i, from := range q.StealFrom {
			sf := fmt.Sprintf("%s.steal_from[%d]", f, i)
			switch {
			case from == name:
				p.add(sf, "a queue cannot steal from itself")
			case !c.hasQueue(from):
				p.add(sf, "%s", c.unknownQueue(from))
			}
		}
	}
}

// queueField is the path of a queue, quoted when the name itself is the
// problem so that the path stays readable.
func queueField(name string) string {
	if reQueue.MatchString(name) {
		return "queues." + name
	}
	return fmt.Sprintf("queues[%q]", name)
}

func (c *Config) hasQueue(name string) bool {
	_, ok := c.Queues[name]
	return ok
}

func (c *Config) unknownQueue(name string) string {
	if len(c.Queues) == 0 {
		return fmt.Sprintf("unknown queue %q (no queues configured)", name)
	}
	return fmt.Sprintf("unknown queue %q (configured: %s)", name, strings.Join(c.QueueNames(), ", "))
}

// checkQueueRef checks a route's or schedule's queue.
func (c *Config) checkQueueRef(p *problems, field, name string) {
	switch {
	case name == "":
		p.add(field, "required")
	case !c.hasQueue(name):
		p.add(field, "%s", c.unknownQueue(name))
	}
}

func checkKind(p *problems, field, kind string) {
	switch {
	case kind == "":
		p.add(field, "required")
	case !reKind.MatchString(kind):
		p.add(field, "%q: use letters, digits, _ . : and -, starting with a letter or digit, at most 128 characters", kind)
	}
}

func (c *Config) validateRoutes(p *problems) {
	if len(c.Routes) == 0 {
		p.add("routes", "at least one route is required")
	}
	byName, perTopic := map[string]int{}, map[string]int{}
	for _, r := range c.Routes {
		perTopic[r.Topic]++
	}
	for i := range c.Routes {
		r := &c.Routes[i]
		f := fmt.Sprintf("routes[%d]", i)
		switch first, dup := byName[r.Name]; {
		case r.Name == "" && perTopic[r.Topic] > 1:
			p.add(f+".name", "required: topic %q has %d routes, so each needs a name (a route that existed before keeps its jobs with name: %s)",
				r.Topic, perTopic[r.Topic], r.Topic)
		case r.Name == "":
			p.add(f+".name", "required")
		case !reName.MatchString(r.Name) || r.Name == "." || r.Name == "..":
			p.add(f+".name", "%q: use letters, digits, _ . : and -, at most 249 characters", r.Name)
		case dup:
			p.add(f+".name", "%q is already the name of routes[%d]", r.Name, first)
		default:
			byName[r.Name] = i
		}
		if fl := r.Filter; fl != nil {
			if fl.IsZero() {
				p.add(f+".filter", "set field or header: the value the filter compares")
			}
			checkFieldRef(p, f+".filter", fl.FieldRef)
			if len(fl.In) == 0 {
				p.add(f+".filter.in", "required: the values whose records the route takes")
			}
		}

		switch {
		case r.Topic == "":
			p.add(f+".topic", "required")
		case !reTopic.MatchString(r.Topic) || r.Topic == "." || r.Topic == "..":
			p.add(f+".topic", "%q is not a valid Kafka topic name", r.Topic)
		}
		checkKind(p, f+".kind", r.Kind)
		c.checkQueueRef(p, f+".queue", r.Queue)

		checkFieldRef(p, f+".key", r.Key)
		checkFieldRef(p, f+".dedupe", r.Dedupe)
		if v := r.Version; v != nil {
			if v.IsZero() {
				p.add(f+".version", "set field or header: the record must carry the version")
			}
			checkFieldRef(p, f+".version", v.FieldRef)
			p.oneOf(f+".version.policy", v.Policy, "newer", "strict")
			if !r.Ordered {
				p.add(f+".version", "requires ordered: true (versions are compared between jobs of one key, and only an ordered route runs a key's jobs in order)")
			}
		}

		p.oneOf(f+".on_dead", r.OnDead, "continue", "block")
		p.between(f+".max_attempts", r.MaxAttempts, 1, maxMaxAttempts)
		if r.Backoff.Initial <= 0 {
			p.add(f+".backoff.initial", "must be positive")
		}
		if r.Backoff.Max < r.Backoff.Initial {
			p.add(f+".backoff.max", "%s is less than backoff.initial %s", r.Backoff.Max, r.Backoff.Initial)
		}
		if r.MaxRunning < 0 || r.MaxRunning > 1_000_000 {
			p.add(f+".max_running", "%d is not between 0 (no cap) and 1000000", r.MaxRunning)
		}
		if g := r.Group; g != nil {
			if g.IsZero() {
				p.add(f+".group", "set field or header: the record must carry its group value")
			}
			checkFieldRef(p, f+".group", g.FieldRef)
			p.between(f+".group.max_running", g.MaxRunning, 1, 1_000_000)
		}
		if rl := r.RateLimit; rl != nil {
			p.between(f+".rate_limit.limit", rl.Limit, 1, 1_000_000)
			p.between(f+".rate_limit.burst", rl.Burst, 0, 1_000_000)
			switch {
			case rl.Per <= 0:
				p.add(f+".rate_limit.per", "%s: must be positive (the window the limit counts starts in, e.g. 1s)", rl.Per)
			case rl.Limit >= 1 && rl.Interval() < time.Microsecond:
				p.add(f+".rate_limit.per", "%s for %d starts spaces them under a microsecond: use a longer window or a lower limit", rl.Per, rl.Limit)
			}
		}
		if r.Coalesce != "" {
			p.oneOf(f+".coalesce", r.Coalesce, "none", "latest")
		}
		if r.CoalesceLatest() && r.Version != nil && r.Version.Policy == "strict" {
			p.add(f+".coalesce", "cannot be combined with version policy strict: it would drop the versions a strict lane waits for")
		}
		if r.TTL < 0 {
			p.add(f+".ttl", "must not be negative (0 means no deadline)")
		}
		checkFieldRef(p, f+".run_at", r.RunAt)
		if r.Delay > 0 && !r.RunAt.IsZero() {
			p.add(f+".delay", "set run_at or delay, not both")
		}
		p.between(f+".max_record_bytes", r.MaxRecordBytes, 1, maxMaxRecordBytes)
		p.between(f+".dlq_max_bytes", r.DLQLimit(), 0, maxMaxRecordBytes)
		p.between(f+".result_max_bytes", r.ResultLimit(), 0, maxResultMaxBytes)
		if r.GapTimeout <= 0 {
			p.add(f+".gap_timeout", "must be positive")
		}
		p.oneOf(f+".gap_policy", r.GapPolicy, "proceed", "park")
		checkTarget(p, f+".target", r.Target)
	}
}

func checkFieldRef(p *problems, field string, ref FieldRef) {
	if ref.Field != "" && ref.Header != "" {
		p.add(field, "set field or header, not both")
	}
	if ref.Field != "" {
		if _, err := ParseFieldPath(ref.Field); err != nil {
			p.add(field+".field", "%v", err)
		}
	}
}

func checkTarget(p *problems, field string, t Target) {
	switch {
	case t.HTTP == nil && !t.Go:
		p.add(field, "missing: set http.url or go: true")
		return
	case t.HTTP != nil && t.Go:
		p.add(field, "set http or go: true, not both")
		return
	case t.Go:
		return
	}
	// The URL is not echoed: it may carry credentials.
	switch u, err := url.Parse(t.HTTP.URL); {
	case t.HTTP.URL == "":
		p.add(field+".http.url", "required")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		p.add(field+".http.url", "want an absolute http:// or https:// URL with a host")
	}
	if t.HTTP.Timeout <= 0 {
		p.add(field+".http.timeout", "must be positive")
	}
}

// maxScheduleName bounds a schedule's name, which its jobs' dedupe keys
// and group values carry: far below what an index entry can hold.
const maxScheduleName = 200

func (c *Config) validateSchedules(p *problems) {
	byName := map[string]int{}
	for i := range c.Schedules {
		s := &c.Schedules[i]
		f := fmt.Sprintf("schedules[%d]", i)
		if s.Name == "" {
			p.add(f+".name", "required")
		} else if first, dup := byName[s.Name]; dup {
			p.add(f+".name", "%q is already used by schedules[%d]", s.Name, first)
		} else {
			byName[s.Name] = i
		}
		if s.Cron == "" {
			p.add(f+".cron", "required")
		} else if _, err := cron.Parse(s.Cron); err != nil {
			p.add(f+".cron", "%v", err)
		}
		checkTimezone(p, f+".timezone", s.Timezone)
		checkKind(p, f+".kind", s.Kind)
		c.checkQueueRef(p, f+".queue", s.Queue)
		// A schedule's jobs join the route of their kind in their queue,
		// and with it its flow limits. A limited route of the kind in
		// another queue cannot hold them: its limits are held where its
		// own queue's jobs are claimed.
		if _, ok := c.RouteOfKind(s.Kind, s.Queue); !ok && c.hasQueue(s.Queue) {
			if r, ok := c.RouteOfKind(s.Kind, ""); ok && r.FlowLimited() {
				p.add(f+".queue", "%q: route %s of kind %s has flow limits, which its scheduled jobs share only in its queue (%s)",
					s.Queue, r.Name, s.Kind, r.Queue)
			}
		}
		if len(s.Name) > maxScheduleName {
			p.add(f+".name", "%d bytes; at most %d", len(s.Name), maxScheduleName)
		}
		p.oneOf(f+".misfire", s.Misfire, "run_once", "skip", "catch_up")
		p.oneOf(f+".overlap", s.Overlap, "skip", "allow")
		if s.Jitter < 0 {
			p.add(f+".jitter", "must not be negative")
		}
	}
}

func checkTimezone(p *problems, field, tz string) {
	if tz == "Local" {
		// time.LoadLocation accepts it, but it means whatever zone each
		// host happens to be set to.
		p.add(field, "name an IANA zone such as Europe/Berlin instead of Local")
		return
	}
	if _, err := time.LoadLocation(tz); err != nil {
		p.add(field, "unknown time zone %q", tz)
	}
}
