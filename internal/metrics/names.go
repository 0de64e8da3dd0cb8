package metrics

import (
	"regexp"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// Names lists, sorted, the name of every metric New registers: the names
// that the alerts, the dashboard and the Helm chart's autoscaler in deploy/
// may query, which their tests check against this list.
func Names() []string {
	var reg capture
	New(&reg)
	// prometheus.Desc keeps its name unexported; its String() shows it.
	fq := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	var names []string
	for _, c := range reg.cs {
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			if m := fq.FindStringSubmatch(d.String()); m != nil {
				names = append(names, m[1])
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// capture records what New registers, without a registry's checks.
type capture struct{ cs []prometheus.Collector }

func (c *capture) Register(col prometheus.Collector) error { c.cs = append(c.cs, col); return nil }
func (c *capture) MustRegister(cs ...prometheus.Collector) { c.cs = append(c.cs, cs...) }
func (c *capture) Unregister(prometheus.Collector) bool    { return false }
