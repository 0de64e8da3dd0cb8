package admin

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

// The served document and the server agree: every documented operation
// is routed (no 404 "no such endpoint", no 405), and every answer to it
// has a status the document lists, a cross-origin POST's 403 included.
func TestOpenAPIMatchesServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	doc := decode[struct {
		Paths map[string]map[string]struct {
			Responses map[string]any `json:"responses"`
		} `json:"paths"`
	}](t, e.get(t, "/v1/openapi.json").must(t, http.StatusOK))
	if len(doc.Paths) < 10 {
		t.Fatalf("only %d paths documented", len(doc.Paths))
	}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			concrete := strings.NewReplacer("{id}", "1", "{queue}", "bulk", "{name}", "orders").Replace(path)
			r := e.do(t, strings.ToUpper(method), concrete, nil, "")
			if r.status == http.StatusMethodNotAllowed || strings.Contains(string(r.body), "no such endpoint") {
				t.Errorf("%s %s is documented but not routed: %d %s", method, path, r.status, r.body)
				continue
			}
			if _, ok := op.Responses[strconv.Itoa(r.status)]; !ok {
				t.Errorf("%s %s answered %d, not among its documented responses", method, path, r.status)
			}
			// A POST from another site's page is refused, whatever the
			// endpoint: its 403 is one of its answers too.
			if method == "post" {
				r := e.send(t, "POST", concrete, "", "Origin", "http://evil.example")
				if _, ok := op.Responses[strconv.Itoa(r.status)]; !ok || r.status != http.StatusForbidden {
					t.Errorf("%s %s from another origin answered %d (documented: %t), want a documented 403", method, path, r.status, ok)
				}
			}
		}
	}
}

// The audit actions are listed in three places a reader meets: the
// store's AuditActions, the document's enums of them, and the console's
// action filter. They say the same.
func TestAuditActionsAgreeEverywhere(t *testing.T) {
	t.Parallel()
	want := strings.Join(pgstore.AuditActions, ",")
	var walk func(v any)
	enums := 0
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if list, ok := v["enum"].([]any); ok && slices.Contains(list, any(pgstore.AuditRedrive)) {
				var got []string
				for _, a := range list {
					if a != "" {
						got = append(got, a.(string))
					}
				}
				if enums++; strings.Join(got, ",") != want {
					t.Errorf("openapi.json lists the audit actions %v, want %s", got, want)
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	var doc any
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatal(err)
	}
	walk(doc)
	if enums == 0 {
		t.Error("openapi.json has no enum of the audit actions")
	}
	js, err := ui.ReadFile("ui/app.js")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`const auditActions = \[""((?:, "[a-z_]+")*)\];`).FindSubmatch(js)
	if m == nil {
		t.Fatal("ui/app.js: no auditActions list")
	}
	if got := strings.ReplaceAll(strings.TrimPrefix(string(m[1]), ", "), `", "`, ","); strings.Trim(got, `"`) != want {
		t.Errorf("the console's action filter offers %s, want %s", m[1], want)
	}
}
