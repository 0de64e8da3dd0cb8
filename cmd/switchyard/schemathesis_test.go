package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// The admin API of a real `switchyard run` process against its own
// OpenAPI document, with Schemathesis generating requests from it
// (`--checks all`: no 5xx, every response matches the document, errors
// are JSON, auth is not ignored, …). The process holds every kind of row
// the API shows: a succeeded job, a dead job with its DLQ entry, and
// DLQ entries of records that never became jobs (undecodable, missing
// their key field). It must survive the run and log no error.
// SCHEMATHESIS_MAX_EXAMPLES (default 50) bounds the cases per operation;
// SCHEMATHESIS_SEED repeats a run.
func TestAdminAPIMatchesItsOpenAPI(t *testing.T) {
	t.Parallel()
	st := testenv.Schemathesis(t)
	schema, topic := testenv.Schema(t), testenv.Topic(t, 1)
	store := testenv.Store(t, schema)
	tg := newTarget(t)
	tg.setBehaviour(func(_ *http.Request, c call) int {
		if bytes.Contains(c.Body, []byte("reject")) {
			return http.StatusBadRequest // a permanent failure: dead at once
		}
		return 0
	})
	cfg := writeConfig(t, testConfig{Group: testenv.Name("g"), Schema: schema, Listen: "127.0.0.1:0", Body: fmt.Sprintf(`queues:
  q: {concurrency: 2, lease: 10s, max_runtime: 30s, poll_interval: 200ms}
routes:
  - topic: %q
    kind: schemathesis.seed
    queue: q
    key: {field: k}
    dedupe: {field: id}
    max_attempts: 2
    backoff: {initial: 100ms, max: 1s}
    target: {http: {url: %q, timeout: 5s}}
`, topic, tg.URL())})
	const token = "schemathesis-admin-token"
	p := start(t, "run-schemathesis", []string{"SWITCHYARD_ADMIN_TOKEN=" + token}, "run", "--config", cfg)
	addr := adminAddr(t, p)
	testenv.Produce(t, topic,
		&kgo.Record{Value: []byte(`{"id":"ok-1","k":"a"}`)},
		&kgo.Record{Value: []byte(`{"id":"bad-1","k":"b","reject":true}`)},
		&kgo.Record{Value: []byte(`not json`)},
		&kgo.Record{Value: []byte(`{"id":"nokey-1"}`)})
	testenv.Eventually(t, time.Minute, "a succeeded job and three DLQ entries", func() bool {
		return testenv.Count(t, store, `SELECT count(*) FROM all_jobs WHERE state = 'succeeded'`) == 1 &&
			testenv.Count(t, store, `SELECT count(*) FROM dlq_entries`) == 3
	})

	examples := os.Getenv("SCHEMATHESIS_MAX_EXAMPLES")
	if examples == "" {
		examples = "50"
	}
	seed := os.Getenv("SCHEMATHESIS_SEED")
	if seed == "" {
		seed = strconv.FormatInt(time.Now().UnixNano()%1_000_000, 10)
	}
	dir := t.TempDir() // where schemathesis keeps its own files
	conf := filepath.Join(dir, "schemathesis.toml")
	if err := os.WriteFile(conf, []byte(schemathesisConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, st, "--no-color", "--config-file", conf, "run", "http://"+addr+"/v1/openapi.json",
		"--header", "Authorization: Bearer "+token,
		"--checks", "all",
		"--max-examples", examples,
		"--request-timeout", "10",
		"--seed", seed,
		"--generation-database", "none")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	t.Logf("schemathesis (seed %s, %s examples per operation):\n%s", seed, examples, tail(string(out), 4000))
	if err != nil {
		t.Errorf("schemathesis found problems (%v); repeat with SCHEMATHESIS_SEED=%s", err, seed)
	}
	if p.exited() {
		t.Fatalf("switchyard run exited during the run (exit %d)", p.code)
	}
	if bad := regexp.MustCompile(`"level":"(error|dpanic|panic|fatal)"|(?m)^panic:`).FindString(p.log.String()); bad != "" {
		t.Errorf("switchyard run logged %s during the run", bad)
	}
}

// schemathesisConfig: enqueueJob decodes its body as the route decodes a
// record, so a body that route would park, or a kind no route of the
// queue has, is a 400 the document describes but cannot put in a schema
// (it depends on the config). Every other check, and every other
// operation, keeps schemathesis's expectations.
const schemathesisConfig = `
[[operations]]
include-operation-id = "enqueueJob"
checks.positive_data_acceptance.expected-statuses = ["2XX", "400", "401", "403", "404", "409", "429"]
`
