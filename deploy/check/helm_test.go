package check

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/switchyard-dev/switchyard/config"
	"github.com/switchyard-dev/switchyard/internal/metrics"
)

var chart = filepath.Join(repoRoot, "deploy", "helm", "switchyard")

// scaledObject is KEDA's keda.sh/v1alpha1 ScaledObject, as much of it as
// the chart renders. KEDA's own Go module (github.com/kedacore/keda/v2)
// is the whole operator, scalers and cloud SDKs included, far too much to
// build for a type, so these fields follow its apis/keda/v1alpha1
// (ScaledObjectSpec, ScaleTriggers); a field the chart renders that is
// not here fails the strict decoding, as an unknown one would in KEDA.
type scaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ScaleTargetRef struct {
			APIVersion string `json:"apiVersion,omitempty"`
			Kind       string `json:"kind,omitempty"`
			Name       string `json:"name"`
		} `json:"scaleTargetRef"`
		PollingInterval *int32 `json:"pollingInterval,omitempty"`
		CooldownPeriod  *int32 `json:"cooldownPeriod,omitempty"`
		MinReplicaCount *int32 `json:"minReplicaCount,omitempty"`
		MaxReplicaCount *int32 `json:"maxReplicaCount,omitempty"`
		Triggers        []struct {
			Type              string            `json:"type"`
			Name              string            `json:"name,omitempty"`
			Metadata          map[string]string `json:"metadata"`
			AuthenticationRef *struct {
				Name string `json:"name"`
				Kind string `json:"kind,omitempty"`
			} `json:"authenticationRef,omitempty"`
		} `json:"triggers"`
	} `json:"spec"`
}

// newObject is the Go type of each apiVersion/kind the chart may render;
// any other kind fails the test.
func newObject(apiVersion, kind string) any {
	switch apiVersion + "/" + kind {
	case "v1/ConfigMap":
		return new(corev1.ConfigMap)
	case "v1/Service":
		return new(corev1.Service)
	case "v1/ServiceAccount":
		return new(corev1.ServiceAccount)
	case "apps/v1/Deployment":
		return new(appsv1.Deployment)
	case "apps/v1/StatefulSet":
		return new(appsv1.StatefulSet)
	case "batch/v1/Job":
		return new(batchv1.Job)
	case "policy/v1/PodDisruptionBudget":
		return new(policyv1.PodDisruptionBudget)
	case "monitoring.coreos.com/v1/ServiceMonitor":
		return new(monitoringv1.ServiceMonitor)
	case "keda.sh/v1alpha1/ScaledObject":
		return new(scaledObject)
	}
	return nil
}

// decodeAll decodes every YAML document of a manifest strictly (an unknown
// or duplicated field is an error) into its Kubernetes Go type.
func decodeAll(t *testing.T, name string, r io.Reader) []any {
	t.Helper()
	var objs []any
	rd := utilyaml.NewYAMLReader(bufio.NewReader(r))
	for {
		doc, err := rd.Read()
		if err == io.EOF {
			return objs
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, doc)
		}
		if tm.APIVersion == "" && tm.Kind == "" {
			continue // a document of comments only
		}
		obj := newObject(tm.APIVersion, tm.Kind)
		if obj == nil {
			t.Errorf("%s: %s %s: a kind this test does not know; add its Go type", name, tm.APIVersion, tm.Kind)
			continue
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			t.Errorf("%s: %s %s: %v\n%s", name, tm.APIVersion, tm.Kind, err, doc)
			continue
		}
		objs = append(objs, obj)
	}
}

// workload is what runs `switchyard run`: a Deployment or a StatefulSet.
type workload struct {
	kind, name string
	replicas   *int32
	selector   *metav1.LabelSelector
	template   corev1.PodTemplateSpec
}

// rendered is one helm template's objects, by kind.
type rendered struct {
	configMaps     []*corev1.ConfigMap
	pods           workload
	deployment     *appsv1.Deployment
	statefulSet    *appsv1.StatefulSet
	job            *batchv1.Job
	service        *corev1.Service
	serviceAccount *corev1.ServiceAccount
	pdb            *policyv1.PodDisruptionBudget
	serviceMonitor *monitoringv1.ServiceMonitor
	scaledObject   *scaledObject
}

func helmEnv(t *testing.T) string {
	t.Helper()
	helm := tool(t, "helm", helmPkg, helmVersion, "")
	home := t.TempDir()
	for _, v := range []string{"HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"} {
		t.Setenv(v, filepath.Join(home, v))
	}
	return helm
}

func template(t *testing.T, helm string, args ...string) rendered {
	t.Helper()
	out := run(t, helm, append([]string{"template", "sy", chart, "--namespace", "jobs"}, args...)...)
	var r rendered
	for _, o := range decodeAll(t, "helm template "+strings.Join(args, " "), strings.NewReader(out)) {
		switch o := o.(type) {
		case *corev1.ConfigMap:
			r.configMaps = append(r.configMaps, o)
		case *appsv1.Deployment:
			r.deployment = o
			r.pods = workload{"Deployment", o.Name, o.Spec.Replicas, o.Spec.Selector, o.Spec.Template}
		case *appsv1.StatefulSet:
			r.statefulSet = o
			r.pods = workload{"StatefulSet", o.Name, o.Spec.Replicas, o.Spec.Selector, o.Spec.Template}
		case *batchv1.Job:
			r.job = o
		case *corev1.Service:
			r.service = o
		case *corev1.ServiceAccount:
			r.serviceAccount = o
		case *policyv1.PodDisruptionBudget:
			r.pdb = o
		case *monitoringv1.ServiceMonitor:
			r.serviceMonitor = o
		case *scaledObject:
			r.scaledObject = o
		}
	}
	if (r.deployment == nil) == (r.statefulSet == nil) || r.service == nil {
		t.Fatalf("helm template %s rendered not one Deployment or StatefulSet, or no Service", strings.Join(args, " "))
	}
	return r
}

// configMap returns the ConfigMap of that name.
func (r rendered) configMap(t *testing.T, name string) *corev1.ConfigMap {
	t.Helper()
	for _, c := range r.configMaps {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no ConfigMap %s", name)
	return nil
}

// loadConfig runs a rendered switchyard.yaml through the real config
// loader, with the environment given (what the pod's env references).
func loadConfig(t *testing.T, cm *corev1.ConfigMap, env map[string]string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(cm.Data["switchyard.yaml"]), func(k string) string { return env[k] })
	if err != nil {
		t.Fatalf("ConfigMap %s: the config loader refuses it: %v\n%s", cm.Name, err, cm.Data["switchyard.yaml"])
	}
	return cfg
}

// secretVars is every variable of the container whose value is a secret:
// Switchyard's own and each named token's token_env.
func secretVars(cfg *config.Config) []string {
	vars := []string{config.EnvDatabaseURL, config.EnvKafkaBrokers, config.EnvAdminToken, config.EnvKafkaSASLPassword}
	for _, tok := range cfg.Admin.Tokens {
		vars = append(vars, tok.TokenEnv)
	}
	return vars
}

// envOf returns the container's environment by name, failing on a secret
// given as a value rather than by reference to a Secret.
func envOf(t *testing.T, c corev1.Container, secrets []string) map[string]corev1.EnvVar {
	t.Helper()
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
		if slices.Contains(secrets, e.Name) && (e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
			t.Errorf("container %s: %s is not a secretKeyRef: %+v", c.Name, e.Name, e)
		}
	}
	if len(c.EnvFrom) > 0 {
		t.Errorf("container %s: envFrom %+v: the chart names each variable", c.Name, c.EnvFrom)
	}
	return env
}

// checkNonRoot: non-root, no privilege escalation, read-only root, no
// capabilities.
func checkNonRoot(t *testing.T, what string, pod corev1.PodSpec) {
	t.Helper()
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("%s: pod securityContext %+v: want runAsNonRoot and a non-zero runAsUser", what, psc)
	}
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("%s: container %s has no securityContext", what, c.Name)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("%s: container %s may escalate privileges", what, c.Name)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("%s: container %s: root filesystem not read-only", what, c.Name)
		case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0:
			t.Errorf("%s: container %s: capabilities %+v: want drop ALL, add none", what, c.Name, sc.Capabilities)
		case sc.Privileged != nil && *sc.Privileged:
			t.Errorf("%s: container %s is privileged", what, c.Name)
		}
	}
}

// onVolume says whether path lies under one of the container's mounts of
// a volume of the pod.
func onVolume(pod corev1.PodSpec, c corev1.Container, path string) bool {
	for _, m := range c.VolumeMounts {
		if !strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
			continue
		}
		if slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) {
			return true
		}
	}
	return false
}

func mountPaths(c corev1.Container) []string {
	var paths []string
	for _, m := range c.VolumeMounts {
		paths = append(paths, m.Name+":"+m.MountPath)
	}
	return paths
}

func selects(t *testing.T, what string, sel map[string]string, podLabels map[string]string) {
	t.Helper()
	if len(sel) == 0 || !labels.SelectorFromSet(sel).Matches(labels.Set(podLabels)) {
		t.Errorf("%s: selector %v does not select the pods (%v)", what, sel, podLabels)
	}
}

// checkPromises asserts what the chart promises on every render and
// returns the loaded config.
func checkPromises(t *testing.T, r rendered, extraEnv map[string]string) *config.Config {
	t.Helper()
	d := r.pods
	pod := d.template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%s: %d containers", d.kind, len(pod.Containers))
	}
	c := pod.Containers[0]
	if want := []string{"run", "--config", "/etc/switchyard/switchyard.yaml"}; !slices.Equal(c.Args, want) {
		t.Errorf("%s args %q, want %q", d.kind, c.Args, want)
	}

	// The config the pods read loads with what their env references.
	env := map[string]string{
		config.EnvDatabaseURL:  "postgres://switchyard_runtime:p@db:5432/switchyard",
		config.EnvKafkaBrokers: "kafka-0:9092,kafka-1:9092",
	}
	for k, v := range extraEnv {
		env[k] = v
	}
	envWithToken := map[string]string{config.EnvAdminToken: "operator-token"}
	for k, v := range env {
		envWithToken[k] = v
	}
	cfgName := d.name
	var mounted bool
	for _, v := range pod.Volumes {
		if v.Name == "config" && v.ConfigMap != nil && v.ConfigMap.Name == cfgName {
			mounted = true
		}
	}
	if !mounted || !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "config" && m.MountPath == "/etc/switchyard" && m.ReadOnly
	}) {
		t.Errorf("%s does not mount ConfigMap %s read-only at /etc/switchyard: %+v %+v", d.kind, cfgName, pod.Volumes, c.VolumeMounts)
	}
	cfg := loadConfig(t, r.configMap(t, cfgName), envWithToken)

	// Every file the config names is on a volume the container mounts
	// (the image holds none of them): extraVolumes / extraVolumeMounts.
	var files []string
	if k := cfg.Kafka.TLS; k != nil {
		files = append(files, k.CAFile, k.CertFile, k.KeyFile)
	}
	if k := cfg.Kafka.SASL; k != nil {
		files = append(files, k.TokenFile)
	}
	for _, f := range files {
		if f != "" && !onVolume(pod, c, f) {
			t.Errorf("%s: the config names %s, which no volume of the container holds (mounts %v)", d.kind, f, mountPaths(c))
		}
	}

	// Secrets only by reference, never a Secret rendered by the chart.
	podEnv := envOf(t, c, secretVars(cfg))
	for _, v := range []string{config.EnvDatabaseURL, config.EnvKafkaBrokers} {
		if _, ok := podEnv[v]; !ok {
			t.Errorf("%s: no %s", d.kind, v)
		}
	}
	for _, tok := range cfg.Admin.Tokens {
		if _, ok := podEnv[tok.TokenEnv]; !ok {
			t.Errorf("%s: admin.tokens %s: no %s", d.kind, tok.Name, tok.TokenEnv)
		}
	}
	if _, ok := podEnv[config.EnvAdminToken]; !ok && len(cfg.Admin.Tokens) == 0 {
		t.Errorf("%s: neither %s nor admin.tokens: the server refuses a pod address without a token", d.kind, config.EnvAdminToken)
	}

	// Static group membership only where a pod keeps its name through its
	// replacement (a StatefulSet), the id being that name. A static member
	// does not leave the group when it stops: a Deployment's replacement
	// pod, under a new name, is a new member, and the group holds the old
	// member's partitions unconsumed until kafka.session_timeout expires,
	// for every pod of every rollout. Never a fixed id in the config file,
	// which every replica shares: they would fence each other out.
	if cfg.Kafka.InstanceID != "" {
		t.Errorf("the config file sets kafka.instance_id %q, which every replica reads", cfg.Kafka.InstanceID)
	}
	if e, ok := podEnv[config.EnvKafkaInstanceID]; ok {
		if d.kind != "StatefulSet" {
			t.Errorf("%s sets %s: its replaced pods get new names, so each is a new static member and the group waits out session_timeout for the old one", d.kind, config.EnvKafkaInstanceID)
		}
		if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
			t.Errorf("%s %+v: want the pod's name (fieldRef metadata.name)", config.EnvKafkaInstanceID, e)
		}
	}

	// Probes on the named port the config listens on.
	var port corev1.ContainerPort
	for _, p := range c.Ports {
		if p.Name == "http" {
			port = p
		}
	}
	if want := cfg.HTTP.Listen; !strings.HasSuffix(want, fmt.Sprintf(":%d", port.ContainerPort)) || strings.HasPrefix(want, "127.") {
		t.Errorf("container port %+v, config http.listen %s", port, want)
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "http" {
			t.Errorf("%s probe %+v: want GET %s on port http", p.name, p.probe, p.path)
		} else if p.probe.TimeoutSeconds < 3 {
			t.Errorf("%s probe timeout %ds: /readyz may take 2s", p.name, p.probe.TimeoutSeconds)
		}
	}

	// The kubelet's grace is above shutdown_grace: SIGKILL never lands on
	// a job still inside its grace period.
	grace := int64(math.Ceil(cfg.ShutdownGrace.D().Seconds()))
	if tg := pod.TerminationGracePeriodSeconds; tg == nil || *tg <= grace {
		t.Errorf("terminationGracePeriodSeconds %v is not above shutdown_grace %s", tg, cfg.ShutdownGrace)
	}

	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("%s resources %+v: want cpu and memory requests and a memory limit", d.kind, c.Resources)
	}
	checkNonRoot(t, d.kind, pod)
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("%s mounts a ServiceAccount token it never uses", d.kind)
	}
	selects(t, d.kind, d.selector.MatchLabels, d.template.Labels)
	selects(t, "Service", r.service.Spec.Selector, d.template.Labels)
	if r.serviceAccount != nil && r.serviceAccount.Name != pod.ServiceAccountName {
		t.Errorf("ServiceAccount %s, the pods run as %s", r.serviceAccount.Name, pod.ServiceAccountName)
	}
	for _, h := range []string{d.name, d.name + ".jobs", d.name + ".jobs.svc", d.name + ".jobs.svc.cluster.local"} {
		if !slices.Contains(cfg.HTTP.AllowedHosts, h) {
			t.Errorf("http.allowed_hosts %v lacks the Service's name %s", cfg.HTTP.AllowedHosts, h)
		}
	}

	// The PodDisruptionBudget keeps at least one process through a drain.
	if r.pdb == nil {
		t.Error("no PodDisruptionBudget")
	} else {
		selects(t, "PodDisruptionBudget", r.pdb.Spec.Selector.MatchLabels, d.template.Labels)
		// A pod that is not ready (an old one once the migration ran) can
		// go: counted against the budget, it held a drain until the
		// rollout ended.
		if p := r.pdb.Spec.UnhealthyPodEvictionPolicy; p == nil || *p != policyv1.AlwaysAllow {
			t.Errorf("the PodDisruptionBudget's unhealthyPodEvictionPolicy is %v, want AlwaysAllow", p)
		}
	}

	// The migration: a pre-install,pre-upgrade hook Job running migrate on
	// its own copy of the config, with the schema owner's URL and no token.
	j := r.job
	if j == nil {
		t.Fatal("no migration Job")
	}
	hooks := strings.Split(j.Annotations["helm.sh/hook"], ",")
	if !slices.Contains(hooks, "pre-install") || !slices.Contains(hooks, "pre-upgrade") || j.Annotations["helm.sh/hook-delete-policy"] == "" {
		t.Errorf("migration Job annotations %v: want hook pre-install,pre-upgrade and a hook-delete-policy", j.Annotations)
	}
	// Its pod is none of the pods': the Service would send it requests
	// (it serves nothing), the PodDisruptionBudget would count it, and a
	// Deployment whose selector matches pods it does not own misbehaves.
	for what, sel := range map[string]map[string]string{d.kind: d.selector.MatchLabels, "Service": r.service.Spec.Selector} {
		if labels.SelectorFromSet(sel).Matches(labels.Set(j.Spec.Template.Labels)) {
			t.Errorf("the %s's selector %v selects the migration Job's pod (%v)", what, sel, j.Spec.Template.Labels)
		}
	}
	if r.pdb != nil && labels.SelectorFromSet(r.pdb.Spec.Selector.MatchLabels).Matches(labels.Set(j.Spec.Template.Labels)) {
		t.Errorf("the PodDisruptionBudget's selector selects the migration Job's pod (%v)", j.Spec.Template.Labels)
	}
	jpod := j.Spec.Template.Spec
	jc := jpod.Containers[0]
	if len(jc.Args) < 3 || jc.Args[0] != "migrate" || jc.Args[1] != "--config" {
		t.Errorf("migration Job args %q", jc.Args)
	}
	checkNonRoot(t, "migration Job", jpod)
	jenv := envOf(t, jc, secretVars(cfg))
	if _, ok := jenv[config.EnvAdminToken]; ok {
		t.Error("the migration Job gets the admin token it does not need")
	}
	var jcm string
	for _, v := range jpod.Volumes {
		if v.Name == "config" && v.ConfigMap != nil {
			jcm = v.ConfigMap.Name
		}
	}
	mcm := r.configMap(t, jcm)
	cmWeight, _ := strconv.Atoi(mcm.Annotations["helm.sh/hook-weight"])
	jobWeight, _ := strconv.Atoi(j.Annotations["helm.sh/hook-weight"])
	if mcm.Annotations["helm.sh/hook"] != j.Annotations["helm.sh/hook"] || cmWeight >= jobWeight {
		t.Errorf("migration ConfigMap %s annotations %v: want a hook created before the Job", jcm, mcm.Annotations)
	}
	// With the Job's own variables only: no token, and no Kafka secret,
	// which migrate never needs.
	jvals := map[string]string{}
	for name := range jenv {
		jvals[name] = env[name]
	}
	mcfg := loadConfig(t, mcm, jvals)
	if mcfg.Postgres.Schema != cfg.Postgres.Schema || len(mcfg.Routes) != len(cfg.Routes) {
		t.Errorf("the migration's config (schema %s, %d routes) is not the pods' (schema %s, %d routes)",
			mcfg.Postgres.Schema, len(mcfg.Routes), cfg.Postgres.Schema, len(cfg.Routes))
	}
	return cfg
}

func TestHelmChart(t *testing.T) {
	helm := helmEnv(t)
	everything := filepath.Join("testdata", "everything-values.yaml")

	t.Run("lint", func(t *testing.T) {
		run(t, helm, "lint", "--strict", chart)
		run(t, helm, "lint", "--strict", chart, "-f", everything)
		run(t, helm, "lint", "--strict", chart, "--set", "workload=StatefulSet", "--set", "kafkaStaticMembership=true")
	})

	t.Run("defaults", func(t *testing.T) {
		r := template(t, helm)
		cfg := checkPromises(t, r, nil)
		if r.serviceMonitor != nil || r.scaledObject != nil {
			t.Error("ServiceMonitor or ScaledObject rendered while off")
		}
		if r.pods.replicas == nil || *r.pods.replicas < 2 {
			t.Errorf("replicas %v", r.pods.replicas)
		}
		// The schema owner's URL goes to the migration only.
		dbKey := func(c corev1.Container) string {
			for _, e := range c.Env {
				if e.Name == config.EnvDatabaseURL {
					return e.ValueFrom.SecretKeyRef.Key
				}
			}
			return ""
		}
		if pods, job := dbKey(r.pods.template.Spec.Containers[0]), dbKey(r.job.Spec.Template.Spec.Containers[0]); pods != "database-url" || job != "migrate-database-url" {
			t.Errorf("%s from key %q in the pods, %q in the migration: want database-url, migrate-database-url", config.EnvDatabaseURL, pods, job)
		}
		if tg := *r.pods.template.Spec.TerminationGracePeriodSeconds; cfg.ShutdownGrace.D().Seconds() != 30 || tg != 60 {
			t.Errorf("shutdown_grace %s, terminationGracePeriodSeconds %d: want 30s and 60", cfg.ShutdownGrace, tg)
		}
	})

	everythingEnv := map[string]string{
		"ONCALL_TOKEN": "oncall-token", "GRAFANA_TOKEN": "grafana-token",
		config.EnvKafkaSASLPassword: "sasl",
	}
	t.Run("everything", func(t *testing.T) {
		r := template(t, helm, "-f", everything)
		cfg := checkPromises(t, r, everythingEnv)
		if len(cfg.Admin.Tokens) != 2 || cfg.Kafka.SASL == nil || cfg.Kafka.TLS == nil {
			t.Errorf("tokens %+v, sasl %+v, tls %+v: the values file's are lost", cfg.Admin.Tokens, cfg.Kafka.SASL, cfg.Kafka.TLS)
		}
		// extraVolumes and extraVolumeMounts on the pods and on the
		// migration, which checks the Postgres URL's sslrootcert when it
		// loads the config.
		for what, pod := range map[string]corev1.PodSpec{"pods": r.pods.template.Spec, "migration": r.job.Spec.Template.Spec} {
			for _, f := range []string{"/etc/switchyard-tls/kafka/ca.pem", "/etc/switchyard-tls/postgres/ca.pem"} {
				if !onVolume(pod, pod.Containers[0], f) {
					t.Errorf("%s: %s is on no volume (mounts %v)", what, f, mountPaths(pod.Containers[0]))
				}
			}
		}
		if _, ok := cfg.Queues["default"]; ok {
			t.Error("the chart's example queue survives default: null")
		}
		if r.pods.replicas != nil {
			t.Errorf("replicas %d set while KEDA owns them", *r.pods.replicas)
		}
		if tg := *r.pods.template.Spec.TerminationGracePeriodSeconds; tg != 90+30 {
			t.Errorf("terminationGracePeriodSeconds %d for shutdown_grace 1m30s, want 120", tg)
		}

		sm := r.serviceMonitor
		if sm == nil {
			t.Fatal("no ServiceMonitor")
		}
		selects(t, "ServiceMonitor", sm.Spec.Selector.MatchLabels, r.service.Labels)
		if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "http" || sm.Spec.Endpoints[0].Path != "/metrics" {
			t.Errorf("ServiceMonitor endpoints %+v: want /metrics on port http", sm.Spec.Endpoints)
		}

		so := r.scaledObject
		if so == nil {
			t.Fatal("no ScaledObject")
		}
		if ref := so.Spec.ScaleTargetRef; ref.Kind != r.pods.kind || ref.Name != r.pods.name {
			t.Errorf("ScaledObject scales %+v, not the %s %s", ref, r.pods.kind, r.pods.name)
		}
		if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount < 1 {
			t.Errorf("ScaledObject minReplicaCount %v: ingest stops at zero", so.Spec.MinReplicaCount)
		}
		exported := metrics.Names()
		metricRe := regexp.MustCompile(`switchyard_[a-z_]+`)
		queues := map[string]bool{}
		for _, tr := range so.Spec.Triggers {
			q := tr.Metadata["query"]
			if tr.Type != "prometheus" || !strings.Contains(q, "switchyard_queue_oldest_runnable_age_seconds{") || tr.Metadata["threshold"] == "" {
				t.Errorf("trigger %+v: want a prometheus query on switchyard_queue_oldest_runnable_age_seconds with a threshold", tr)
			}
			if !strings.Contains(q, "unless max(switchyard_queue_paused{") {
				t.Errorf("trigger query %s: a paused queue's growing age would scale the Deployment up", q)
			}
			for _, m := range metricRe.FindAllString(q, -1) {
				if !slices.Contains(exported, m) {
					t.Errorf("trigger query %s: %s is not a metric the engine exports", q, m)
				}
			}
			for name := range cfg.Queues {
				if strings.Contains(q, fmt.Sprintf(`queue="%s"`, name)) {
					queues[name] = true
				}
			}
		}
		if len(queues) != 2 || len(so.Spec.Triggers) != 2 {
			t.Errorf("triggers cover queues %v of %d triggers, want interactive and bulk", queues, len(so.Spec.Triggers))
		}
	})

	// The pods and the migration run one image: by default the chart's
	// appVersion (a release tag, never latest), or image.tag.
	t.Run("image", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join(chart, "Chart.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			AppVersion string `json:"appVersion"`
		}
		if err := yaml.Unmarshal(b, &meta); err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(meta.AppVersion) {
			t.Errorf("Chart.yaml appVersion %q: want the release tag the chart deploys (vX.Y.Z), never latest", meta.AppVersion)
		}
		long := "_build." + strings.Repeat("x", 55) + ".-z" // a valid tag of 65 characters
		digest := "sha256:" + strings.Repeat("0a", 32)
		for _, c := range []struct {
			args          []string
			want, version string
		}{
			{nil, "switchyard:" + meta.AppVersion, meta.AppVersion},
			{[]string{"--set", "image.tag=v9.8.7"}, "switchyard:v9.8.7", "v9.8.7"},
			{[]string{"--set", "image.tag=2"}, "switchyard:2", "2"}, // --set reads 2 as a number
			{[]string{"-f", everything}, "registry.example.com/switchyard:v1.2.3", "v1.2.3"},
			// The label is the tag made a label value: at most 63
			// characters, alphanumeric at both ends.
			{[]string{"--set", "image.tag=" + long}, "switchyard:" + long, "build." + strings.Repeat("x", 55)},
			{[]string{"--set", "image.tag=v1.2.4@" + digest}, "switchyard:v1.2.4@" + digest, "v1.2.4"},
		} {
			r := template(t, helm, c.args...)
			pods := r.pods.template.Spec.Containers[0].Image
			job := r.job.Spec.Template.Spec.Containers[0].Image
			if pods != c.want || job != c.want {
				t.Errorf("helm template %s: image %q in the pods, %q in the migration, want %q", strings.Join(c.args, " "), pods, job, c.want)
			}
			// The version label says what runs, whatever set it.
			for what, l := range map[string]map[string]string{
				"pods": r.pods.template.Labels, "migration Job": r.job.Labels, "Service": r.service.Labels,
			} {
				if v := l["app.kubernetes.io/version"]; v != c.version {
					t.Errorf("helm template %s: app.kubernetes.io/version %q on the %s, want %q", strings.Join(c.args, " "), v, what, c.version)
				}
			}
		}
	})

	// Static membership is off on the default Deployment, and on a
	// StatefulSet takes the pod's name, which its replacement keeps.
	t.Run("static membership", func(t *testing.T) {
		r := template(t, helm)
		if r.pods.kind != "Deployment" {
			t.Errorf("the default workload is a %s, want a Deployment", r.pods.kind)
		}
		if _, ok := envOf(t, r.pods.template.Spec.Containers[0], nil)[config.EnvKafkaInstanceID]; ok {
			t.Errorf("the default Deployment sets %s", config.EnvKafkaInstanceID)
		}

		r = template(t, helm, "--set", "workload=StatefulSet", "--set", "kafkaStaticMembership=true")
		checkPromises(t, r, nil)
		ss := r.statefulSet
		if ss == nil {
			t.Fatal("workload=StatefulSet rendered no StatefulSet")
		}
		if e, ok := envOf(t, ss.Spec.Template.Spec.Containers[0], nil)[config.EnvKafkaInstanceID]; !ok || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil {
			t.Errorf("StatefulSet with kafkaStaticMembership: %s %+v, want the pod's name", config.EnvKafkaInstanceID, e)
		}
		if ss.Spec.ServiceName != r.service.Name || ss.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
			t.Errorf("StatefulSet serviceName %q, podManagementPolicy %q: want the Service %s, Parallel", ss.Spec.ServiceName, ss.Spec.PodManagementPolicy, r.service.Name)
		}
		if ss.Spec.Replicas == nil || *ss.Spec.Replicas < 2 {
			t.Errorf("StatefulSet replicas %v", ss.Spec.Replicas)
		}

		// A StatefulSet without static membership sets no id.
		r = template(t, helm, "--set", "workload=StatefulSet")
		checkPromises(t, r, nil)
		if _, ok := envOf(t, r.pods.template.Spec.Containers[0], nil)[config.EnvKafkaInstanceID]; ok {
			t.Errorf("a StatefulSet without kafkaStaticMembership sets %s", config.EnvKafkaInstanceID)
		}

		// KEDA scales whichever workload runs the pods.
		r = template(t, helm, "-f", everything, "--set", "workload=StatefulSet", "--set", "kafkaStaticMembership=true")
		checkPromises(t, r, everythingEnv)
		if r.scaledObject == nil || r.scaledObject.Spec.ScaleTargetRef.Kind != "StatefulSet" || r.scaledObject.Spec.ScaleTargetRef.Name != r.pods.name {
			t.Errorf("ScaledObject %+v: want it to scale the StatefulSet %s", r.scaledObject, r.pods.name)
		}
		if r.pods.replicas != nil {
			t.Errorf("StatefulSet replicas %d set while KEDA owns them", *r.pods.replicas)
		}
	})

	// shutdown_grace in every unit Go reads moves the kubelet's grace with it.
	t.Run("shutdown_grace", func(t *testing.T) {
		for grace, want := range map[string]int64{"2m": 150, "1.5h": 5430, "2500ms": 33, "45s": 75} {
			r := template(t, helm, "--set", "config.shutdown_grace="+grace)
			checkPromises(t, r, nil)
			if tg := *r.pods.template.Spec.TerminationGracePeriodSeconds; tg != want {
				t.Errorf("shutdown_grace %s: terminationGracePeriodSeconds %d, want %d", grace, tg, want)
			}
		}
		r := template(t, helm, "--set", "config.shutdown_grace=2m", "--set", "terminationGracePeriodSeconds=200")
		if tg := *r.pods.template.Spec.TerminationGracePeriodSeconds; tg != 200 {
			t.Errorf("terminationGracePeriodSeconds %d, want the 200 set", tg)
		}
	})

	// What the chart refuses to render, and says why.
	t.Run("refused", func(t *testing.T) {
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"--set", "terminationGracePeriodSeconds=30"}, "not above config.shutdown_grace"},
			{[]string{"--set", "config.shutdown_grace=2m", "--set", "terminationGracePeriodSeconds=90"}, "not above config.shutdown_grace"},
			{[]string{"--set", "config.shutdown_grace=30 seconds"}, "want a duration"},
			{[]string{"--set", "secrets.existingSecret="}, "secrets.existingSecret"},
			{[]string{"--set", "secrets.adminTokenKey="}, "adminTokenKey is empty"},
			{[]string{"--set-json", `config.admin={"tokens":[{"name":"ci","token_env":"CI_TOKEN"}]}`}, "CI_TOKEN has no entry in secrets.tokens"},
			{[]string{"--set-json", `extraEnv=[{"name":"SWITCHYARD_DATABASE_URL","value":"postgres://u:secret@db/x"}]`}, "is a secret"},
			// Secrets in config would be written into the ConfigMaps (the
			// pods' and the migration's), which are not Secrets.
			{[]string{"--set", "config.postgres.url=postgres://u:secret@db/x"}, "config.postgres.url"},
			{[]string{"--set", "config.http.token=secret"}, "config.http.token"},
			{[]string{"--set", "config.kafka.sasl.password=secret"}, "config.kafka.sasl.password"},
			{[]string{"--set", "config.http.listen=off"}, "must listen on host:port"},
			{[]string{"--set", "kafkaStaticMembership=true"}, "needs workload: StatefulSet"},
			{[]string{"--set", "workload=DaemonSet"}, "workload: DaemonSet"},
			{[]string{"--set", "config.kafka.instance_id=sy-0"}, "config.kafka.instance_id"},
			{[]string{"--set-json", `extraVolumes=[{"name":"config","emptyDir":{}}]`}, "extraVolumes: config"},
			{[]string{"--set-json", `extraVolumeMounts=[{"name":"tls","mountPath":"/etc/switchyard/tls"}]`}, "extraVolumeMounts: /etc/switchyard/tls"},
			{[]string{"--set", "autoscaling.keda.enabled=true"}, "name at least one queue"},
			{[]string{"--set", "autoscaling.keda.enabled=true", "--set", "autoscaling.keda.queues.default.threshold=30", "--set", "autoscaling.keda.minReplicas=0"}, "at least 1"},
			{[]string{"--set", "autoscaling.keda.enabled=true", "--set", "autoscaling.keda.queues.nosuch.threshold=30"}, `no queue "nosuch"`},
		} {
			_, stderr, err := runErr(helm, append([]string{"template", "sy", chart}, c.args...)...)
			if err == nil || !strings.Contains(stderr, c.want) {
				t.Errorf("helm template %s: %v, %s; want a failure saying %q", strings.Join(c.args, " "), err, stderr, c.want)
			}
		}
	})
}

// The plain manifests decode strictly into the same types, so they do not
// drift from the API either: the config, the migration Job, the Deployment
// and its Service.
func TestKubernetesManifestsDecode(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot, "deploy", "kubernetes", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	var deploy *appsv1.Deployment
	var job *batchv1.Job
	var pdb *policyv1.PodDisruptionBudget
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range decodeAll(t, file, f) {
			kinds[fmt.Sprintf("%T", o)]++
			switch o := o.(type) {
			case *appsv1.Deployment:
				deploy = o
			case *batchv1.Job:
				job = o
			case *policyv1.PodDisruptionBudget:
				pdb = o
			}
		}
		f.Close()
	}
	want := map[string]int{"*v1.ConfigMap": 1, "*v1.Job": 1, "*v1.Deployment": 1, "*v1.Service": 1, "*v1.PodDisruptionBudget": 1}
	if fmt.Sprint(kinds) != fmt.Sprint(want) {
		t.Fatalf("decoded %v, want %v", kinds, want)
	}
	// As the chart's pods: no ServiceAccount token, and a drain that
	// stops one process at a time.
	for name, pod := range map[string]corev1.PodSpec{"Deployment": deploy.Spec.Template.Spec, "migration Job": job.Spec.Template.Spec} {
		if a := pod.AutomountServiceAccountToken; a == nil || *a {
			t.Errorf("the %s's pods mount a ServiceAccount token they never use", name)
		}
	}
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 ||
		!reflect.DeepEqual(pdb.Spec.Selector.MatchLabels, deploy.Spec.Selector.MatchLabels) {
		t.Errorf("the PodDisruptionBudget (%+v) does not keep the Deployment's pods to one away at a time", pdb.Spec)
	}
}
