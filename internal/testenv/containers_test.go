package testenv

import "testing"

// The shared services come from the variables whenever either is set
// (Docker is not even asked), from containers only where neither is set
// and Docker answers, and otherwise from nowhere.
func TestChooseServices(t *testing.T) {
	for _, c := range []struct {
		name      string
		vars      map[string]string
		docker    bool
		want      serviceSource
		askDocker bool
	}{
		{"both variables", map[string]string{"SWITCHYARD_DATABASE_URL": "postgres://x", "SWITCHYARD_KAFKA_BROKERS": "k:9092"}, true, fromEnv, false},
		{"one variable", map[string]string{"SWITCHYARD_KAFKA_BROKERS": "k:9092"}, true, fromEnv, false},
		{"none, Docker answers", nil, true, fromContainers, true},
		{"none, no Docker", nil, false, fromNowhere, true},
	} {
		asked := false
		got := chooseServices(func(k string) string { return c.vars[k] }, func() bool { asked = true; return c.docker })
		if got != c.want || asked != c.askDocker {
			t.Errorf("%s: source %d (Docker asked: %v), want %d (%v)", c.name, got, asked, c.want, c.askDocker)
		}
	}
}
