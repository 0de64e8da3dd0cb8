package admin

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// The served document and the server agree: every documented operation
// is routed (no 404 "no such endpoint", no 405), and every answer to it
// has a status the document lists.
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
		}
	}
}
