package main

// Secrets (the Postgres password, the admin token, the Kafka SASL
// password) must never reach a log line, a CLI message or an admin API
// response, on the happy path or on any error path.

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-dev/switchyard/internal/testenv"
)

const (
	pgSecret    = "PGs3cretXYZ"
	tokenSecret = "TOKs3cretXYZ"
	saslSecret  = "SASLs3cretXYZ"
)

// noSecrets fails the test for every secret found in text: the ones
// above, and the shared database URL's own password.
func noSecrets(t *testing.T, what, text string) {
	t.Helper()
	secrets := []string{pgSecret, tokenSecret, saslSecret}
	if u, err := url.Parse(testenv.DatabaseURL(t)); err == nil {
		if p, ok := u.User.Password(); ok && p != "" {
			secrets = append(secrets, p)
		}
	}
	for _, s := range secrets {
		if i := strings.Index(text, s); i >= 0 {
			lo, hi := max(0, i-200), min(len(text), i+len(s)+100)
			t.Errorf("%s shows the secret %q: …%s…", what, s, text[lo:hi])
		}
	}
}

// withPassword returns the URL with a password: its own, which the
// local server asks TCP connections for (noSecrets looks for it too), or
// else, for a server that trusts them, password.
func withPassword(t *testing.T, raw, password string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("SWITCHYARD_DATABASE_URL: %v", err)
	}
	if p, ok := u.User.Password(); ok && p != "" {
		return raw
	}
	user := "switchyard"
	if u.User != nil && u.User.Username() != "" {
		user = u.User.Username()
	}
	u.User = url.UserPassword(user, password)
	return u.String()
}

// TestSecretsNeverLogged runs the binary with secrets in every place
// they can be given and greps everything it says for them: a full run
// (logs at debug, and the admin API's /metrics, /readyz, /healthz,
// /v1/queues, /v1/jobs and its 401s), the CLI verbs, runs that fail to
// connect to Postgres or cannot parse its URL, a config error on the line
// holding the URL, and runs whose Kafka SASL handshake fails.
func TestSecretsNeverLogged(t *testing.T) {
	t.Parallel()
	schema := testenv.Schema(t)
	store := testenv.Store(t, schema)
	topic := testenv.Topic(t, 1)
	tg := newTarget(t)
	secretURL := withPassword(t, testenv.DatabaseURL(t), pgSecret)
	env := []string{"SWITCHYARD_DATABASE_URL=" + secretURL, "SWITCHYARD_ADMIN_TOKEN=" + tokenSecret,
		"SWITCHYARD_LOG_LEVEL=debug"}
	// postgres.url is left out: the URL, with its password, comes from
	// the environment.
	cfgWith := func(kafkaExtra string) string {
		return writeConfig(t, testConfig{DatabaseURLFromEnv: true, Group: testenv.Name("g"), Schema: schema,
			KafkaExtra: kafkaExtra, Listen: "127.0.0.1:0", Topic: topic, TargetURL: tg.URL(),
			Concurrency: 2, Lease: 2 * time.Second, MaxAttempts: 2})
	}
	cfg := cfgWith("")

	// The CLI verbs, with the password in the URL from the environment.
	for _, args := range [][]string{
		{"migrate", "--config", cfg},
		{"produce", "--config", cfg, "--topic", topic, `{"id":"s-1"}`},
		{"jobs", "list", "--config", cfg},
		{"dlq", "list", "--config", cfg},
	} {
		out, errOut, code := runCmd(t, time.Minute, env, args...)
		if code != 0 {
			t.Errorf("switchyard %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		noSecrets(t, "switchyard "+strings.Join(args, " "), out+errOut)
	}

	// A full run, and every admin endpoint, with and without the token.
	p := start(t, "run-secrets", env, "run", "--config", cfg)
	addr := adminAddr(t, p)
	testenv.Eventually(t, 30*time.Second, "the produced job to succeed", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'succeeded'`) == 1
	})
	for _, c := range []struct {
		path, auth string
		want       int
	}{
		{"/metrics", "", http.StatusOK}, {"/readyz", "", http.StatusOK}, {"/healthz", "", http.StatusOK},
		{"/v1/queues", "Bearer " + tokenSecret, http.StatusOK}, {"/v1/jobs", "Bearer " + tokenSecret, http.StatusOK},
		{"/v1/dlq", "Bearer " + tokenSecret, http.StatusOK},
		// Refusals must not echo what was sent either.
		{"/v1/queues", "", http.StatusUnauthorized}, {"/v1/queues", "Bearer wrong", http.StatusUnauthorized},
		{"/v1/queues", "Token " + tokenSecret, http.StatusUnauthorized},
		{"/v1/queues", "Bearer " + tokenSecret + "x", http.StatusUnauthorized},
		{"/", "", 0},
	} {
		code, resp := adminGetAuth(t, addr, c.path, c.auth)
		if c.want != 0 && code != c.want {
			t.Errorf("GET %s: status %d, want %d: %s", c.path, code, c.want, resp)
		}
		noSecrets(t, fmt.Sprintf("GET %s (%d)", c.path, code), resp)
	}
	term(t, p, 30*time.Second)
	noSecrets(t, "the log of a full run", p.log.String()+p.out.String())

	// Postgres unreachable: the connection error path.
	closedURL := fmt.Sprintf("postgres://switchyard:%s@127.0.0.1:%d/switchyard?sslmode=disable&connect_timeout=5",
		pgSecret, testenv.FreePorts(t, 1)[0]) // a port nothing listens on
	// URLs that cannot be parsed, in both forms pgx takes.
	bad := []string{
		closedURL,
		"postgres://switchyard:" + pgSecret + "@127.0.0.1:notaport/switchyard",
		"postgres://switchyard:" + pgSecret + "@[::1/switchyard",
		"postgres://switchyard:" + pgSecret + "@127.0.0.1:5432/switchyard?sslmode=bogus",
		"host=127.0.0.1 port=notaport user=switchyard password=" + pgSecret,
		"host=127.0.0.1 user=switchyard password='" + pgSecret,
	}
	for i, u := range bad {
		badEnv := []string{"SWITCHYARD_DATABASE_URL=" + u, "SWITCHYARD_ADMIN_TOKEN=" + tokenSecret, "SWITCHYARD_LOG_LEVEL=debug"}
		for _, args := range [][]string{
			{"run", "--config", cfg},
			{"migrate", "--config", cfg},
			{"jobs", "list", "--config", cfg},
		} {
			t0 := time.Now()
			out, errOut, code := runCmd(t, time.Minute, badEnv, args...)
			what := fmt.Sprintf("switchyard %s with bad URL %d", strings.Join(args, " "), i)
			if args[0] == "run" {
				t.Logf("%s (%s): exit %d: %s", what, time.Since(t0).Round(time.Millisecond), code, lastLine(errOut))
			}
			if code == 0 {
				t.Errorf("%s: exit 0, want a failure", what)
			}
			if strings.TrimSpace(errOut) == "" {
				t.Errorf("%s: no error message", what)
			}
			noSecrets(t, what, out+errOut)
		}
	}
	// The URL in the file, on a line with a config error: an unknown key
	// (the decoder's error), then bad values (validation's errors).
	for i, line := range []string{
		fmt.Sprintf("postgres: {url: %q, bogus: 1}", closedURL),
		fmt.Sprintf("postgres: {url: %q, max_conns: -1}", bad[1]),
	} {
		badFile := writeFile(t, fmt.Sprintf(`kafka: {brokers: [%q]}
%s
queues: {q: {concurrency: 1}}
routes: [{topic: t, kind: k, queue: q, target: {http: {url: "http://127.0.0.1:1/"}}}]
`, testenv.Brokers(t)[0], line))
		out, errOut, code := runCmd(t, time.Minute, []string{"SWITCHYARD_DATABASE_URL="}, "run", "--config", badFile)
		if code != 2 || strings.TrimSpace(errOut) == "" {
			t.Errorf("run with bad config %d: exit %d, want 2 and a message\n%s%s", i, code, out, errOut)
		}
		t.Logf("run with bad config %d: exit %d: %s", i, code, strings.TrimSpace(errOut))
		noSecrets(t, fmt.Sprintf("run with bad config %d", i), out+errOut)
	}

	// Kafka SASL: the broker does not speak it, so every connection fails
	// its handshake. PLAIN with the password in the file; SCRAM with the
	// password from the environment.
	type saslCase struct {
		name string
		cfg  string
		env  []string
	}
	var cases []saslCase
	for _, c := range []struct {
		name, block string
		env         []string
	}{
		{"plain", fmt.Sprintf(`, sasl: {mechanism: PLAIN, username: u, password: %q}`, saslSecret), nil},
		{"scram", `, sasl: {mechanism: SCRAM-SHA-512, username: u}`, []string{"SWITCHYARD_KAFKA_SASL_PASSWORD=" + saslSecret}},
	} {
		cases = append(cases, saslCase{c.name, cfgWith(c.block),
			append(append([]string(nil), env...), c.env...)})
	}
	// produce gives up only after its 30s timeout, so both run meanwhile.
	var produces []*proc
	for _, c := range cases {
		produces = append(produces, start(t, "produce-sasl-"+c.name, c.env,
			"produce", "--config", c.cfg, "--topic", topic, `{"id":"s-2"}`))
	}
	for _, c := range cases {
		p := start(t, "run-sasl-"+c.name, c.env, "run", "--config", c.cfg)
		addr := adminAddr(t, p)
		var ready string
		testenv.Eventually(t, 30*time.Second, "/readyz to report Kafka unreachable", func() bool {
			code, resp := adminGet(t, addr, "/readyz", "")
			ready = resp
			return code != http.StatusOK
		})
		testenv.Eventually(t, 30*time.Second, "the failed SASL handshake to be logged", func() bool {
			return strings.Contains(strings.ToLower(p.log.String()), "sasl")
		})
		t.Logf("SASL %s: /readyz says %s", c.name, strings.TrimSpace(ready))
		noSecrets(t, "GET /readyz with SASL failing", ready)
		p.signal(syscall.SIGTERM)
		p.wait(30 * time.Second)
		noSecrets(t, "the log of a run with SASL "+c.name, p.log.String()+p.out.String())
	}
	for i, p := range produces {
		code := p.wait(time.Minute)
		t.Logf("produce with SASL %s: exit %d: %s", cases[i].name, code, strings.TrimSpace(p.out.String()+p.log.String()))
		noSecrets(t, "produce with SASL "+cases[i].name, p.out.String()+p.log.String())
	}
}

// /readyz answers without a token, so a Kafka it cannot reach is said as
// a phrase: the dial error names the brokers' host and port, which the
// log keeps for the operator.
func TestReadyzNamesNoBrokerAddress(t *testing.T) {
	t.Parallel()
	schema := testenv.Schema(t)
	testenv.Store(t, schema)
	broker := fmt.Sprintf("127.0.0.1:%d", testenv.FreePorts(t, 1)[0]) // nothing listens there
	cfg := writeConfig(t, testConfig{Services: testenv.Services{DatabaseURL: testenv.DatabaseURL(t), Brokers: []string{broker}},
		Group: testenv.Name("g"), Schema: schema, Listen: "127.0.0.1:0", Topic: testenv.Name("t"), TargetURL: "http://127.0.0.1:1/"})
	// The environment's brokers would win over the file's.
	p := start(t, "run-no-broker", []string{"SWITCHYARD_KAFKA_BROKERS=" + broker}, "run", "--config", cfg)
	addr := adminAddr(t, p)
	var code int
	var ready string
	testenv.Eventually(t, 30*time.Second, "/readyz to say no broker answered", func() bool {
		code, ready = adminGet(t, addr, "/readyz", "")
		return strings.Contains(ready, `"kafka":"no broker answered (see the log)"`)
	})
	if code != http.StatusServiceUnavailable || strings.Contains(ready, broker) {
		t.Errorf("GET /readyz with Kafka unreachable: %d %s; want 503, without the broker's address %s", code, ready, broker)
	}
	p.waitLog(30*time.Second, broker)
	p.signal(syscall.SIGTERM)
	p.wait(30 * time.Second)
}
