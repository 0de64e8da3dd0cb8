package testenv

import (
	"strings"
	"testing"
)

// Schemathesis returns the schemathesis executable, installed (once, in a
// venv under the cache) by deploy/local/schemathesis.sh from PyPI, or
// fails the test with the script's output.
func Schemathesis(t testing.TB) string {
	t.Helper()
	out, err := runScript(nil, script(t, "schemathesis.sh"), "ensure")
	if err != nil {
		t.Fatalf("install schemathesis: %v", err)
	}
	return strings.TrimSpace(out)
}
