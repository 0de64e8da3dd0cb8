// Package deploy holds the files users deploy Switchyard with: local
// service scripts (local/), compose and Kubernetes manifests, Prometheus
// alerts and the container build. No engine runs here, so this test is
// their validation: every YAML parses, every Switchyard config in them is
// accepted by the real config loader, and every metric an alert uses is
// one the engine exports.
package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/metrics"
)

func yamlDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var d map[string]any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		docs = append(docs, d)
	}
}

func TestManifestsParse(t *testing.T) {
	n := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && path == filepath.Join("helm", "switchyard", "templates") {
			return fs.SkipDir // Go templates, not YAML: deploy/helm/check renders and checks them
		}
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".yaml") {
			yamlDocs(t, path)
			n++
		}
		return err
	})
	if err != nil || n < 4 {
		t.Fatalf("walked %d YAML files: %v", n, err)
	}
	for _, d := range yamlDocs(t, "kubernetes/switchyard.yaml") {
		if d["apiVersion"] == nil || d["kind"] == nil || d["metadata"] == nil {
			t.Errorf("kubernetes object without apiVersion/kind/metadata: %v", d)
		}
	}
	services, _ := yamlDocs(t, "compose/compose.yaml")[0]["services"].(map[string]any)
	for _, want := range []string{"kafka", "postgres", "migrate", "switchyard"} {
		if services[want] == nil {
			t.Errorf("compose: no service %q", want)
		}
	}
}

// The Switchyard configs shipped in the manifests load as they would in
// production, with secrets from the environment.
func TestShippedConfigsLoad(t *testing.T) {
	env := map[string]string{
		config.EnvDatabaseURL:  "postgres://u:p@db:5432/switchyard",
		config.EnvKafkaBrokers: "kafka:9092",
		config.EnvAdminToken:   "token",
	}
	configs := map[string][]byte{}
	b, err := os.ReadFile("compose/switchyard.yaml")
	if err != nil {
		t.Fatal(err)
	}
	configs["compose"] = b
	for _, d := range yamlDocs(t, "kubernetes/switchyard.yaml") {
		if d["kind"] == "ConfigMap" {
			configs["kubernetes"] = []byte(d["data"].(map[string]any)["switchyard.yaml"].(string))
		}
	}
	if len(configs) != 2 {
		t.Fatalf("found configs %v", configs)
	}
	for name, c := range configs {
		if _, err := config.Parse(c, func(k string) string { return env[k] }); err != nil {
			t.Errorf("%s config: %v", name, err)
		}
	}
}

func TestAlertsUseExportedMetrics(t *testing.T) {
	exported := map[string]bool{}
	for _, name := range metrics.Names() {
		exported[name] = true
	}
	// cmd/switchyard's TestMetricsOfARealProcess checks the same names
	// against a real process's scrape.
	for _, file := range []string{"prometheus/alerts.yaml", "grafana/switchyard.json"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		used := regexp.MustCompile(`switchyard_[a-z_]+`).FindAllString(string(b), -1)
		if len(used) == 0 {
			t.Fatalf("no metrics used in %s", file)
		}
		for _, name := range used {
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
			if !exported[base] {
				t.Errorf("%s uses %s, which the engine does not export", file, name)
			}
		}
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	b, err := os.ReadFile("grafana/switchyard.json")
	if err == nil {
		err = json.Unmarshal(b, &dash)
	}
	if err != nil || len(dash.Panels) < 10 {
		t.Fatalf("grafana/switchyard.json: %d panels, %v", len(dash.Panels), err)
	}
	// Every process reads these from Postgres and exports the same
	// fleet-wide value: a sum over the processes multiplies it by their
	// number.
	fleetWide := regexp.MustCompile(`sum by \([^)]*\) \((switchyard_queue_jobs|switchyard_dlq_entries|switchyard_lanes_blocked|switchyard_queue_oldest_[a-z_]+)\)`)
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 || p.Targets[0].Expr == "" {
			t.Errorf("panel %q has no expression", p.Title)
		}
		for _, tg := range p.Targets {
			if m := fleetWide.FindStringSubmatch(tg.Expr); m != nil {
				t.Errorf("panel %q sums %s over the processes, each of which exports the fleet's value: use max", p.Title, m[1])
			}
		}
	}
}

// The image is pinned, never :latest: a restarted or rescheduled pod of a
// :latest image pulls whatever was pushed last, which may need a schema
// the migration never made, and the chart's migration Job and pods could
// run two different builds. The chart is released with the binary, so its
// version is the release's number and its appVersion the release's tag
// (the version `switchyard version` prints for a build of that tag), and
// every other place that names the image's tag names the same one.
func TestImageVersionPinned(t *testing.T) {
	b, err := os.ReadFile("helm/switchyard/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		Version    string `yaml:"version"`
		AppVersion string `yaml:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &chart); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(chart.AppVersion) {
		t.Fatalf("Chart.yaml appVersion %q: want a release tag (vX.Y.Z), the image tag the chart deploys by default", chart.AppVersion)
	}
	if chart.AppVersion != "v"+chart.Version {
		t.Errorf("Chart.yaml appVersion %s, version %s: the chart is released with the binary, want appVersion v%s", chart.AppVersion, chart.Version, chart.Version)
	}
	want := "switchyard:" + chart.AppVersion
	manifests, _ := filepath.Glob("kubernetes/*.yaml")
	images := 0
	for _, m := range manifests {
		b, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		for _, img := range regexp.MustCompile(`(?m)^\s*image:\s*(\S+)`).FindAllStringSubmatch(string(b), -1) {
			images++
			if img[1] != want {
				t.Errorf("%s: image %s, want %s (the chart's appVersion)", m, img[1], want)
			}
		}
	}
	if images == 0 {
		t.Error("kubernetes/*.yaml: no image found")
	}
	df, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(df), "-t "+want+" ") {
		t.Errorf("Dockerfile: its build line does not tag the image %s", want)
	}
}

// No Deployment uses static Kafka group membership. A static member does
// not leave the group when it stops (that is the point: a restart with
// the same id takes its partitions back without a rebalance), but a
// Deployment's replacement pod has a new name, so an id from the pod's
// name makes it a new member, and the group holds the old member's
// partitions, unconsumed, until kafka.session_timeout expires: for every
// pod of every rollout. Nor does a shared config file set one id for
// every replica, which would fence them out of the group in turn.
func TestNoStaticMembershipOnADeployment(t *testing.T) {
	manifests, _ := filepath.Glob("kubernetes/*.yaml")
	for _, m := range manifests {
		for _, d := range yamlDocs(t, m) {
			if d["kind"] == "ConfigMap" {
				data, _ := d["data"].(map[string]any)
				if c, _ := data["switchyard.yaml"].(string); c != "" {
					cfg, err := config.Parse([]byte(c), func(k string) string {
						return map[string]string{config.EnvDatabaseURL: "postgres://u@db/s", config.EnvKafkaBrokers: "kafka:9092"}[k]
					})
					if err == nil && cfg.Kafka.InstanceID != "" {
						t.Errorf("%s: the shared config sets kafka.instance_id %q for every replica", m, cfg.Kafka.InstanceID)
					}
				}
			}
			if d["kind"] != "Deployment" {
				continue
			}
			b, err := yaml.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), config.EnvKafkaInstanceID) {
				t.Errorf("%s: Deployment sets %s: its replaced pods get new names, so the group waits out session_timeout for each old member", m, config.EnvKafkaInstanceID)
			}
		}
	}
}
