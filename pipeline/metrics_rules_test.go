package pipeline

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// TestAlertRulesNameRealMetrics: the example alerting rules
// (configs/monitoring/eddy-alerts.yaml) select only series that eddy
// exports (its own, and the Go runtime's and the process's), by labels
// they have, with values eddy uses.
func TestAlertRulesNameRealMetrics(t *testing.T) {
	labels := map[string][]string{} // series name -> its labels
	histograms := map[string]bool{}
	descRE := regexp.MustCompile(`fqName: "([a-z0-9_]+)".*variableLabels: \{([a-z_,]*)\}`)
	m := NewMetrics()
	for _, c := range m.collectors() {
		ch := make(chan *prometheus.Desc, 1)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			sub := descRE.FindStringSubmatch(d.String())
			require.NotNil(t, sub, d.String())
			labels[sub[1]] = strings.Split(sub[2], ",")
			if _, ok := c.(*prometheus.HistogramVec); ok {
				histograms[sub[1]] = true
			}
		}
	}
	values := map[string][]string{
		"kind":   {kindCheckpoint, kindSavepoint},
		"result": {resultCompleted, resultFailed, resultSubsumed},
		"policy": {OnErrorFail.String(), OnErrorSkip.String(), OnErrorDeadLetter.String()},
	}

	b, err := os.ReadFile("../configs/monitoring/eddy-alerts.yaml")
	require.NoError(t, err)
	var file struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(b, &file))
	require.NotEmpty(t, file.Groups)
	selector := regexp.MustCompile(`\b((?:eddy|go|process)_[a-z0-9_]+)(\{([^}]*)\})?`)
	matcher := regexp.MustCompile(`^\s*([a-z_]+)\s*=\s*"([^"]*)"\s*$`)
	seen := 0
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert)
			require.NotEmpty(t, r.Annotations["summary"], r.Alert)
			sels := selector.FindAllStringSubmatch(r.Expr, -1)
			require.NotEmpty(t, sels, "%s selects no eddy series", r.Alert)
			for _, sel := range sels {
				name := sel[1]
				if base, ok := strings.CutSuffix(name, "_bucket"); ok && histograms[base] {
					name = base
				}
				have, ok := labels[name]
				require.True(t, ok, "%s: eddy exports no %s", r.Alert, sel[1])
				seen++
				if sel[3] == "" {
					continue
				}
				for _, kv := range strings.Split(sel[3], ",") {
					lv := matcher.FindStringSubmatch(kv)
					require.NotNil(t, lv, "%s: matcher %q", r.Alert, kv)
					require.Contains(t, have, lv[1], "%s: %s has no label %s", r.Alert, name, lv[1])
					if vs, ok := values[lv[1]]; ok {
						require.True(t, slices.Contains(vs, lv[2]), "%s: %s=%q is never set", r.Alert, lv[1], lv[2])
					}
				}
			}
		}
	}
	require.GreaterOrEqual(t, seen, 6, "series selected")
}
