package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// specExample is the SPEC §3 example as it stands (v2 keys included),
// plus a second route that runs in-process and leaves every default unset
// (its comments' backquotes written as quotes).
const specExample = `
kafka:
  brokers: ["127.0.0.1:9092"]
  group: switchyard            # consumer group id
  # tls / sasl blocks for real clusters
postgres:
  url: postgres://switchyard@127.0.0.1:5432/switchyard
  max_conns: 20                # the real concurrency limit of the fleet
  schema: switchyard           # all tables live in this schema
http:
  listen: 127.0.0.1:8080       # admin API, /metrics, /healthz, /readyz, dashboard
  allowed_hosts: []            # (v2) Host names served besides loopback ones (DNS-rebinding guard)
admin:                         # (v2) named tokens; SWITCHYARD_ADMIN_TOKEN is an operator token named "default"
  tokens:
    - {name: oncall, token_env: ONCALL_TOKEN, role: operate}   # operate: read + every action
    - {name: grafana, token_env: GRAFANA_TOKEN, role: read}    # read: GETs only
tracing:                       # (v2) OpenTelemetry; off when no endpoint (OTEL_* env honoured)
  otlp_endpoint: ""            # e.g. 127.0.0.1:4317
  sample_ratio: 1.0
queues:
  interactive: {concurrency: 16, lease: 30s, max_runtime: 5m, max_depth: 100000}
  bulk:        {concurrency: 4,  lease: 60s, max_runtime: 2h, steal_from: [], prefetch: 0}
  # (v2) prefetch: jobs one process may hold claimed beyond its free workers (0 = claim only
  # for free workers: right for slow or variable jobs). Claimed-but-unstarted jobs are reported
  # as 'reserved', apart from 'running', in GET /v1/queues and switchyard_queue_jobs.
routes:
  - topic: orders
    name: order-sync               # (v2) defaults to the topic; required when a topic has several routes
    filter: {header: event-type, in: [order.created, order.updated]}   # (v2) optional; or {field: type, in: [...]}
    kind: order.sync
    queue: interactive
    key: {field: customer_id}      # default: the record key
    version: {field: seq, policy: newer}   # optional; policy newer | strict
    dedupe: {field: event_id}      # default: topic/partition/offset
    ordered: true                  # per-key lanes
    on_dead: continue              # continue | block  (what a lane does when its head dies)
    max_attempts: 8
    backoff: {initial: 1s, max: 10m}   # exponential, full jitter
    ttl: 0s                        # 0 = no deadline
    max_record_bytes: 1048576
    run_at: {field: send_at}       # (v2) optional: RFC3339 or integer unix milliseconds; past = now
    delay: 0s                      # (v2) optional: run this long after the record's timestamp
    coalesce: none                 # (v2) none | latest
    max_running: 0                 # (v2) fleet-wide cap on this route's running jobs; 0 = none
    group: {field: tenant_id, max_running: 2}   # (v2) optional fleet-wide cap per group value
    rate_limit: {limit: 50, per: 1s, burst: 0}  # (v2) optional fleet-wide cap on attempt starts
    result_max_bytes: 65536        # (v2) how much of a result is kept; 0 = none
    target:
      http: {url: "http://127.0.0.1:9000/hooks/orders", timeout: 10s}
  - topic: invoices
    kind: invoice.render
    queue: bulk
    target: {go: true}
schedules:
  - name: nightly-reconcile
    cron: "0 2 * * *"
    timezone: UTC
    kind: reconcile
    queue: bulk
    misfire: run_once              # run_once | skip | catch_up
    overlap: skip                  # skip | allow
    jitter: 0s
`

func TestParseSpecExample(t *testing.T) {
	cfg, err := Parse([]byte(specExample), nil)
	if err != nil {
		t.Fatal(err)
	}
	const s, m = time.Second, time.Minute
	defaultResult := DefaultResultMaxBytes
	checks := []struct {
		name      string
		got, want any
	}{
		{"kafka.brokers", cfg.Kafka.Brokers, []string{"127.0.0.1:9092"}},
		{"kafka.client_id", cfg.Kafka.ClientID, "switchyard"},
		{"kafka.reset", cfg.Kafka.Reset, "earliest"},
		{"kafka.fetch_max_records", cfg.Kafka.FetchMaxRecords, 10000},
		{"kafka.fetch_max_bytes", cfg.Kafka.FetchMaxBytes, 2 << 20},
		{"postgres.max_conns", cfg.Postgres.MaxConns, int32(20)},
		{"http.listen", cfg.HTTP.Listen, "127.0.0.1:8080"},
		{"shutdown_grace", cfg.ShutdownGrace.D(), 30 * s},
		{"tracing", cfg.Tracing.OTLPEndpoint + " " + fmt.Sprint(cfg.Tracing.Ratio()), " 1"},
		{"queue names", cfg.QueueNames(), []string{"bulk", "interactive"}},
		{"interactive", cfg.Queues["interactive"], Queue{Concurrency: 16, Lease: Duration(30 * s), MaxRuntime: Duration(5 * m), MaxDepth: 100000, PollInterval: Duration(s)}},
		{"bulk", cfg.Queues["bulk"], Queue{Concurrency: 4, Lease: Duration(60 * s), MaxRuntime: Duration(120 * m), StealFrom: []string{}, PollInterval: Duration(s)}},
		{"routes[0].name", cfg.Routes[0].Name, "order-sync"},
		{"routes[0].filter", *cfg.Routes[0].Filter, Filter{FieldRef: FieldRef{Header: "event-type"}, In: []string{"order.created", "order.updated"}}},
		{"routes[0].key", cfg.Routes[0].Key, FieldRef{Field: "customer_id"}},
		{"routes[0].version", *cfg.Routes[0].Version, Version{FieldRef: FieldRef{Field: "seq"}, Policy: "newer"}},
		{"routes[0].target", *cfg.Routes[0].Target.HTTP, HTTPTarget{URL: "http://127.0.0.1:9000/hooks/orders", Timeout: Duration(10 * s)}},
		{"routes[0].gap_policy", cfg.Routes[0].GapPolicy, "park"},
		// The v2 keys of the example.
		{"http.allowed_hosts", cfg.HTTP.AllowedHosts, []string{}},
		{"admin.tokens", cfg.Admin.Tokens, []AdminToken{
			{Name: "oncall", TokenEnv: "ONCALL_TOKEN", Role: RoleOperate},
			{Name: "grafana", TokenEnv: "GRAFANA_TOKEN", Role: RoleRead}}},
		{"routes[0].run_at", cfg.Routes[0].RunAt, FieldRef{Field: "send_at"}},
		{"routes[0].delay", cfg.Routes[0].Delay.D(), time.Duration(0)},
		{"routes[0].coalesce", cfg.Routes[0].CoalesceLatest(), false},
		{"routes[0].max_running", cfg.Routes[0].MaxRunning, 0},
		{"routes[0].group", *cfg.Routes[0].Group, Group{FieldRef: FieldRef{Field: "tenant_id"}, MaxRunning: 2}},
		{"routes[0].rate_limit", *cfg.Routes[0].RateLimit, RateLimit{Limit: 50, Per: Duration(s)}},
		{"routes[0].result_max_bytes", *cfg.Routes[0].ResultMaxBytes, 65536},
		{"routes[1]", cfg.Routes[1], Route{
			Topic: "invoices", Name: "invoices", Kind: "invoice.render", Queue: "bulk",
			OnDead: "continue", MaxAttempts: 8, Backoff: Backoff{Initial: Duration(s), Max: Duration(10 * m)},
			MaxRecordBytes: 1 << 20, DLQMaxBytes: new(64 << 10), GapTimeout: Duration(5 * m), GapPolicy: "park",
			ResultMaxBytes: &defaultResult, Target: Target{Go: true},
		}},
		{"schedules[0]", cfg.Schedules[0], Schedule{
			Name: "nightly-reconcile", Cron: "0 2 * * *", Timezone: "UTC", Kind: "reconcile",
			Queue: "bulk", Misfire: "run_once", Overlap: "skip",
		}},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %+v, want %+v", c.name, c.got, c.want)
		}
	}

	if r, ok := cfg.RouteNamed("invoices"); !ok || r.Topic != "invoices" {
		t.Errorf("RouteNamed(invoices) = %+v, %v; want the invoices route, named after its topic", r, ok)
	}
	if rs := cfg.RoutesOfTopic("invoices"); len(rs) != 1 || rs[0].Name != "invoices" {
		t.Errorf("RoutesOfTopic(invoices) = %+v; want the one route", rs)
	}
	if _, ok := cfg.RouteNamed("nope"); ok {
		t.Error("RouteNamed(nope) found a route")
	}
}

// TestTracingSettings: the block is optional, off by default with a
// ratio of 1, and what the file says is kept, 0 included (sample no new
// trace: not "the default").
func TestTracingSettings(t *testing.T) {
	cfg, err := Parse([]byte(base+goRoute), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tracing.OTLPEndpoint != "" || cfg.Tracing.Ratio() != 1 {
		t.Errorf("defaults: endpoint %q ratio %v; want \"\" and 1", cfg.Tracing.OTLPEndpoint, cfg.Tracing.Ratio())
	}
	cfg, err = Parse([]byte(base+goRoute+"tracing:\n  otlp_endpoint: 127.0.0.1:4317\n  sample_ratio: 0\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tracing.OTLPEndpoint != "127.0.0.1:4317" || cfg.Tracing.Ratio() != 0 {
		t.Errorf("set: endpoint %q ratio %v; want 127.0.0.1:4317 and 0", cfg.Tracing.OTLPEndpoint, cfg.Tracing.Ratio())
	}
	cfg, err = Parse([]byte(base+goRoute+"tracing: {otlp_endpoint: \"[::1]:4317\", sample_ratio: 0.25}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tracing.Ratio() != 0.25 {
		t.Errorf("ratio %v; want 0.25", cfg.Tracing.Ratio())
	}
}

func TestDefaultsFillOnlyZeroes(t *testing.T) {
	cfg, err := Parse([]byte(base+`
routes:
  - {topic: a, kind: k, queue: bulk, ordered: true, version: {header: v}, target: {http: {url: "https://h/x"}}}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Routes[0]
	if r.Version.Policy != "newer" || r.Target.HTTP.Timeout.D() != 10*time.Second {
		t.Errorf("version policy %q, http timeout %s; want newer, 10s", r.Version.Policy, r.Target.HTTP.Timeout)
	}
	q := cfg.Queues["bulk"]
	if q.Concurrency != 4 || q.Lease.D() != 30*time.Second || q.MaxRuntime.D() != 5*time.Minute {
		t.Errorf("bulk = %+v, want the queue defaults", q)
	}

	before, _ := yaml.Marshal(cfg)
	cfg.SetDefaults()
	after, _ := yaml.Marshal(cfg)
	if string(before) != string(after) {
		t.Errorf("SetDefaults is not idempotent:\n%s\n---\n%s", before, after)
	}

	var empty Config
	empty.SetDefaults()
	if empty.Queues != nil || empty.Routes != nil || empty.Schedules != nil {
		t.Errorf("SetDefaults invented queues, routes or schedules: %+v", empty)
	}
}

// base is the smallest valid config without routes; cases append to it.
const base = `
kafka: {brokers: ["k:9092"]}
postgres: {url: "postgres://u@h/db"}
queues: {bulk: {}, interactive: {}}
`

const goRoute = `
routes:
  - {topic: orders, kind: order.sync, queue: bulk, target: {go: true}}
`

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name string
		yaml string
		env  map[string]string
		want []string // each must appear in the error
		not  []string // none may
	}{
		{
			name: "unknown top-level key",
			yaml: base + goRoute + "quues: {}\n",
			want: []string{`line 8: unknown key "quues" (known keys: kafka, postgres, http, admin, queues, routes, schedules, shutdown_grace, retention, tracing)`},
		},
		{
			name: "tracing endpoint with a scheme",
			yaml: base + goRoute + "tracing: {otlp_endpoint: \"http://collector:4317\"}\n",
			want: []string{`tracing.otlp_endpoint: "http://collector:4317": want host:port, such as 127.0.0.1:4317 (no scheme or path)`},
		},
		{
			name: "tracing endpoint without a port",
			yaml: base + goRoute + "tracing: {otlp_endpoint: collector}\n",
			want: []string{`tracing.otlp_endpoint: "collector": want host:port`},
		},
		{
			name: "tracing endpoint bad port",
			yaml: base + goRoute + "tracing: {otlp_endpoint: \"collector:0\"}\n",
			want: []string{`tracing.otlp_endpoint: "collector:0": port must be a number 1..65535`},
		},
		{
			name: "tracing ratio above 1",
			yaml: base + goRoute + "tracing: {sample_ratio: 1.5}\n",
			want: []string{"tracing.sample_ratio: 1.5 is out of range 0..1"},
		},
		{
			name: "tracing ratio negative",
			yaml: base + goRoute + "tracing: {sample_ratio: -0.1}\n",
			want: []string{"tracing.sample_ratio: -0.1 is out of range 0..1"},
		},
		{
			name: "tracing ratio not a number",
			yaml: base + goRoute + "tracing: {sample_ratio: .nan}\n",
			want: []string{"tracing.sample_ratio: NaN is out of range 0..1"},
		},
		{
			name: "unknown tracing key",
			yaml: base + goRoute + "tracing: {endpoint: \"c:4317\"}\n",
			want: []string{`tracing: unknown key "endpoint" (known keys: otlp_endpoint, sample_ratio)`},
		},
		{
			name: "unknown nested key",
			yaml: base + "routes:\n  - topic: orders\n    kind: k\n    queue: bulk\n    target: {go: true, url: x}\n",
			want: []string{`line 9: routes[0].target: unknown key "url"`},
		},
		{
			name: "unknown key in a queue",
			yaml: "queues:\n  bulk:\n    concurency: 3\n",
			want: []string{`line 3: queues.bulk: unknown key "concurency"`, "known keys: concurrency, lease"},
		},
		{
			name: "sasl without credentials",
			yaml: strings.Replace(base, `kafka: {brokers: ["k:9092"]}`, `kafka: {brokers: ["k:9092"], sasl: {mechanism: SCRAM-SHA-256}}`, 1) + goRoute,
			want: []string{"kafka.sasl.username: required for SCRAM-SHA-256", "kafka.sasl.password: required"},
		},
		{
			name: "unknown sasl mechanism",
			yaml: strings.Replace(base, `kafka: {brokers: ["k:9092"]}`, `kafka: {brokers: ["k:9092"], sasl: {mechanism: GSSAPI}}`, 1) + goRoute,
			want: []string{"kafka.sasl.mechanism"},
		},
		{
			name: "tls cert without key",
			yaml: strings.Replace(base, `kafka: {brokers: ["k:9092"]}`, `kafka: {brokers: ["k:9092"], tls: {cert_file: c.pem}}`, 1) + goRoute,
			want: []string{"kafka.tls: cert_file and key_file go together"},
		},
		{
			name: "bad duration",
			yaml: "queues:\n  bulk: {lease: 5 minutes}\n",
			want: []string{`line 2: queues.bulk.lease: bad duration "5 minutes": time: unknown unit`},
		},
		{
			name: "duration without unit",
			yaml: "shutdown_grace: 30\n",
			want: []string{`line 1: shutdown_grace: bad duration "30": time: missing unit`},
		},
		{
			name: "negative duration",
			yaml: "routes:\n  - backoff: {initial: -1s}\n",
			want: []string{`line 2: routes[0].backoff.initial: bad duration "-1s": must not be negative`},
		},
		{
			name: "duration given a mapping",
			yaml: "routes:\n  - ttl: {s: 1}\n",
			want: []string{`line 2: routes[0].ttl: want a duration such as 30s, got a mapping`},
		},
		{
			name: "wrong type",
			yaml: "queues:\n  bulk: {concurrency: many}\nkafka:\n  brokers: k:9092\nroutes:\n  - {topic: t, ordered: \"true\"}\n",
			want: []string{
				`line 2: queues.bulk.concurrency: want a whole number, got "many"`,
				`line 4: kafka.brokers: want a list, got "k:9092"`,
				`line 6: routes[0].ordered: want true or false, got "true", a string: write it without quotes`,
			},
		},
		{
			name: "duplicate key",
			yaml: "kafka:\n  group: a\n  group: b\n",
			want: []string{`line 3: kafka: duplicate key "group" (first at line 2)`},
		},
		{
			name: "duplicate key on one line",
			yaml: "kafka: {group: a, group: b}\n",
			want: []string{`line 1: kafka: duplicate key "group" (first at line 1)`},
		},
		{
			name: "syntax error",
			yaml: "kafka: [\n",
			want: []string{"config: line 1: did not find expected node content"},
		},
		{
			name: "bad bytes",
			yaml: "kafka:\n  group: \"a\x01\"\n",
			want: []string{"config: line 2: control characters are not allowed"},
		},
		{
			name: "second document",
			yaml: base + goRoute + "---\nkafka: {}\n",
			want: []string{"line 8: a second YAML document"},
		},
		{
			name: "missing brokers and url",
			yaml: "queues: {bulk: {}}\n" + goRoute,
			want: []string{
				"kafka.brokers: required: list host:port seeds or set SWITCHYARD_KAFKA_BROKERS",
				"postgres.url: required: set it or SWITCHYARD_DATABASE_URL",
			},
		},
		{
			name: "bad broker",
			yaml: strings.Replace(base, `"k:9092"`, `"k:9092", "k", "k:x", ":1"`, 1) + goRoute,
			want: []string{
				`kafka.brokers[1]: "k": want host:port`,
				`kafka.brokers[2]: "k:x": port must be a number 1..65535`,
				`kafka.brokers[3]: ":1": missing host`,
			},
		},
		{
			name: "bad schema name",
			yaml: strings.Replace(base, "postgres: {", `postgres: {schema: "Switch-Yard", `, 1) + goRoute,
			want: []string{`postgres.schema: "Switch-Yard": use lowercase letters`},
		},
		{
			name: "reserved schema",
			yaml: strings.Replace(base, "postgres: {", `postgres: {schema: pg_jobs, `, 1) + goRoute,
			want: []string{`postgres.schema: "pg_jobs": names starting with pg_ are reserved`},
		},
		{
			name: "bad listen",
			yaml: base + goRoute + "http: {listen: localhost}\n",
			want: []string{`http.listen: "localhost": want host:port, or "off"`},
		},
		{
			name: "no queues",
			yaml: "kafka: {brokers: [\"k:9092\"]}\npostgres: {url: \"postgres://u@h/db\"}\n" + goRoute,
			want: []string{"queues: at least one queue is required", `routes[0].queue: unknown queue "bulk" (no queues configured)`},
		},
		{
			name: "negative concurrency, prefetch unset",
			yaml: strings.Replace(base, "bulk: {}", `bulk: {concurrency: -3}`, 1) + goRoute,
			want: []string{"queues.bulk.concurrency: -3 is out of range 1..10000"},
			not:  []string{"prefetch"},
		},
		{
			name: "bad queue settings",
			yaml: strings.Replace(base, "bulk: {}", `bulk: {concurrency: 20000, lease: 500ms, max_depth: -1, poll_interval: 1ms, steal_from: [bulk, nope]}, "Big Q": {}, small: {concurrency: 2, prefetch: 17}`, 1) + goRoute,
			want: []string{
				"queues.bulk.concurrency: 20000 is out of range 1..10000",
				"queues.bulk.lease: 500ms is shorter than 1s",
				"queues.bulk.max_depth: must not be negative",
				"queues.bulk.poll_interval: 1ms is shorter than 10ms",
				"queues.bulk.steal_from[0]: a queue cannot steal from itself",
				`queues.bulk.steal_from[1]: unknown queue "nope"`,
				`queues["Big Q"]: invalid queue name`,
				"queues.small.prefetch: 17 is not between 0 and 8 × concurrency (16)",
			},
		},
		{
			name: "no routes",
			yaml: base,
			want: []string{"routes: at least one route is required"},
		},
		{
			name: "unknown queue in route",
			yaml: base + "routes:\n  - {topic: orders, kind: k, queue: foo, target: {go: true}}\n",
			want: []string{`routes[0].queue: unknown queue "foo" (configured: bulk, interactive)`},
		},
		{
			name: "missing target",
			yaml: base + "routes:\n  - {topic: orders, kind: k, queue: bulk}\n",
			want: []string{"routes[0].target: missing: set http.url or go: true"},
		},
		{
			name: "both targets",
			yaml: base + "routes:\n  - {topic: orders, kind: k, queue: bulk, target: {go: true, http: {url: \"http://h/\"}}}\n",
			want: []string{"routes[0].target: set http or go: true, not both"},
		},
		{
			name: "bad http target",
			yaml: base + "routes:\n  - {topic: a, kind: k, queue: bulk, target: {http: {url: \"/hooks\"}}}\n" +
				"  - {topic: b, kind: k, queue: bulk, target: {http: {}}}\n",
			want: []string{
				"routes[0].target.http.url: want an absolute http:// or https:// URL with a host",
				"routes[1].target.http.url: required",
			},
		},
		{
			name: "bad admin tokens",
			yaml: base + goRoute + "admin:\n  tokens:\n" +
				"    - {name: oncall, token_env: ONCALL, role: operate}\n" +
				"    - {name: oncall, token_env: SAME, role: admin}\n" +
				"    - {name: default, token_env: UNSET}\n" +
				"    - {token_env: ONCALL2}\n" +
				"    - {name: grafana}\n",
			want: []string{
				`admin.tokens[1].name: "oncall" is already the name of admin.tokens[0]`,
				`admin.tokens[1].role: "admin" is not one of`,
				`admin.tokens[2].name: "default" is the name of SWITCHYARD_ADMIN_TOKEN's token`,
				"admin.tokens[3].name: required",
				"admin.tokens[4].token_env: required",
			},
		},
		{
			name: "bad retention",
			yaml: base + goRoute + "retention: {running: 1h, audit: 720h, versions: 720h}\n",
			want: []string{"retention.running: not a final state: want one of succeeded, dead, cancelled, skipped, expired, coalesced, audit or versions"},
		},
		{
			name: "several routes of a topic without names",
			yaml: base + goRoute + "  - {topic: orders, kind: other, queue: bulk, target: {go: true}}\n",
			want: []string{
				`routes[0].name: required: topic "orders" has 2 routes, so each needs a name (a route that existed before keeps its jobs with name: orders)`,
				`routes[1].name: required: topic "orders" has 2 routes`,
			},
		},
		{
			name: "duplicate and bad route names",
			yaml: base + "routes:\n  - {topic: a, name: x, kind: k, queue: bulk, target: {go: true}}\n" +
				"  - {topic: b, name: x, kind: k, queue: bulk, target: {go: true}}\n" +
				"  - {topic: x, kind: k, queue: bulk, target: {go: true}}\n" +
				"  - {topic: c, name: \"schedule/x\", kind: k, queue: bulk, target: {go: true}}\n",
			want: []string{
				`routes[1].name: "x" is already the name of routes[0]`,
				`routes[2].name: "x" is already the name of routes[0]`,
				`routes[3].name: "schedule/x": use letters, digits`,
			},
		},
		{
			name: "bad filters",
			yaml: base + "routes:\n  - {topic: a, name: a1, kind: k, queue: bulk, target: {go: true}, filter: {in: [x]}}\n" +
				"  - {topic: a, name: a2, kind: k, queue: bulk, target: {go: true}, filter: {field: type}}\n" +
				"  - {topic: a, name: a3, kind: k, queue: bulk, target: {go: true}, filter: {field: type, header: t, in: [x]}}\n" +
				"  - {topic: a, name: a4, kind: k, queue: bulk, target: {go: true}, filter: {field: \"a..b\", in: [x]}}\n",
			want: []string{
				"routes[0].filter: set field or header: the value the filter compares",
				"routes[1].filter.in: required: the values whose records the route takes",
				"routes[2].filter: set field or header, not both",
				"routes[3].filter.field:",
			},
		},
		{
			name: "bad topic and kind",
			yaml: base + "routes:\n  - {topic: \"my topic\", kind: \".x\", queue: bulk, target: {go: true}}\n  - {queue: bulk, target: {go: true}}\n",
			want: []string{
				`routes[0].topic: "my topic" is not a valid Kafka topic name`,
				`routes[0].kind: ".x": use letters`,
				"routes[1].topic: required",
				"routes[1].kind: required",
			},
		},
		{
			name: "bad field paths",
			yaml: base + "routes:\n  - {topic: orders, kind: k, queue: bulk, key: {field: customer..id}, dedupe: {field: a, header: b}, target: {go: true}}\n",
			want: []string{
				`routes[0].key.field: field path "customer..id" has an empty key`,
				"routes[0].dedupe: set field or header, not both",
			},
		},
		{
			name: "version without ordered",
			yaml: base + "routes:\n  - {topic: orders, kind: k, queue: bulk, version: {field: seq}, target: {go: true}}\n",
			want: []string{"routes[0].version: requires ordered: true"},
		},
		{
			name: "bad version",
			yaml: base + "routes:\n  - {topic: orders, kind: k, queue: bulk, ordered: true, version: {policy: newest}, target: {go: true}}\n",
			want: []string{
				"routes[0].version: set field or header",
				`routes[0].version.policy: "newest" is not one of newer, strict`,
			},
		},
		{
			name: "bad on_dead",
			yaml: base + "routes:\n  - {topic: orders, kind: k, queue: bulk, on_dead: retry, target: {go: true}}\n",
			want: []string{`routes[0].on_dead: "retry" is not one of continue, block`},
		},
		{
			name: "bad coalesce",
			yaml: base + "routes:\n  - {topic: orders, kind: k, queue: bulk, coalesce: newest, max_running: -1, target: {go: true}}\n" +
				"  - {topic: o2, kind: k2, queue: bulk, ordered: true, coalesce: latest, version: {field: v, policy: strict}, target: {go: true}}\n" +
				"  - {topic: o3, kind: k3, queue: bulk, coalesce: latest, target: {go: true}}\n" +
				"  - {topic: o4, kind: k4, queue: bulk, coalesce: none, target: {go: true}}\n",
			want: []string{`routes[0].coalesce: "newest" is not one of none, latest`,
				"routes[0].max_running: -1 is not between 0 (no cap) and 1000000",
				"routes[1].coalesce: cannot be combined with version policy strict"},
			// With the default key, the record's (SPEC §3): a record
			// without one makes a job that is never coalesced.
			not: []string{"routes[2]", "routes[3]"},
		},
		{
			name: "bad flow limits",
			yaml: base + "routes:\n  - {topic: orders, kind: k, queue: bulk, group: {max_running: 0}, rate_limit: {limit: 0, per: 0s, burst: -1}, target: {go: true}}\n" +
				"  - {topic: o2, kind: k2, queue: bulk, group: {field: \"a..b\", header: h, max_running: 2}, rate_limit: {limit: 2000000000, per: 1s}, target: {go: true}}\n" +
				"  - {topic: o3, kind: k3, queue: bulk, rate_limit: {limit: 1000000, per: 1us}, target: {go: true}}\n",
			want: []string{
				"routes[0].group: set field or header: the record must carry its group value",
				"routes[0].group.max_running: 0 is out of range 1..1000000",
				"routes[0].rate_limit.limit: 0 is out of range 1..1000000",
				"routes[0].rate_limit.burst: -1 is out of range 0..1000000",
				"routes[0].rate_limit.per: 0s: must be positive",
				"routes[1].group: set field or header, not both",
				"routes[1].group.field:",
				"routes[1].rate_limit.limit: 2000000000 is out of range 1..1000000",
				"routes[2].rate_limit.per: 1µs for 1000000 starts spaces them under a microsecond",
			},
		},
		{
			name: "bad run time",
			yaml: base + "routes:\n  - {topic: orders, kind: k, queue: bulk, run_at: {field: at}, delay: 5s, target: {go: true}}\n" +
				"  - {topic: o2, kind: k2, queue: bulk, run_at: {field: \"a..b\"}, target: {go: true}}\n",
			want: []string{
				"routes[0].delay: set run_at or delay, not both",
				"routes[1].run_at.field:",
			},
		},
		{
			name: "bad result_max_bytes",
			yaml: base + "routes:\n  - {topic: orders, kind: k, queue: bulk, result_max_bytes: -1, target: {go: true}}\n" +
				"  - {topic: o2, kind: k2, queue: bulk, result_max_bytes: 20000000, target: {go: true}}\n" +
				"  - {topic: o3, kind: k3, queue: bulk, result_max_bytes: 0, target: {go: true}}\n",
			want: []string{
				"routes[0].result_max_bytes: -1 is out of range 0..16777216",
				"routes[1].result_max_bytes: 20000000 is out of range 0..16777216",
				"2 problems",
			},
		},
		{
			name: "negative delay",
			yaml: base + "routes:\n  - {topic: orders, kind: k, queue: bulk, delay: -1s, target: {go: true}}\n",
			want: []string{`routes[0].delay: bad duration "-1s": must not be negative`},
		},
		{
			name: "bad route limits",
			yaml: base + "routes:\n  - {topic: orders, kind: k, queue: bulk, max_attempts: 5000, backoff: {initial: 1m, max: 1s}, max_record_bytes: 100000000, gap_policy: wait, target: {go: true}}\n",
			want: []string{
				"routes[0].max_attempts: 5000 is out of range 1..1000",
				"routes[0].backoff.max: 1s is less than backoff.initial 1m0s",
				"routes[0].max_record_bytes: 100000000 is out of range 1..67108864",
				`routes[0].gap_policy: "wait" is not one of proceed, park`,
			},
		},
		{
			name: "bad kafka settings",
			yaml: strings.Replace(base, "kafka: {", "kafka: {reset: newest, fetch_max_records: -1, fetch_max_bytes: 512, ", 1) + goRoute,
			want: []string{
				`kafka.reset: "newest" is not one of earliest, latest`,
				"kafka.fetch_max_records: must be at least 1",
				"kafka.fetch_max_bytes: 512 is not between 1024 and 1073741824",
			},
		},
		{
			name: "bad cron",
			yaml: base + goRoute + "schedules:\n  - {name: a, cron: \"0 25 * * *\", kind: k, queue: bulk}\n  - {name: b, cron: \"@daily\", kind: k, queue: bulk}\n",
			want: []string{
				`schedules[0].cron: hour field "25": 25 is out of range 0-23`,
				`schedules[1].cron: "@daily" has 1 fields, want 5`,
			},
		},
		{
			name: "bad timezone",
			yaml: base + goRoute + "schedules:\n  - {name: a, cron: \"* * * * *\", timezone: Mars/Olympus, kind: k, queue: bulk}\n  - {name: b, cron: \"* * * * *\", timezone: Local, kind: k, queue: bulk}\n",
			want: []string{
				`schedules[0].timezone: unknown time zone "Mars/Olympus"`,
				"schedules[1].timezone: name an IANA zone",
			},
		},
		{
			name: "bad schedule",
			yaml: base + goRoute + "schedules:\n  - {name: a, cron: \"* * * * *\", queue: nope, misfire: later, overlap: queue}\n  - {name: a, cron: \"* * * * *\", kind: k, queue: bulk}\n  - {kind: k, queue: bulk}\n",
			want: []string{
				"schedules[0].kind: required",
				`schedules[0].queue: unknown queue "nope"`,
				`schedules[0].misfire: "later" is not one of run_once, skip, catch_up`,
				`schedules[0].overlap: "queue" is not one of skip, allow`,
				`schedules[1].name: "a" is already used by schedules[0]`,
				"schedules[2].name: required",
				"schedules[2].cron: required",
			},
		},
		{
			// A limited route's scheduled jobs share its limits in its
			// queue only; an unlimited one lends its settings anywhere.
			name: "schedule of a limited route's kind in another queue",
			yaml: base + `routes:
  - {topic: orders, kind: order.sync, queue: bulk, max_running: 2, target: {go: true}}
  - {topic: mails, kind: mail.send, queue: bulk, target: {go: true}}
schedules:
  - {name: a, cron: "* * * * *", kind: order.sync, queue: interactive}
  - {name: b, cron: "* * * * *", kind: order.sync, queue: bulk}
  - {name: c, cron: "* * * * *", kind: mail.send, queue: interactive}
  - {name: "` + strings.Repeat("n", 201) + `", cron: "* * * * *", kind: mail.send, queue: bulk}
`,
			want: []string{
				`schedules[0].queue: "interactive": route orders of kind order.sync has flow limits, which its scheduled jobs share only in its queue (bulk)`,
				"schedules[3].name: 201 bytes; at most 200",
			},
			not: []string{"schedules[1]", "schedules[2]"},
		},
		{
			name: "bad broker from env is blamed on env",
			yaml: base + goRoute,
			env:  map[string]string{EnvKafkaBrokers: "k:9092,broker"},
			want: []string{`kafka.brokers[1]: "broker": want host:port (set by SWITCHYARD_KAFKA_BROKERS)`},
		},
		{
			// A zero spelled out is a choice, not "the default": where the
			// field does not take it, saying so beats running with 4.
			name: "explicit zeros where a default would hide them",
			yaml: `
kafka: {brokers: ["k:9092"], group: "", session_timeout: 0s}
postgres: {url: "postgres://u@h/db", max_conns: 0}
queues:
  bulk: {concurrency: 0, lease: 0s, max_depth: 0}
  interactive: {}
routes:
  - {topic: orders, kind: order.sync, queue: bulk, max_attempts: 0, dlq_max_bytes: 0, ttl: 0s, target: {go: true}}
`,
			want: []string{
				`kafka.group: set to "", which this field does not take; leave it out for the default ("switchyard")`,
				"kafka.session_timeout: set to 0s, which this field does not take; leave it out for the default (10s)",
				"postgres.max_conns: set to 0",
				"queues.bulk.concurrency: set to 0, which this field does not take; leave it out for the default (4)",
				"queues.bulk.lease: set to 0s",
				"routes[0].max_attempts: set to 0",
				"6 problems", // dlq_max_bytes: 0 is a value: only the record's position
			},
		},
		{
			name: "allowed_hosts that are not host names",
			yaml: base + goRoute + "http: {allowed_hosts: [ok.example.com, \"http://x.example.com\", \"y.example.com:8080\"]}\n",
			want: []string{`http.allowed_hosts[1]: "http://x.example.com": want a host name`, `http.allowed_hosts[2]: "y.example.com:8080"`},
		},
		{
			name: "bad sslmode",
			yaml: strings.Replace(base, `postgres://u@h/db`, `postgres://u:pw@h/db?sslmode=verify`, 1) + goRoute,
			want: []string{`postgres.url: sslmode "verify" is not one of disable, allow, prefer, require, verify-ca, verify-full`},
		},
		{
			// Not read as key=value settings, which would connect to the
			// default socket and say so instead.
			name: "a URL of another scheme",
			yaml: strings.Replace(base, `postgres://u@h/db`, `postgress://u:pw@h:5432/db?sslmode=disable`, 1) + goRoute,
			want: []string{`postgres.url: scheme "postgress": want postgres:// or postgresql://`},
		},
		{
			name: "a JDBC URL",
			yaml: strings.Replace(base, `postgres://u@h/db`, `jdbc:postgresql://h:5432/db?user=u&password=pw`, 1) + goRoute,
			want: []string{`postgres.url: scheme "jdbc:postgresql": want postgres:// or postgresql://`},
		},
		{
			name: "missing sslrootcert",
			yaml: strings.Replace(base, `postgres://u@h/db`, `host=h user=u password=pw sslmode=verify-full sslrootcert=/nonexistent/ca.pem`, 1) + goRoute,
			want: []string{"postgres.url: sslrootcert /nonexistent/ca.pem: no such file or directory"},
		},
		{
			name: "env brokers without any address",
			yaml: base + goRoute,
			env:  map[string]string{EnvKafkaBrokers: " , ,"},
			want: []string{"SWITCHYARD_KAFKA_BROKERS: no broker addresses"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Parse([]byte(c.yaml), mapEnv(c.env))
			if err == nil {
				t.Fatalf("no error; config %+v", cfg)
			}
			if cfg != nil {
				t.Errorf("config %+v returned with an error", cfg)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
			for _, w := range c.not {
				if strings.Contains(err.Error(), w) {
					t.Errorf("error names %s, which is valid:\n%v", w, err)
				}
			}
		})
	}
}

// A problem found after decoding names its line too, as the decoder's do:
// the field's, or for a field left out the nearest setting around it; a
// value from the environment has none in the file. They are listed in the
// file's order, whatever order the checks found them in.
func TestValidationErrorsNameTheLine(t *testing.T) {
	yml := `kafka: {brokers: ["k:9092"]}
postgres: {url: "postgress://u@h/db"}
queues:
  my.queue: {concurrency: 0}
  bulk: {concurrency: 99999}
routes:
  - topic: orders
    queue: nope
    target: {go: true}
`
	_, err := Parse([]byte(yml), mapEnv(map[string]string{EnvKafkaBrokers: "broker"}))
	if err == nil {
		t.Fatal("no error")
	}
	at := -1
	for _, want := range []string{
		"\n  line 2: postgres.url: scheme \"postgress\"",
		"\n  line 4: queues.my.queue.concurrency: set to 0",
		"\n  line 5: queues.bulk.concurrency: 99999 is out of range",
		"\n  line 7: routes[0].kind: required",
		"\n  line 8: routes[0].queue: unknown queue \"nope\"",
		"\n  kafka.brokers[0]: \"broker\": want host:port (set by SWITCHYARD_KAFKA_BROKERS)",
	} {
		i := strings.Index(err.Error(), want)
		if i < 0 {
			t.Errorf("error does not contain %q:\n%v", want, err)
		} else if i < at {
			t.Errorf("%q is not in the file's order:\n%v", want, err)
		}
		at = max(at, i)
	}
}

func TestValidateReturnsFieldErrors(t *testing.T) {
	var cfg Config
	cfg.SetDefaults()
	err := cfg.Validate()
	var fields []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("%v is a %T, not a *FieldError", e, e)
		}
		fields = append(fields, fe.Field)
	}
	want := []string{"kafka.brokers", "postgres.url", "queues", "routes"}
	if !reflect.DeepEqual(fields, want) {
		t.Errorf("fields = %q, want %q", fields, want)
	}
}

func TestEmptyDocument(t *testing.T) {
	env := mapEnv(map[string]string{
		EnvKafkaBrokers: "k:9092",
		EnvDatabaseURL:  "postgres://u@h/db",
	})
	for _, doc := range []string{"", "  \n\t\n", "# only a comment\n", "---\n"} {
		_, err := Parse([]byte(doc), env)
		// Nothing wrong with the YAML: only the settings nobody can default.
		var fe *FieldError
		if !errors.As(err, &fe) || strings.Contains(err.Error(), "line ") {
			t.Errorf("Parse(%q) = %v; want only field errors", doc, err)
		}
		if !strings.Contains(err.Error(), "queues: at least one queue is required") {
			t.Errorf("Parse(%q) = %v; want the missing queues reported", doc, err)
		}
	}
}

// A serving process checks the tokens' variables and that an address
// others can reach has a token to require; the CLI, which reads the same
// file without the variables and serves nothing, does not (Parse
// succeeds).
func TestServingErrors(t *testing.T) {
	open, err := Parse([]byte(base+goRoute+"http: {listen: \"0.0.0.0:8080\"}\n"), mapEnv(nil))
	if err != nil {
		t.Fatalf("parse: %v (an open address is a serving process's problem only)", err)
	}
	const want = "http.listen: 0.0.0.0:8080 is not a loopback address; set SWITCHYARD_ADMIN_TOKEN (or admin.tokens) to listen on it"
	if err := open.ServingErrors(); err == nil || err.Error() != want {
		t.Errorf("ServingErrors() = %v; want %q", err, want)
	}
	open.HTTP.Listen = "off"
	if err := open.ServingErrors(); err != nil {
		t.Errorf("ServingErrors() with http.listen off = %v; want nil", err)
	}

	doc := base + goRoute + "admin:\n  tokens:\n" +
		"    - {name: oncall, token_env: ONCALL, role: operate}\n" +
		"    - {name: pager, token_env: SAME}\n" +
		"    - {name: unset, token_env: UNSET}\n" +
		"    - {name: ci, token_env: CI_TOKEN}\n"
	cfg, err := Parse([]byte(doc), mapEnv(map[string]string{"ONCALL": "t0k3n-oncall", "SAME": "t0k3n-oncall",
		"CI_TOKEN": "t0k3n-admin", EnvAdminToken: "t0k3n-admin"}))
	if err != nil {
		t.Fatalf("parse: %v (the variables are for serving processes only)", err)
	}
	if cfg.Admin.Tokens[1].Role != RoleRead {
		t.Errorf("default role %q, want read", cfg.Admin.Tokens[1].Role)
	}
	err = cfg.ServingErrors()
	for _, want := range []string{
		"admin.tokens[1].token_env: SAME holds the same token as admin.tokens[0]",
		"admin.tokens[2].token_env: UNSET is not set, or empty",
		"admin.tokens[3].token_env: CI_TOKEN holds the same token as SWITCHYARD_ADMIN_TOKEN",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ServingErrors() = %v; want it to say %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "t0k3n") {
		t.Errorf("a token value is in the error: %v", err)
	}
}

// A serving process is told of a secret it sends in clear and of a token
// short enough to guess on an address others can reach, by field and
// never by value; on loopback, or with TLS, there is nothing to say.
func TestWarnings(t *testing.T) {
	for _, c := range []struct {
		name, listen string
		sasl         bool // kafka.sasl PLAIN, without kafka.tls
		env          map[string]string
		want         []string
	}{
		{"plain in clear", "127.0.0.1:8080", true, nil,
			[]string{"kafka.sasl.mechanism: PLAIN without kafka.tls sends the credentials to the brokers in clear text"}},
		{"short token on an open address", "0.0.0.0:8080", false, map[string]string{EnvAdminToken: "s3cr3t"},
			[]string{"http.token: the token is 6 bytes on 0.0.0.0:8080, which others can reach; use 16 or more random bytes"}},
		{"short token on loopback", "127.0.0.1:8080", false, map[string]string{EnvAdminToken: "s3cr3t"}, nil},
		{"long token", "0.0.0.0:8080", false, map[string]string{EnvAdminToken: strings.Repeat("k", 16)}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			doc := strings.Replace(base, "postgres: {", fmt.Sprintf("http: {listen: %q}\npostgres: {", c.listen), 1) + goRoute
			cfg, err := Parse([]byte(doc), mapEnv(c.env))
			if err != nil {
				t.Fatal(err)
			}
			if c.sasl {
				cfg.Kafka.SASL = &KafkaSASL{Mechanism: "PLAIN", Username: "u", Password: "s3cr3t"}
			}
			got := cfg.Warnings()
			if len(got) != len(c.want) {
				t.Fatalf("Warnings() = %q; want %d of them", got, len(c.want))
			}
			for i, w := range c.want {
				if !strings.HasPrefix(got[i], w) || strings.Contains(got[i], "s3cr3t") {
					t.Errorf("Warnings()[%d] = %q; want it to start %q, without the secret", i, got[i], w)
				}
			}
			if c.sasl {
				cfg.Kafka.TLS = &KafkaTLS{}
				if got := cfg.Warnings(); len(got) != 0 {
					t.Errorf("Warnings() with kafka.tls = %q; want none", got)
				}
			}
		})
	}
}

func TestEnvOverridesWin(t *testing.T) {
	doc := strings.Replace(base, "postgres: {", "http: {token: file-token}\npostgres: {", 1) + goRoute
	cfg, err := Parse([]byte(doc), mapEnv(map[string]string{
		EnvDatabaseURL:  " postgres://env@db/sy\n",
		EnvKafkaBrokers: " a:9092, ,b:9093 ,",
		EnvAdminToken:   "env-token\n",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.Postgres.URL, "postgres://env@db/sy"; got != want {
		t.Errorf("postgres.url = %q, want %q", got, want)
	}
	if got, want := cfg.Kafka.Brokers, []string{"a:9092", "b:9093"}; !reflect.DeepEqual(got, want) {
		t.Errorf("kafka.brokers = %q, want %q", got, want)
	}
	if got, want := cfg.HTTP.Token, "env-token"; got != want {
		t.Errorf("http.token = %q, want %q", got, want)
	}

	// A SASL password from a mounted file loses its line end, not its
	// spaces.
	sasl := strings.Replace(doc, `kafka: {brokers: ["k:9092"]}`, `kafka: {brokers: ["k:9092"], sasl: {mechanism: PLAIN, username: u}}`, 1)
	cfg, err = Parse([]byte(sasl), mapEnv(map[string]string{EnvKafkaSASLPassword: " pass word \n"}))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.Kafka.SASL.Password, " pass word "; got != want {
		t.Errorf("kafka.sasl.password = %q, want %q", got, want)
	}

	// An empty variable is the same as an unset one: the file stands.
	cfg, err = Parse([]byte(doc), mapEnv(map[string]string{EnvAdminToken: ""}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTP.Token != "file-token" {
		t.Errorf("http.token = %q, want the file's", cfg.HTTP.Token)
	}
}

func TestSecretsNeverInErrors(t *testing.T) {
	const secret = "s3cret"
	cases := []struct {
		name string
		yaml string
		env  map[string]string
	}{
		{"unparsable url in file", strings.Replace(base, "postgres://u@h/db", "postgres://u:s3cret@h:port/db", 1) + goRoute, nil},
		{"url with a bad escape", strings.Replace(base, "postgres://u@h/db", "postgres://u:s3%cret@h/db", 1) + goRoute, nil},
		{"unparsable url from env", base + goRoute, map[string]string{EnvDatabaseURL: "postgres://u:s3cret@h:port/db"}},
		{"url neither URL nor DSN", strings.Replace(base, "postgres://u@h/db", "u:s3cret@h/db", 1) + goRoute, nil},
		{"valid url, other errors", "postgres: {url: \"postgres://u:s3cret@h/db\"}\n", nil},
		{"url of the wrong type", "postgres: {url: [postgres://u:s3cret@h/db]}\n", nil},
		{"token with other errors", "http: {token: s3cret, listen: nowhere}\n", map[string]string{EnvAdminToken: "s3cret"}},
		{"target url with credentials", base + "routes:\n  - {topic: a, kind: k, queue: bulk, target: {http: {url: \"ftp://u:s3cret@h/\"}}}\n", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.yaml), mapEnv(c.env))
			if err == nil {
				t.Fatal("no error")
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error reveals the secret:\n%v", err)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte(specExample), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("kafka:\n  brokers: []\n  nope: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	if _, err := Load(good, nil); err != nil {
		t.Errorf("Load(good) = %v", err)
	}
	_, err := Load(bad, nil)
	if want := "config " + bad + `: line 3: kafka: unknown key "nope"`; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Load(bad) = %v, want prefix %q", err, want)
	}
	missing := filepath.Join(dir, "missing.yaml")
	if _, err := Load(missing, nil); err == nil || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("Load(missing) = %v, want a not-exist error naming the file", err)
	}
	// No file: the environment alone, and no invented queues.
	_, err = Load("", mapEnv(map[string]string{EnvKafkaBrokers: "k:9092", EnvDatabaseURL: "postgres://h/db"}))
	if err == nil || !strings.HasPrefix(err.Error(), "config: 2 problems:\n  queues: at least one queue is required\n  routes: at least one route is required") {
		t.Errorf("Load(\"\") = %v", err)
	}
}

func TestDuration(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{in: "30s", want: 30 * time.Second},
		{in: "1m30s", want: 90 * time.Second},
		{in: "0s"},
		{in: "0"},
		{in: `"2h"`, want: 2 * time.Hour},
		{in: "-1s", err: `line 1: bad duration "-1s": must not be negative`},
		{in: "5 minutes", err: `line 1: bad duration "5 minutes": time: unknown unit " minutes" in duration "5 minutes"`},
		{in: "[1s]", err: "line 1: want a duration such as 30s, got a list"},
	} {
		var v struct{ D Duration }
		err := yaml.Unmarshal([]byte("d: "+c.in), &v)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want %q", c.in, err, c.err)
		case c.err == "" && (err != nil || v.D.D() != c.want):
			t.Errorf("%s = %s, %v; want %s", c.in, v.D, err, c.want)
		}
	}

	out, err := yaml.Marshal(struct{ D Duration }{Duration(90 * time.Second)})
	if err != nil || string(out) != "d: 1m30s\n" {
		t.Errorf("Marshal = %q, %v; want d: 1m30s", out, err)
	}
}

// FuzzParse holds Parse to I8: whatever the bytes, an error and never a
// panic; and anything accepted is valid, stable under SetDefaults, and reads
// back the same after writing it out.
func FuzzParse(f *testing.F) {
	f.Add([]byte(specExample))
	f.Add([]byte(base + goRoute))
	f.Add([]byte(base + goRoute + "schedules:\n  - {name: a, cron: \"*/5 1-3 * * 1,3\", kind: k, queue: bulk}\n"))
	f.Add([]byte("queues:\n  bulk: {lease: 5 minutes, concurrency: x}\n"))
	f.Add([]byte("a: &a [*a, *a]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data, nil)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("accepted config fails Validate: %v", err)
		}
		out, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		again, err := Parse(out, nil)
		if err != nil {
			t.Fatalf("written config does not read back: %v\n%s", err, out)
		}
		again.SetDefaults()
		out2, _ := yaml.Marshal(again)
		if string(out) != string(out2) {
			t.Fatalf("read back differently:\n%s\n---\n%s", out, out2)
		}
	})
}

func mapEnv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:4317": true, "[::1]:4317": true, "LOCALHOST:1": true,
		"127.9.9.9:80": true, "collector:4317": false, ":8080": false, "0.0.0.0:8080": false, "10.0.0.1:80": false, "nonsense": false} {
		if got := Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// dlq_max_bytes takes 0 (a too_large record's entry keeps its position
// only), and defaults to 64 KiB when left out.
func TestDLQMaxBytesTakesZero(t *testing.T) {
	for doc, want := range map[string]int{
		base + "routes:\n  - {topic: orders, kind: k, queue: bulk, dlq_max_bytes: 0, target: {go: true}}\n": 0,
		base + "routes:\n  - {topic: orders, kind: k, queue: bulk, target: {go: true}}\n":                   64 << 10,
	} {
		cfg, err := Parse([]byte(doc), mapEnv(nil))
		if err != nil {
			t.Fatalf("parse: %v", err)
		}
		if got := cfg.Routes[0].DLQLimit(); got != want {
			t.Errorf("dlq_max_bytes %d, want %d, of\n%s", got, want, doc)
		}
	}
}
