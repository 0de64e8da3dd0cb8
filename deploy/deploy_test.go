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
	"strconv"
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
			return fs.SkipDir // Go templates, not YAML: deploy/check renders and checks them
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
	for file, docs := range kubeObjects(t) {
		for _, d := range docs {
			if d["apiVersion"] == nil || d["kind"] == nil || d["metadata"] == nil {
				t.Errorf("%s: kubernetes object without apiVersion/kind/metadata: %v", file, d)
			}
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
	for _, docs := range kubeObjects(t) {
		for _, d := range docs {
			if d["kind"] == "ConfigMap" {
				configs["kubernetes"] = []byte(d["data"].(map[string]any)["switchyard.yaml"].(string))
			}
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

// kubeObjects is every object of deploy/kubernetes/*.yaml, by file.
func kubeObjects(t *testing.T) map[string][]map[string]any {
	t.Helper()
	files, _ := filepath.Glob("kubernetes/*.yaml")
	objs := map[string][]map[string]any{}
	for _, f := range files {
		objs[filepath.Base(f)] = yamlDocs(t, f)
	}
	return objs
}

// dig walks maps and lists: dig(o, "spec", "template", 0) and so on.
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// secretKey is the Secret key a container's variable comes from, "" when
// it has none.
func secretKey(c any, name string) string {
	env, _ := dig(c, "env").([]any)
	for _, e := range env {
		if dig(e, "name") == name {
			k, _ := dig(e, "valueFrom", "secretKeyRef", "key").(string)
			return k
		}
	}
	return ""
}

// The plain manifest migrates before the Deployment changes, on install
// and on every upgrade: the migration is a Job of its own file, applied
// (after deleting the previous one: a Job's pod template cannot be
// changed) and waited for before switchyard.yaml, as its README says.
// Not an initContainer: every pod start would run migrate, an old
// ReplicaSet's pods too (restarted during a rollout, or after a rollout
// undo), and an older migrate puts back its own functions.sql over a
// newer schema. Not in the Deployment's file: one apply starts the new
// pods beside a migration still running, and a finished Job of the same
// name is never run again, so an upgrade never migrated.
func TestKubernetesMigrationOrder(t *testing.T) {
	objs := kubeObjects(t)
	var deploy, job map[string]any
	for file, docs := range objs {
		for _, d := range docs {
			switch {
			case d["kind"] == "Deployment" && file == "switchyard.yaml":
				deploy = d
			case d["kind"] == "Job" && file == "migrate.yaml":
				job = d
			case d["kind"] == "Job":
				t.Errorf("%s: a migration Job beside what it must come before; it belongs alone in migrate.yaml", file)
			}
		}
	}
	if deploy == nil || job == nil {
		t.Fatalf("want the Deployment in kubernetes/switchyard.yaml (%v) and the migration Job in kubernetes/migrate.yaml (%v)", deploy != nil, job != nil)
	}
	if len(objs["migrate.yaml"]) != 1 {
		t.Errorf("migrate.yaml: %d objects, want the Job alone (applying it must change nothing else)", len(objs["migrate.yaml"]))
	}
	pod := dig(deploy, "spec", "template", "spec")
	if inits, _ := dig(pod, "initContainers").([]any); len(inits) > 0 {
		t.Errorf("the Deployment has initContainers %v: the Job migrates, once, before it", inits)
	}
	run := dig(pod, "containers", 0)
	jpod := dig(job, "spec", "template", "spec")
	mig := dig(jpod, "containers", 0)

	// The same build and the same config file as the pods.
	if dig(mig, "image") != dig(run, "image") {
		t.Errorf("the migration runs %v, the pods %v", dig(mig, "image"), dig(run, "image"))
	}
	args, _ := dig(mig, "args").([]any)
	runArgs, _ := dig(run, "args").([]any)
	if len(args) < 3 || args[0] != "migrate" || args[1] != "--config" || len(runArgs) < 3 || args[2] != runArgs[2] {
		t.Errorf("migration args %v, want migrate --config with the pods' file (%v)", args, runArgs)
	}
	configMap := func(pod any) string {
		vols, _ := dig(pod, "volumes").([]any)
		for _, v := range vols {
			if n, ok := dig(v, "configMap", "name").(string); ok {
				return n
			}
		}
		return ""
	}
	if cm := configMap(jpod); cm == "" || cm != configMap(pod) {
		t.Errorf("the migration mounts ConfigMap %q, the pods %q", cm, configMap(pod))
	}
	var cmFile string
	for file, docs := range objs {
		for _, d := range docs {
			if d["kind"] == "ConfigMap" && dig(d, "metadata", "name") == configMap(pod) {
				cmFile = file
			}
		}
	}
	if cmFile != "config.yaml" {
		t.Errorf("ConfigMap %s is in %q, want config.yaml: applied before the migration, which must read the new config", configMap(pod), cmFile)
	}

	// The schema owner migrates; the pods run as the runtime role; the
	// migration serves nothing and gets no token.
	if k := secretKey(mig, config.EnvDatabaseURL); k != "migrate-database-url" {
		t.Errorf("migration %s from key %q, want migrate-database-url", config.EnvDatabaseURL, k)
	}
	if k := secretKey(run, config.EnvDatabaseURL); k != "database-url" {
		t.Errorf("pods' %s from key %q, want database-url", config.EnvDatabaseURL, k)
	}
	if secretKey(mig, config.EnvAdminToken) != "" {
		t.Error("the migration gets the admin token it does not need")
	}
	deadline, _ := dig(job, "spec", "activeDeadlineSeconds").(int)
	if deadline <= 0 || dig(jpod, "restartPolicy") != "OnFailure" {
		t.Errorf("migration Job: activeDeadlineSeconds %v, restartPolicy %v: want a deadline, and OnFailure", dig(job, "spec", "activeDeadlineSeconds"), dig(jpod, "restartPolicy"))
	}

	// The README's steps, in this order, name these files and this Job,
	// and wait longer than the Job may run.
	b, err := os.ReadFile("kubernetes/README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	name, _ := dig(job, "metadata", "name").(string)
	steps := []string{
		"kubectl apply -f deploy/kubernetes/config.yaml",
		"kubectl delete job " + name + " --ignore-not-found",
		"kubectl apply -f deploy/kubernetes/migrate.yaml",
		"kubectl wait --for=condition=complete job/" + name,
		"kubectl apply -f deploy/kubernetes/switchyard.yaml",
	}
	at := 0
	for _, s := range steps {
		i := strings.Index(readme[at:], s)
		if i < 0 {
			t.Fatalf("kubernetes/README.md: no step %q after the previous ones (%q)", s, steps)
		}
		at += i + len(s)
	}
	m := regexp.MustCompile(`kubectl wait --for=condition=complete job/\S+ --timeout=(\d+)m`).FindStringSubmatch(readme)
	if m == nil {
		t.Fatal("kubernetes/README.md: the wait has no --timeout in minutes")
	}
	if mins, _ := strconv.Atoi(m[1]); mins*60 <= deadline {
		t.Errorf("kubernetes/README.md waits %dm, not above the Job's activeDeadlineSeconds %d", mins, deadline)
	}
}
