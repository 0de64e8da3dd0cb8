package check

import (
	"path/filepath"
	"strings"
	"testing"
)

var alerts = filepath.Join(repoRoot, "deploy", "prometheus", "alerts.yaml")

// promtool check rules: the alerts parse, their expressions are valid
// PromQL and their templates render; promtool test rules: two of them fire
// on the series that should fire them, and not before.
func TestPrometheusRules(t *testing.T) {
	promtool := tool(t, "promtool", promtoolPkg, promtoolVersion, promtoolTags)
	out := run(t, promtool, "check", "rules", alerts)
	if !strings.Contains(out, "SUCCESS: 6 rules found") {
		t.Errorf("promtool check rules %s:\n%s\nwant its 6 rules found", alerts, out)
	}
	out = run(t, promtool, "test", "rules", filepath.Join("testdata", "alerts_test.yaml"))
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules:\n%s", out)
	}
}
