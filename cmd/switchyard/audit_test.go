package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/internal/testenv"
)

// TestOperatorActionsAreAudited, through a real process and the CLI:
// named tokens from the environment, a read token refused every action
// (and nothing happens), an operate token's re-drive recorded under its
// name, the CLI's actions under cli:<user>, the re-driven DLQ entry kept
// with its job's new outcome, and no token in anything the process says.
func TestOperatorActionsAreAudited(t *testing.T) {
	t.Parallel()
	schema, topic := testenv.Schema(t), testenv.Topic(t, 1)
	store := testenv.Store(t, schema)
	var failing atomic.Bool
	failing.Store(true)
	tg := newTarget(t)
	tg.setBehaviour(func(*http.Request, call) int {
		if failing.Load() {
			return http.StatusUnprocessableEntity
		}
		return 0
	})
	const oncall, grafana = "oncall-t0k3n-7f3a", "grafana-t0k3n-c21e"
	cfg := writeConfig(t, testConfig{Group: testenv.Name("g"), Schema: schema, Listen: "127.0.0.1:0", Body: fmt.Sprintf(`admin:
  tokens:
    - {name: oncall, token_env: TEST_ONCALL_TOKEN, role: operate}
    - {name: grafana, token_env: TEST_GRAFANA_TOKEN, role: read}
queues:
  q: {concurrency: 2, poll_interval: 100ms}
routes:
  - {topic: %q, kind: k, queue: q, target: {http: {url: %q, timeout: 5s}}}
`, topic, tg.URL())})
	env := []string{"TEST_ONCALL_TOKEN=" + oncall, "TEST_GRAFANA_TOKEN=" + grafana}
	p := start(t, "run-audit", env, "run", "--config", cfg)
	addr := adminAddr(t, p)
	testenv.Produce(t, topic, &kgo.Record{Value: []byte(`{"order":1}`)})
	var entry, job int64
	testenv.Eventually(t, 30*time.Second, "the job to die of its 422 and park", func() bool {
		return store.Pool().QueryRow(t.Context(), `SELECT id, job_id FROM dlq_entries`).Scan(&entry, &job) == nil
	})

	redrive := fmt.Sprintf("/v1/dlq/%d/redrive", entry)
	if code, body := apiAs(t, addr, "POST", redrive, "Bearer "+grafana); code != http.StatusForbidden ||
		!strings.Contains(body, "role read") {
		t.Fatalf("re-drive with the read token: %d %s, want 403", code, body)
	}
	if code, body := apiAs(t, addr, "POST", redrive, ""); code != http.StatusUnauthorized {
		t.Fatalf("re-drive without a token: %d %s, want 401", code, body)
	}
	if n := testenv.Count(t, store, `SELECT count(*) FROM dlq_entries WHERE redriven_at IS NULL`); n != 1 {
		t.Fatalf("%d parked entries after refused re-drives, want the 1", n)
	}
	failing.Store(false)
	if code, body := apiAs(t, addr, "POST", redrive, "Bearer "+oncall); code != http.StatusOK {
		t.Fatalf("re-drive with the operate token: %d %s", code, body)
	}
	testenv.Eventually(t, 30*time.Second, "the re-driven entry to show its job succeeded", func() bool {
		_, body := apiAs(t, addr, "GET", fmt.Sprintf("/v1/dlq/%d", entry), "Bearer "+grafana)
		var e struct {
			Redriven *struct {
				By       string `json:"by"`
				JobID    int64  `json:"job_id"`
				JobState string `json:"job_state"`
			} `json:"redriven"`
		}
		return json.Unmarshal([]byte(body), &e) == nil && e.Redriven != nil && e.Redriven.By == "oncall" &&
			e.Redriven.JobID == job && e.Redriven.JobState == "succeeded"
	})

	for _, args := range [][]string{{"queues", "pause", "q"}, {"queues", "resume", "q"}} {
		if code, out, errOut := runCLI(append(append(args[:2:2], "--config", cfg), args[2:]...)...); code != 0 {
			t.Fatalf("switchyard %v: exit %d %s %s", args, code, out, errOut)
		}
	}
	code, out, errOut := runCLI("audit", "list", "--config", cfg, "--json")
	var listed struct {
		Items []struct{ Actor, Action, Target string }
	}
	if err := json.Unmarshal([]byte(out), &listed); code != 0 || err != nil {
		t.Fatalf("audit list: exit %d %v %s %s", code, err, out, errOut)
	}
	cli := cliActor()
	want := fmt.Sprintf("[{%s resume queue/q} {%s pause queue/q} {oncall redrive dlq/%d}]", cli, cli, entry)
	if got := fmt.Sprint(listed.Items); got != want {
		t.Fatalf("audit list: %s, want %s", got, want)
	}
	_, body := apiAs(t, addr, "GET", "/v1/audit?actor=oncall", "Bearer "+grafana)
	if !strings.Contains(body, fmt.Sprintf(`"target":"dlq/%d"`, entry)) || strings.Contains(body, cli) {
		t.Fatalf("GET /v1/audit?actor=oncall: %s", body)
	}
	term(t, p, 30*time.Second)
	for _, secret := range []string{oncall, grafana} {
		if strings.Contains(p.log.String()+p.out.String()+out+errOut, secret) {
			t.Fatalf("a token appears in the process's output or the CLI's")
		}
	}
}
