package deploy

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The image is small and runs as non-root: a static, stripped binary on
// distroless's nonroot variant (uid 65532, which the Helm chart's
// runAsUser names), with USER set so that a runtime without a pod
// securityContext does not run it as root either.
func TestDockerfileSmallAndNonRoot(t *testing.T) {
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	froms := regexp.MustCompile(`(?m)^FROM\s+(\S+)`).FindAllStringSubmatch(df, -1)
	if len(froms) == 0 {
		t.Fatal("Dockerfile: no FROM")
	}
	last := df[strings.LastIndex(df, "\nFROM "):]
	if base := froms[len(froms)-1][1]; !strings.HasPrefix(base, "gcr.io/distroless/static") || !strings.HasSuffix(base, ":nonroot") {
		t.Errorf("final stage FROM %s: want gcr.io/distroless/static…:nonroot", base)
	}
	// Numeric: a kubelet refuses runAsNonRoot for a user it cannot see
	// is not root ("image has non-numeric user (nonroot)").
	if !regexp.MustCompile(`(?m)^USER\s+65532:65532\s*$`).MatchString(last) {
		t.Error("final stage: no USER 65532:65532 (distroless's nonroot, by number)")
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-s -w", "-buildvcs=true"} {
		if !strings.Contains(df, want) {
			t.Errorf("the build lacks %s: the binary would not be static and stripped", want)
		}
	}
	values, err := os.ReadFile("helm/switchyard/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(values), "runAsUser: 65532") {
		t.Error("helm/switchyard/values.yaml: runAsUser is not distroless's nonroot 65532")
	}
}
