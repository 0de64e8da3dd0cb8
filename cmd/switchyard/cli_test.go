package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// runCLI runs the CLI in this process.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code = run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// validQueuesAndRoute completes a config whose head is written by a case.
const validQueuesAndRoute = `queues:
  q: {concurrency: 1}
routes:
  - {topic: t, kind: k, queue: q, target: {http: {url: "http://127.0.0.1:1/"}}}
`

// TestCLIExitCodes checks SPEC §4's exit codes (0 ok, 2 bad usage, 1
// failure) and that each message names what is wrong (I8).
func TestCLIExitCodes(t *testing.T) {
	t.Parallel()
	// A config on a migrated schema of its own, for the verbs that reach
	// the database.
	schema := testenv.Schema(t)
	good := writeConfig(t, testConfig{Topic: "t", Group: testenv.Name("g"), Schema: schema,
		TargetURL: "http://127.0.0.1:1/"})
	limited := writeConfig(t, testConfig{Group: testenv.Name("g"), Schema: schema, Body: `queues:
  q: {concurrency: 1}
routes:
  - {topic: t, kind: k, queue: q, max_running: 20, group: {field: tenant, max_running: 2}, rate_limit: {limit: 50, per: 1s, burst: 10}, target: {http: {url: "http://127.0.0.1:1/"}}}
`})
	split := writeConfig(t, testConfig{Group: testenv.Name("g"), Schema: schema, Body: `queues:
  q: {concurrency: 1}
routes:
  - {topic: t, name: t, filter: {header: event-type, in: [a, b]}, kind: k, queue: q, target: {http: {url: "http://127.0.0.1:1/"}}}
  - {topic: t, name: t-refund, filter: {field: type, in: [c]}, kind: k2, queue: q, target: {http: {url: "http://127.0.0.1:1/"}}}
  - {topic: u, name: u, kind: k3, queue: q, target: {http: {url: "http://127.0.0.1:1/"}}}
`})
	scheduled := writeConfig(t, testConfig{Group: testenv.Name("g"), Schema: schema, Body: `queues:
  q: {concurrency: 1}
  other: {concurrency: 1}
routes:
  - {topic: t, kind: k, queue: q, max_running: 2, target: {http: {url: "http://127.0.0.1:1/"}}}
schedules:
  - {name: nightly, cron: "0 2 * * *", kind: k, queue: q}
  - {name: elsewhere, cron: "*/5 * * * *", timezone: Europe/Berlin, kind: k2, queue: other}
`})
	openListen := writeConfig(t, testConfig{Topic: "t", Group: testenv.Name("g"), Schema: schema, Listen: "0.0.0.0:18999",
		TargetURL: "http://127.0.0.1:1/"})
	orphanSchedule := writeConfig(t, testConfig{Group: testenv.Name("g"), Schema: schema, Body: `queues:
  q: {concurrency: 1}
routes:
  - {topic: t, kind: k, queue: q, target: {http: {url: "http://127.0.0.1:1/"}}}
schedules:
  - {name: s1, cron: "0 2 * * *", kind: nokind, queue: q}
`})
	unmigrated := writeConfig(t, testConfig{Topic: "t", Group: testenv.Name("g"), Schema: testenv.Name("unmigrated"),
		TargetURL: "http://127.0.0.1:1/"})
	head := "kafka: {brokers: [\"127.0.0.1:19092\"], group: g}\npostgres: {url: \"postgres://x@127.0.0.1/db\"}\n"
	unnamed := writeFile(t, head+`queues:
  q: {concurrency: 1}
routes:
  - {topic: t, kind: k, queue: q, target: {http: {url: "http://127.0.0.1:1/"}}}
  - {topic: t, kind: k2, queue: q, filter: {field: type}, target: {http: {url: "http://127.0.0.1:1/"}}}
`)
	unknownKey := writeFile(t, head+`queues:
  q: {concurrency: 1, bogus: 3}
routes:
  - {topic: t, kind: k, queue: q, target: {http: {url: "http://127.0.0.1:1/"}}}
`)
	unknownQueue := writeFile(t, head+`queues:
  q: {concurrency: 1}
routes:
  - {topic: t, kind: k, queue: nope, target: {http: {url: "http://127.0.0.1:1/"}}}
`)
	badDuration := writeFile(t, head+`queues:
  q: {concurrency: 1, lease: 5 parsecs}
routes:
  - {topic: t, kind: k, queue: q, target: {http: {url: "http://127.0.0.1:1/"}}}
`)
	topLevelTypo := writeFile(t, head+"shutdown_grase: 5s\n"+validQueuesAndRoute)
	explicitZero := writeFile(t, head+`queues:
  q: {concurrency: 0}
routes:
  - {topic: t, kind: k, queue: q, target: {http: {url: "http://127.0.0.1:1/"}}}
`)
	unsetToken := writeFile(t, head+"admin: {tokens: [{name: oncall, token_env: SWITCHYARD_TEST_UNSET_TOKEN}]}\n"+validQueuesAndRoute)
	unsetTokens := writeFile(t, head+"admin: {tokens: [{name: oncall, token_env: SWITCHYARD_TEST_UNSET_TOKEN}, "+
		"{name: grafana, token_env: SWITCHYARD_TEST_UNSET_TOKEN_2}]}\n"+validQueuesAndRoute)

	cases := []struct {
		name string
		args []string
		code int
		want []string // each must appear in stdout or stderr
	}{
		{"no args", nil, exitUsage, []string{"usage: switchyard <verb>"}},
		{"unknown verb", []string{"frobnicate"}, exitUsage, []string{`unknown verb "frobnicate"`, "usage: switchyard"}},
		{"help verb", []string{"help"}, exitOK, []string{"usage: switchyard <verb>"}},
		{"--help", []string{"--help"}, exitOK, []string{"usage: switchyard <verb>"}},
		{"help of a subcommand", []string{"help", "jobs", "list"}, exitOK, []string{"usage: switchyard jobs list [--config FILE]"}},
		{"dev with a config", []string{"dev", "--config", "x.yaml"}, exitUsage,
			[]string{"--config: dev runs its own example config"}},
		{"a flag before the verb", []string{"--config", "x.yaml", "jobs", "list"}, exitUsage,
			[]string{"--config: flags go after the verb: switchyard <verb> --config"}},
		{"bad role", []string{"run", "--role", "nope", "--config", good}, exitUsage, []string{"--role", `"nope"`}},
		{"unknown flag", []string{"run", "--rolle", "all"}, exitUsage, []string{"-rolle"}},
		{"stray argument", []string{"run", "--config", good, "extra"}, exitUsage, []string{`"extra"`}},
		{"unknown key", []string{"run", "--config", unknownKey}, exitUsage,
			[]string{unknownKey, "line 4", `unknown key "bogus"`, "queues.q"}},
		{"unknown top-level key", []string{"run", "--config", topLevelTypo}, exitUsage,
			[]string{"line 3", `"shutdown_grase"`}},
		{"unknown queue", []string{"run", "--config", unknownQueue}, exitUsage,
			[]string{"routes[0].queue", `unknown queue "nope"`}},
		{"bad duration", []string{"run", "--config", badDuration}, exitUsage,
			[]string{"queues.q.lease", `"5 parsecs"`}},
		{"explicit zero", []string{"run", "--config", explicitZero}, exitUsage,
			[]string{"queues.q.concurrency: set to 0", "default (4)"}},
		{"open listen without a token", []string{"run", "--config", openListen}, exitUsage,
			[]string{"http.listen: 0.0.0.0:18999 is not a loopback address", "SWITCHYARD_ADMIN_TOKEN"}},
		{"a schedule of a kind nothing runs", []string{"run", "--config", orphanSchedule}, exitUsage,
			[]string{"config " + orphanSchedule + ": schedules[0].kind: \"nokind\" has no route"}},
		{"a verb that serves nothing, of a config that listens openly", []string{"jobs", "list", "--config", openListen}, exitOK,
			[]string{"no jobs"}},
		{"a token's variable unset", []string{"run", "--config", unsetToken}, exitUsage,
			[]string{"config " + unsetToken + ": admin.tokens[0].token_env: SWITCHYARD_TEST_UNSET_TOKEN is not set, or empty"}},
		{"two tokens' variables unset", []string{"run", "--config", unsetTokens}, exitUsage,
			[]string{"config " + unsetTokens + ": 2 problems:\n  admin.tokens[0].token_env: SWITCHYARD_TEST_UNSET_TOKEN is not set",
				"\n  admin.tokens[1].token_env: SWITCHYARD_TEST_UNSET_TOKEN_2 is not set"}},
		{"missing config file", []string{"run", "--config", filepath.Join(t.TempDir(), "nope.yaml")}, exitUsage,
			[]string{"nope.yaml", "no such file"}},
		{"jobs get abc", []string{"jobs", "get", "--config", good, "abc"}, exitUsage, []string{`"abc"`, "job id"}},
		{"jobs get a huge id", []string{"jobs", "get", "--config", good, "99999999999999999999"}, exitUsage,
			[]string{"job id: 99999999999999999999 is larger than any id (at most 9223372036854775807)"}},
		{"jobs get two ids", []string{"jobs", "get", "--config", good, "1", "2"}, exitUsage, []string{"exactly one"}},
		{"jobs get missing", []string{"jobs", "get", "--config", good, "999999"}, exitFailure,
			[]string{"job 999999 not found"}},
		{"jobs cancel missing", []string{"jobs", "cancel", "--config", good, "999999"}, exitFailure,
			[]string{"job 999999 not found"}},
		{"jobs list bad state", []string{"jobs", "list", "--config", good, "--state", "lost"}, exitUsage,
			[]string{"--state", `"lost"`}},
		{"jobs list bad limit", []string{"jobs", "list", "--config", good, "--limit", "0"}, exitUsage, []string{"--limit"}},
		{"dlq list bad limit", []string{"dlq", "list", "--config", good, "--limit", "1001"}, exitUsage,
			[]string{"--limit: 1001 is not between 1 and 1000"}},
		{"jobs list negative after", []string{"jobs", "list", "--config", good, "--after", "-3"}, exitUsage,
			[]string{"--after: -3 is not an id"}},
		{"audit list negative after", []string{"audit", "list", "--config", good, "--after", "-1"}, exitUsage,
			[]string{"--after: -1 is not an id"}},
		{"a number flag given a word", []string{"jobs", "list", "--config", good, "--limit", "abc"}, exitUsage,
			[]string{`--limit: "abc" is not a whole number`}},
		{"a flag without its value", []string{"jobs", "list", "--config", good, "--state"}, exitUsage,
			[]string{"--state needs a value"}},
		{"a boolean flag given a word", []string{"jobs", "list", "--config", good, "--json=yes"}, exitUsage,
			[]string{`--json: "yes" is not true or false`}},
		{"audit list bad limit", []string{"audit", "list", "--config", good, "--limit", "0"}, exitUsage,
			[]string{"--limit: 0 is not between 1 and 1000"}},
		{"audit list bad action", []string{"audit", "list", "--config", good, "--action", "cancell"}, exitUsage,
			[]string{`--action: "cancell" is not an action; did you mean "cancel"?`, "(valid: cancel, "}},
		{"jobs list empty", []string{"jobs", "list", "--config", good, "--json"}, exitOK, []string{`"items": []`}},
		{"jobs list of an unmigrated schema", []string{"jobs", "list", "--config", unmigrated}, exitFailure,
			[]string{"is not this binary's: at 0, want ", "run `switchyard migrate` first"}},
		{"dlq show of an unmigrated schema", []string{"dlq", "show", "--config", unmigrated, "1"}, exitFailure,
			[]string{"is not this binary's: at 0, want "}},
		{"jobs list empty, for people", []string{"jobs", "list", "--config", good}, exitOK, []string{"no jobs"}},
		{"jobs unknown subcommand", []string{"jobs", "frob"}, exitUsage, []string{`"frob"`}},
		{"dlq show missing", []string{"dlq", "show", "--config", good, "999999"}, exitFailure,
			[]string{"DLQ entry 999999 not found"}},
		{"dlq list empty", []string{"dlq", "list", "--config", good, "--json"}, exitOK, []string{`"items": []`}},
		{"dlq list empty, for people", []string{"dlq", "list", "--config", good}, exitOK, []string{"no DLQ entries"}},
		{"queues list", []string{"queues", "list", "--config", good, "--json"}, exitOK,
			[]string{`"queue": "q"`, `"paused": false`, `"queued": 0`, `"dlq": {`, `"concurrency": 8`, `"next": ""`}},
		{"queues pause", []string{"queues", "pause", "--config", good, "q", "--json"}, exitOK, []string{`"paused": true`}},
		{"queues list paused", []string{"queues", "list", "--config", good, "--json"}, exitOK, []string{`"paused": true`}},
		{"queues resume", []string{"queues", "resume", "--config", good, "q", "--json"}, exitOK, []string{`"paused": false`}},
		{"queues pause unknown", []string{"queues", "pause", "--config", good, "nope"}, exitUsage,
			[]string{`no such queue in the config: "nope"`}},
		{"queues pause no name", []string{"queues", "pause", "--config", good}, exitUsage, []string{"takes 1 argument"}},
		{"queues no subcommand", []string{"queues"}, exitUsage, []string{"missing subcommand"}},
		{"routes list limits", []string{"routes", "list", "--config", limited, "--json"}, exitOK,
			[]string{`"max_running": 20`, `"field": "tenant"`, `"max_running": 2`, `"limit": 50`, `"per": "1s"`, `"burst": 10`}},
		{"routes pause", []string{"routes", "pause", "--config", good, "t", "--json"}, exitOK, []string{`"name": "t"`, `"paused": true`}},
		{"routes list of a split topic", []string{"routes", "list", "--config", split, "--json"}, exitOK,
			[]string{`"name": "t-refund"`, `"topic": "t"`, `"queue": "q"`, `"header": "event-type"`, `"field": "type"`, `"name": "u"`,
				`"backpressured": false`}},
		{"several routes of a topic unnamed", []string{"run", "--config", unnamed}, exitUsage,
			[]string{`routes[1].name: required: topic "t" has 2 routes`, "routes[1].filter.in: required"}},
		{"replay of an unknown route", []string{"replay", "--config", split, "--route", "nope", "--from-offset", "0"}, exitUsage,
			[]string{`--route: no route is named "nope"`}},
		{"replay of a route of another topic", []string{"replay", "--config", split, "--route", "t-refund", "--topic", "u", "--from-offset", "0"},
			exitUsage, []string{"route t-refund reads topic t, not u"}},
		{"replay of nothing", []string{"replay", "--config", split, "--from-offset", "0"}, exitUsage, []string{"--topic or --route"}},
		{"routes list paused", []string{"routes", "list", "--config", good, "--json"}, exitOK, []string{`"paused": true`}},
		{"routes resume", []string{"routes", "resume", "--config", good, "t", "--json"}, exitOK, []string{`"paused": false`}},
		{"routes unknown subcommand", []string{"routes", "frob"}, exitUsage, []string{`"frob"`}},
		{"schedules list", []string{"schedules", "list", "--config", scheduled, "--json"}, exitOK,
			[]string{`"name": "nightly"`, `"route": "t"`, `"name": "elsewhere"`, `"route": "schedule/elsewhere"`, `"paused": false`,
				`"next_slot": "`, `"last_job_id": null`}},
		{"schedules pause", []string{"schedules", "pause", "--config", scheduled, "nightly", "--json"}, exitOK,
			[]string{`"name": "nightly"`, `"paused": true`}},
		{"schedules list paused", []string{"schedules", "list", "--config", scheduled, "--json"}, exitOK, []string{`"paused": true`}},
		{"schedules resume, for people", []string{"schedules", "resume", "--config", scheduled, "nightly"}, exitOK,
			[]string{"resumed schedule nightly"}},
		{"schedules trigger", []string{"schedules", "trigger", "--config", scheduled, "nightly", "--json"}, exitOK,
			[]string{`"name": "nightly"`, `"job_id": `, `"created": true`}},
		{"schedules trigger, for people", []string{"schedules", "trigger", "--config", scheduled, "elsewhere"}, exitOK,
			[]string{"triggered schedule elsewhere: job ", "to run now"}},
		{"schedules trigger unknown", []string{"schedules", "trigger", "--config", scheduled, "nightlly"}, exitUsage,
			[]string{`no such schedule in the config: "nightlly"; did you mean "nightly"?`}},
		{"schedules pause of a config that has none", []string{"schedules", "pause", "--config", good, "nightly"}, exitUsage,
			[]string{`no such schedule in the config: "nightly" (` + good + ` names no schedules)`}},
		{"schedules trigger no name", []string{"schedules", "trigger", "--config", scheduled}, exitUsage, []string{"takes 1 argument"}},
		{"queues trigger", []string{"queues", "trigger", "--config", good, "q"}, exitUsage,
			[]string{`unknown subcommand "trigger"`}},
		{"schedules list, for people", []string{"schedules", "list", "--config", scheduled}, exitOK,
			[]string{"SCHEDULE", "ROUTE", "NEXT SLOT", "LAST JOB", "schedule/elsewhere", "Europe/Berlin"}},
		{"schedules list of none", []string{"schedules", "list", "--config", good}, exitOK, []string{"no schedules"}},
		{"produce without topic", []string{"produce", "--config", good, "v"}, exitUsage, []string{"--topic", "required"}},
		{"produce without value", []string{"produce", "--config", good, "--topic", "t"}, exitUsage, []string{"VALUE"}},
		{"produce bad header", []string{"produce", "--config", good, "--topic", "t", "--header", "novalue", "v"}, exitUsage,
			[]string{`--header: "novalue" is not key=value`}},

		// Did you mean, for a verb, a subcommand and a flag.
		{"mistyped verb", []string{"josb", "list"}, exitUsage, []string{`unknown verb "josb"; did you mean "jobs"?`}},
		{"mistyped subcommand", []string{"jobs", "lsit"}, exitUsage,
			[]string{`unknown subcommand "lsit"; did you mean "list"?`, "list, get, cancel or retry"}},
		{"mistyped dlq subcommand", []string{"dlq", "redirve", "1"}, exitUsage, []string{`did you mean "redrive"?`}},
		{"mistyped queues subcommand", []string{"queues", "pasue", "q"}, exitUsage, []string{`did you mean "pause"?`}},
		{"mistyped flag", []string{"jobs", "list", "--config", good, "--stat", "dead"}, exitUsage,
			[]string{"unknown flag --stat; did you mean --state?"}},
		{"a negative number", []string{"jobs", "get", "--config", good, "-5"}, exitUsage,
			[]string{`unknown flag -5: an argument that starts with "-" reads as a flag; put it after "--" (switchyard jobs get … -- -5)`}},
		{"a negative number after --", []string{"jobs", "get", "--config", good, "--", "-5"}, exitUsage,
			[]string{`job id: "-5" is not a positive integer id`}},
		{"mistyped queue name", []string{"queues", "pause", "--config", good, "qq"}, exitUsage,
			[]string{`no such queue in the config: "qq"; did you mean "q"?`}},

		// Filter values are checked: a name the config does not know is
		// listed anyway (a renamed route's jobs stay), with a note naming
		// the valid ones; a schedule's own route is known.
		{"jobs list unknown queue", []string{"jobs", "list", "--config", split, "--queue", "nope"}, exitOK,
			[]string{`note: --queue: "nope" is not a queue of the config`, "(valid: q); listing it anyway", "no jobs"}},
		{"jobs list unknown route", []string{"jobs", "list", "--config", split, "--route", "t-refnud"}, exitOK,
			[]string{`--route: "t-refnud" is not a route of the config; did you mean "t-refund"?`, "(valid: t, t-refund, u)"}},
		{"jobs list of a schedule's route", []string{"jobs", "list", "--config", scheduled, "--route", "schedule/elsewhere"}, exitOK,
			[]string{"schedule/elsewhere"}}, // the job "schedules trigger" made above
		{"jobs list bad state named", []string{"jobs", "list", "--config", good, "--state", "daed"}, exitUsage,
			[]string{`did you mean "dead"?`, "valid: waiting, queued, running"}},
		{"dlq list unknown reason", []string{"dlq", "list", "--config", good, "--reason", "max_attempt"}, exitUsage,
			[]string{`--reason: "max_attempt" is not a DLQ reason; did you mean "max_attempts"?`,
				"valid: decode, missing_field, too_large, permanent, max_attempts, gap"}},
		{"dlq list unknown queue", []string{"dlq", "list", "--config", good, "--queue", "nope"}, exitOK,
			[]string{`--queue: "nope" is not a queue of the config`, "valid: q"}},
		{"dlq list unknown route", []string{"dlq", "list", "--config", split, "--route", "nope"}, exitOK,
			[]string{`--route: "nope" is not a route of the config`, "valid: t, t-refund, u"}},
		{"dlq redrive all matching an unknown queue", []string{"dlq", "redrive", "--config", good, "--all-matching", "queue=nope"},
			exitUsage, []string{`--all-matching: queue: "nope" is not a queue of the config`}},
		{"dlq redrive all matching an unknown reason", []string{"dlq", "redrive", "--config", good, "--all-matching", "reason=gpa"},
			exitUsage, []string{`reason "gpa" is not a DLQ reason; did you mean "gap"?`}},

		// For people by default, JSON with --json.
		{"queues list, for people", []string{"queues", "list", "--config", good}, exitOK,
			[]string{"QUEUE", "WAITING", "OLDEST RUNNABLE", "PAUSED"}},
		{"routes list, for people", []string{"routes", "list", "--config", split}, exitOK,
			[]string{"ROUTE", "TOPIC", "FILTER", "t-refund", "field type in c", "header event-type in a,b"}},
		{"routes list limits, for people", []string{"routes", "list", "--config", limited}, exitOK,
			[]string{"max_running 20, 2 per tenant, 50/1s burst 10"}},
		{"queues pause twice, for people", []string{"queues", "pause", "--config", split, "q"}, exitOK, []string{"paused queue q"}},
		{"queues pause again", []string{"queues", "pause", "--config", split, "q"}, exitOK, []string{"queue q was already paused"}},
		{"queues resume, for people", []string{"queues", "resume", "--config", split, "q"}, exitOK, []string{"resumed queue q"}},
		{"no note without an override", []string{"queues", "list", "--config", good}, exitOK, nil},

		// version and --version.
		{"version", []string{"version"}, exitOK, []string{"switchyard ", "go1."}},
		{"--version", []string{"--version"}, exitOK, []string{"switchyard ", "go1."}},
		{"version --json", []string{"version", "--json"}, exitOK, []string{`"version": `, `"go": "go1.`}},

		// The help lists every verb and subcommand, jobs cancel too, and
		// names flags' arguments.
		{"help lists subcommands", []string{"help"}, exitOK,
			[]string{"jobs cancel ID", "jobs get ID", "dlq show ID", "dlq discard ID", "queues resume Q", "routes pause R",
				"schedules trigger S", "version"}},
		{"migrate --grant-runtime of a bad name", []string{"migrate", "--config", good, "--grant-runtime", "x; drop table y"}, exitUsage,
			[]string{`--grant-runtime: "x; drop table y" is not a role name`}},
		{"migrate --grant-runtime of nothing", []string{"migrate", "--config", good, "--grant-runtime", ""}, exitUsage,
			[]string{`--grant-runtime: "" is not a role name`}},
		{"migrate --help names ROLE", []string{"migrate", "--help"}, exitOK, []string{"--grant-runtime ROLE\n"}},
		{"jobs list --help", []string{"jobs", "list", "--help"}, exitOK, []string{"--state STATE", "--limit N", "--after ID", "--json"}},
	}
	// --help on every verb and subcommand prints its usage and exits 0.
	helps := [][]string{{"jobs"}, {"dlq"}, {"queues"}, {"routes"}, {"jobs", "get"}, {"jobs", "list"}, {"jobs", "cancel"},
		{"dlq", "list"}, {"dlq", "show"}, {"dlq", "redrive"}, {"dlq", "discard"},
		{"queues", "list"}, {"queues", "pause"}, {"queues", "resume"}, {"routes", "list"}, {"routes", "pause"}, {"routes", "resume"},
		{"schedules", "list"}, {"schedules", "pause"}, {"schedules", "resume"}, {"schedules", "trigger"}}
	for name := range verbs() {
		helps = append(helps, []string{name})
	}
	for _, verb := range helps {
		cases = append(cases, struct {
			name string
			args []string
			code int
			want []string
		}{strings.Join(verb, " ") + " --help", append(verb, "--help"), exitOK,
			[]string{"usage: switchyard " + strings.Join(verb, " ")}})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(c.args...)
			if code != c.code {
				t.Errorf("switchyard %q exited %d, want %d\nstdout: %s\nstderr: %s", c.args, code, c.code, stdout, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stdout+stderr, w) {
					t.Errorf("switchyard %q: output does not contain %q\nstdout: %s\nstderr: %s", c.args, w, stdout, stderr)
				}
			}
			// Asked for, help is the output (a pager reads stdout).
			if slices.Contains(c.args, "--help") && c.code == exitOK && !strings.HasPrefix(stdout, "usage: switchyard") {
				t.Errorf("switchyard %q: help not on stdout\nstdout: %s\nstderr: %s", c.args, stdout, stderr)
			}
			if strings.Contains(stdout+stderr, "panic") || strings.Contains(stdout+stderr, "goroutine ") {
				t.Errorf("switchyard %q panicked:\n%s", c.args, stderr)
			}
			// Help and messages are for users: no references to our own
			// documents' sections, and no note of an override where the
			// environment repeats the file.
			if strings.Contains(stdout+stderr, "SPEC") || strings.Contains(stdout+stderr, "§") {
				t.Errorf("switchyard %q refers to the spec:\n%s%s", c.args, stdout, stderr)
			}
			if strings.Contains(stderr, "note:") && strings.Contains(stderr, " overrides ") {
				t.Errorf("switchyard %q: a note of an override the test did not make: %s", c.args, stderr)
			}
			if strings.Contains(stderr, "listing it anyway") && c.code == exitOK && slices.ContainsFunc(c.args, func(a string) bool {
				return strings.HasPrefix(a, "schedule/")
			}) {
				t.Errorf("switchyard %q: a note for a schedule's own route, which the config names: %s", c.args, stderr)
			}
		})
	}
}

// Every verb and subcommand, from the list the top-level help prints,
// answers --help with its usage, a paragraph saying what it does, and its
// flags; it lists --config exactly when it reads the config, as the
// top-level help says: every verb but dev and version.
func TestCLIHelpOfEveryVerb(t *testing.T) {
	t.Parallel()
	var leaves [][]string
	for _, v := range verbList() {
		if len(v.subs) == 0 {
			leaves = append(leaves, []string{v.name})
		}
		for _, s := range v.subs {
			leaves = append(leaves, []string{v.name, s.name})
		}
	}
	_, top, _ := runCLI("--help")
	if !strings.Contains(top, "Every verb but dev and version takes --config FILE") {
		t.Fatalf("the top-level help no longer says which verbs take --config:\n%s", top)
	}
	for _, verb := range leaves {
		name := strings.Join(verb, " ")
		code, stdout, stderr := runCLI(append(verb, "--help")...)
		if code != exitOK {
			t.Errorf("switchyard %s --help exited %d\nstderr: %s", name, code, stderr)
			continue
		}
		// usage line, blank line, the description, ... "flags:".
		paras := strings.Split(stdout, "\n\n")
		if len(paras) < 3 || !strings.HasPrefix(paras[0], "usage: switchyard "+name) || strings.HasPrefix(paras[1], "flags:") {
			t.Errorf("switchyard %s --help has no description between its usage and its flags:\n%s", name, stdout)
		}
		takesConfig := name != "dev" && name != "version"
		if got := strings.Contains(stdout, "\n  --config FILE\n"); got != takesConfig {
			t.Errorf("switchyard %s --help lists --config: %t, want %t:\n%s", name, got, takesConfig, stdout)
		}
	}
}

// A bad sslmode is a config error (exit 2) that names the setting and
// not the password, from a file and, for a database-only verb without
// one, from the environment, which it then blames. Own processes: the
// test's own SWITCHYARD_DATABASE_URL would win over the file's.
func TestCLIBadSSLMode(t *testing.T) {
	t.Parallel()
	bad := "postgres://u:pw@127.0.0.1/db?sslmode=on"
	file := writeFile(t, "kafka: {brokers: [\"127.0.0.1:19092\"]}\npostgres: {url: \""+bad+"\"}\n"+validQueuesAndRoute)
	for _, c := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"file", []string{"SWITCHYARD_DATABASE_URL="}, []string{"migrate", "--config", file}, file},
		{"environment", []string{"SWITCHYARD_CONFIG=", "SWITCHYARD_DATABASE_URL=" + bad}, []string{"migrate"}, "SWITCHYARD_DATABASE_URL"},
	} {
		p := start(t, "migrate", c.env, c.args...)
		if code := p.wait(30 * time.Second); code != exitUsage {
			t.Fatalf("%s: exit %d, want %d", c.name, code, exitUsage)
		}
		if msg := p.log.String(); !strings.Contains(msg, `sslmode "on" is not one of`) || !strings.Contains(msg, c.want) ||
			strings.Contains(msg, "pw@") {
			t.Fatalf("%s: message %q", c.name, msg)
		}
	}
}

// A database that refuses the connection is said once, without the
// password, though sslmode=prefer (the default) dials twice.
func TestCLIUnreachableDatabase(t *testing.T) {
	t.Parallel()
	file := writeFile(t, "kafka: {brokers: [\"127.0.0.1:19092\"]}\npostgres: {url: \"postgres://u:pw@127.0.0.1:1/db\"}\n"+validQueuesAndRoute)
	p := start(t, "jobs", []string{"SWITCHYARD_DATABASE_URL="}, "jobs", "list", "--config", file)
	if code := p.wait(30 * time.Second); code != exitFailure {
		t.Fatalf("exit %d, want %d", code, exitFailure)
	}
	msg := p.log.String()
	if !strings.Contains(msg, "postgres: cannot connect: 127.0.0.1:1 ") || strings.Count(msg, "connection refused") != 1 ||
		strings.Contains(msg, "pw") {
		t.Fatalf("message %q; want the refused connection once, without the password", msg)
	}
}

// freshSchema names a schema that does not exist yet and drops it when the
// test ends.
func freshSchema(t *testing.T) (string, *pgstore.Store) {
	t.Helper()
	schema := testenv.Name("t")
	s := testenv.Store(t, schema)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.DropSchema(ctx); err != nil {
			t.Logf("drop schema %s: %v", schema, err)
		}
	})
	return schema, s
}

func migrationRows(t *testing.T, s *pgstore.Store) []int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := s.Pool().Query(ctx, `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatalf("read schema_migrations: %v", err)
	}
	defer rows.Close()
	var vs []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return vs
}

// wantAllMigrations checks schema_migrations has one row per migration.
func wantAllMigrations(t *testing.T, s *pgstore.Store) {
	t.Helper()
	var want []int
	for v := 1; v <= pgstore.LatestVersion(); v++ {
		want = append(want, v)
	}
	if got := migrationRows(t, s); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("schema_migrations versions %v, want %v", got, want)
	}
}

// TestCLIMigrateTwice: the second migrate finds nothing to do and says so.
func TestCLIMigrateTwice(t *testing.T) {
	t.Parallel()
	schema, store := freshSchema(t)
	cfg := writeConfig(t, testConfig{Topic: "t", Group: "g", Schema: schema, TargetURL: "http://127.0.0.1:1/"})
	code, stdout, stderr := runCLI("migrate", "--config", cfg)
	if code != exitOK || !strings.Contains(stdout, "applied 0001_") {
		t.Fatalf("first migrate: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI("migrate", "--config", cfg)
	if code != exitOK || !strings.Contains(stdout, "up to date") || strings.Contains(stdout, "applied") {
		t.Fatalf("second migrate: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	wantAllMigrations(t, store)
}

// TestCLIMigrateConcurrently: four processes migrate a fresh schema at once;
// all succeed and each migration is applied once.
func TestCLIMigrateConcurrently(t *testing.T) {
	t.Parallel()
	schema, store := freshSchema(t)
	cfg := writeConfig(t, testConfig{Topic: "t", Group: "g", Schema: schema, TargetURL: "http://127.0.0.1:1/"})
	const n = 4
	procs := make([]*proc, n)
	for i := range procs {
		procs[i] = start(t, fmt.Sprintf("migrate-%d", i), nil, "migrate", "--config", cfg)
	}
	applied := 0
	for _, p := range procs {
		if code := p.wait(time.Minute); code != exitOK {
			t.Errorf("%s exited %d\nstdout: %s\nstderr: %s", p.name, code, p.out.String(), p.log.String())
		}
		if strings.Contains(p.out.String(), "applied 0001_") {
			applied++
		}
	}
	if applied != 1 {
		t.Errorf("%d processes say they applied the first migration, want exactly 1", applied)
	}
	wantAllMigrations(t, store)
}

// TestCLIOlderBinaryRefusesANewerSchema: a rollback's binary against a
// schema a newer one migrated (simulated: one migration past this
// binary's, and functions of its own) — its migrate and its run refuse,
// change nothing, and say both versions and the ways out: run the newer
// release, or restore the database (migrations do not go down). Not an
// older commit built here: the refusal reads only the recorded versions,
// and a build of another commit needs the history and a minute of CI.
func TestCLIOlderBinaryRefusesANewerSchema(t *testing.T) {
	t.Parallel()
	schema, store := freshSchema(t)
	cfg := writeConfig(t, testConfig{Topic: "t", Group: testenv.Name("g"), Schema: schema, TargetURL: "http://127.0.0.1:1/"})
	if p := start(t, "migrate", nil, "migrate", "--config", cfg); p.wait(time.Minute) != exitOK {
		t.Fatalf("migrate: %s", p.log.String())
	}
	latest, newer := pgstore.LatestVersion(), pgstore.LatestVersion()+1
	ctx := context.Background()
	if _, err := store.Pool().Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, 'from_a_newer_binary.sql')`, newer); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Pool().Exec(ctx, `UPDATE schema_functions SET sha256 = 'newer'`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ verb, versions string }{
		{"migrate", fmt.Sprintf("at migration %d, newer than this binary's %d", newer, latest)},
		{"run", fmt.Sprintf("at %d, newer than this binary's %d", newer, latest)},
	} {
		p := start(t, c.verb, nil, c.verb, "--config", cfg)
		code := p.wait(time.Minute)
		msg := lastLine(p.log.String())
		if code != exitFailure || !strings.Contains(msg, c.versions) || !strings.Contains(msg, "run the switchyard that migrated it") ||
			!strings.Contains(msg, "restore the database") {
			t.Errorf("%s on a newer schema: exit %d, %q; want exit %d naming %q, the newer switchyard and restoring the database",
				c.verb, code, msg, exitFailure, c.versions)
		}
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM schema_functions WHERE sha256 = 'newer'`); n != 1 {
		t.Errorf("the older migrate put its functions back over the newer schema's")
	}
}
