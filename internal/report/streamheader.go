package report

import (
	"trueprof/internal/calltree"
	"trueprof/internal/model"
)

// NewHeaderStream is NewHeader for the trace s, whose samples were
// grouped with no filter in the pass over its records that built the
// trees (calltree.BuildStreamSamples): the web page's header without a
// second pass over the file.
func NewHeaderStream(s *model.Stream, samples *calltree.Samples) Header {
	src := source{p: s.Profile, s: s}
	return (&data{p: s.Profile, Samples: samples, src: src}).header("")
}

// InstrHeaderOfStream is InstrHeaderOf for the trace s, analysed as r
// (with the recording's root and no filter) in the pass that grouped its
// samples with no filter (calltree.BuildStreamSamples).
func InstrHeaderOfStream(s *model.Stream, r *calltree.Result, samples *calltree.Samples) InstrHeader {
	mt, _ := metricByName("wall")
	p := s.Profile
	o := Options{View: "flat", Root: p.Header.Root}
	src := source{p: p, s: s}
	return newInstrData(p, o, calltree.Options{Root: o.Root}, mt, r, &data{p: p, Samples: samples, src: src}).header
}
