// Package check validates what deploy/ ships with the tools its users run
// it through: the Helm chart with helm lint and helm template, every
// rendered object decoded strictly into the Kubernetes API types, and the
// Prometheus rules with promtool. It is a module of its own so that the
// product's go.mod never gains Kubernetes; both tools come from the Go
// module proxy, built once into the repository's bin/.
package check

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The tools' pinned versions: a new one builds into a new bin/ file.
const (
	helmPkg         = "helm.sh/helm/v3/cmd/helm"
	helmVersion     = "v3.22.0"
	promtoolPkg     = "github.com/prometheus/prometheus/cmd/promtool"
	promtoolVersion = "v0.316.0"
	// promtoolTags leave out every service discovery plugin, which
	// checking rules never needs: a third less to compile on a fresh
	// machine (Prometheus's own build tag).
	promtoolTags = "remove_all_sd"
)

// repoRoot is the Switchyard repository, two levels up from deploy/check.
const repoRoot = "../.."

// tool returns the path of bin/NAME-VERSION, building it from the Go
// module proxy the first time (go install pkg@version, each with the go.mod
// of its own release, so the versions it was tested with). The build goes
// to a temporary directory first and is renamed into place, so an
// interrupted build never leaves a broken binary that later runs trust.
//
// A tool that cannot be built fails the test, with the go command's output:
// skipping would let CI pass without checking anything.
func tool(t *testing.T, name, pkg, version, tags string) string {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join(repoRoot, "bin"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(bin, name+"-"+version)
	if _, err := os.Stat(path); err == nil {
		return path
	}
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(bin, ".build-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	start := time.Now()
	cmd := exec.Command("go", "install", "-tags="+tags, pkg+"@"+version)
	cmd.Env = append(os.Environ(), "GOBIN="+tmp)
	cmd.Dir = tmp // outside any module: pkg@version builds with its own go.mod
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s cannot be built from the Go module proxy (go install %s@%s): %v\n%s",
			name, version, pkg, version, err, out)
	}
	if err := os.Rename(filepath.Join(tmp, filepath.Base(pkg)), path); err != nil {
		t.Fatal(err)
	}
	t.Logf("built %s %s into %s in %s", name, version, path, time.Since(start).Round(time.Second))
	return path
}

// run runs a tool and returns its standard output; a failure fails the
// test with both outputs.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, errOut, err := runErr(name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(name), strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// runErr runs a tool and returns its outputs and error, for the cases that
// must fail.
func runErr(name string, args ...string) (stdout, stderr string, err error) {
	var o, e bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}
