package admin

import (
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
)

// pipelineLabel is the label every eddy_* series of `eddy serve` has: the
// pipeline's name.
const pipelineLabel = "pipeline"

// Gatherer returns the metrics of every pipeline, their eddy_* series
// each labelled pipeline=NAME, and the process's go_* and process_*
// series once: what GET /metrics of eddy serve serves.
func (m *Manager) Gatherer() prometheus.Gatherer {
	process := prometheus.NewRegistry()
	process.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		gs := prometheus.Gatherers{process}
		for _, name := range m.names() {
			e := m.lookup(name)
			if e == nil {
				continue
			}
			if r := m.current(e); r != nil {
				gs = append(gs, labelled{name: name, g: r.metrics.Registry})
			}
		}
		return gs.Gather()
	})
}

// labelled is the eddy_* series of one pipeline's registry with the
// pipeline label added.
type labelled struct {
	name string
	g    prometheus.Gatherer
}

// Gather gathers the registry's eddy_* families and labels their series.
func (l labelled) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := l.g.Gather()
	out := mfs[:0]
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "eddy_") {
			continue
		}
		for _, m := range mf.Metric {
			m.Label = addLabel(m.Label, &dto.LabelPair{Name: new(pipelineLabel), Value: new(l.name)})
		}
		out = append(out, mf)
	}
	return out, err
}

// addLabel inserts p into labels, which are sorted by name, keeping them
// so.
func addLabel(labels []*dto.LabelPair, p *dto.LabelPair) []*dto.LabelPair {
	i, _ := slices.BinarySearchFunc(labels, p.GetName(), func(l *dto.LabelPair, name string) int {
		return strings.Compare(l.GetName(), name)
	})
	return slices.Insert(labels, i, p)
}
