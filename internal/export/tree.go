package export

import (
	"fmt"
	"math"
	"strings"

	"github.com/google/pprof/profile"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
)

// An instrumented recording (function entry and exit events) is exported
// from calltree's analysis, the replay the reports show, calibrated the
// same way: one pprof sample, or folded line, per call path of the
// threads' trees, with the path's self values. So pprof's flat is a
// function's self and its cum the function's total, counting a
// recursive function once, as trueprof's flat view does.

// treeValue is a sample type of the export of an instrumented
// recording, and how a tree node's self value of it is read.
type treeValue struct {
	typ profile.ValueType
	of  func(n *calltree.Node) float64
}

// treeValues returns the sample types of the export of an instrumented
// recording p of kinds rec: calls, wall (calibrated) and wall_raw
// always, cpu when the recording measured it (context switches), and
// the samples merged into the trees with the sum of their periods (the
// event's name and unit, "cpu-clock" in nanoseconds, so that it does not
// read as the measured cpu) when the recording has samples alongside the
// events.
func treeValues(p *model.Profile, rec recording) []treeValue {
	vs := []treeValue{
		{profile.ValueType{Type: "calls", Unit: "count"}, func(n *calltree.Node) float64 { return float64(n.Calls) }},
		{profile.ValueType{Type: "wall", Unit: "nanoseconds"}, func(n *calltree.Node) float64 { return n.Base.WallNS }},
		{profile.ValueType{Type: "wall_raw", Unit: "nanoseconds"}, func(n *calltree.Node) float64 { return float64(n.Base.WallNSRaw) }},
	}
	if rec.switches {
		vs = append(vs, treeValue{profile.ValueType{Type: "cpu", Unit: "nanoseconds"}, func(n *calltree.Node) float64 { return n.Base.CPUNS }})
	}
	if rec.samples {
		unit := model.PeriodUnit(p.Header.Event)
		if unit == "events" {
			unit = "count"
		}
		vs = append(vs,
			treeValue{profile.ValueType{Type: "samples", Unit: "count"}, func(n *calltree.Node) float64 { return float64(n.Base.Samples) }},
			treeValue{profile.ValueType{Type: p.Header.Event, Unit: unit}, func(n *calltree.Node) float64 { return float64(n.Base.Period) }})
	}
	return vs
}

// treeTypes returns the names of values.
func treeTypes(values []treeValue) []string {
	types := make([]string, len(values))
	for i := range values {
		types[i] = values[i].typ.Type
	}
	return types
}

// rounder turns fractional values (calibrated nanoseconds) into the
// integers pprof and folded stacks carry, each the difference of the
// rounded running sums, so that the exported values add up to the
// rounded total instead of drifting by up to half a unit per value.
type rounder struct {
	sum  float64
	sent int64
}

// next returns v rounded so that the values returned so far add up to
// their rounded sum.
func (r *rounder) next(v float64) int64 {
	r.sum += v
	n := int64(math.Round(r.sum)) - r.sent
	r.sent += n
	return n
}

// walkPaths calls visit with every node of r's trees that has a self
// value, and its path from its thread's root (outermost first; empty
// for the root, whose self is the time outside the thread's outermost
// traced calls). path is reused: visit must copy what it keeps.
func walkPaths(r *calltree.Result, visit func(pr *calltree.Process, th *calltree.Thread, path []*calltree.Node, n *calltree.Node)) {
	var path []*calltree.Node
	var walk func(pr *calltree.Process, th *calltree.Thread, n *calltree.Node)
	walk = func(pr *calltree.Process, th *calltree.Thread, n *calltree.Node) {
		if n.Calls > 0 || n.Base != (calltree.Metrics{}) {
			visit(pr, th, path, n)
		}
		for i := range n.Children {
			path = append(path, &n.Children[i])
			walk(pr, th, &n.Children[i])
			path = path[:len(path)-1]
		}
	}
	for i := range r.Processes {
		pr := &r.Processes[i]
		for j := range pr.Threads {
			walk(pr, &pr.Threads[j], &pr.Threads[j].Root)
		}
	}
}

// pprofOfTree builds the pprof profile of r, the analysis of p, a
// recording of kinds rec.
func pprofOfTree(p *model.Profile, r *calltree.Result, rec recording) (*profile.Profile, error) {
	values := treeValues(p, rec)
	prof := &profile.Profile{DefaultSampleType: "wall", PeriodType: &profile.ValueType{Type: "wall", Unit: "nanoseconds"}, Period: 1}
	for i := range values {
		prof.SampleType = append(prof.SampleType, &values[i].typ)
	}
	if !p.Header.StartTime.IsZero() {
		prof.TimeNanos = p.Header.StartTime.UnixNano()
	}
	prof.Comments = append(prof.Comments,
		"trueprof: one sample per traced call path, with its self values (calibrated; wall_raw as recorded); the time outside traced calls has no location")
	for _, w := range append(p.Warnings(), r.Warnings...) {
		prof.Comments = append(prof.Comments, "trueprof: "+w)
	}

	// The functions, to qualify the names several modules define, and
	// the modules' weights (self wall time) to order the mappings.
	names := names{}
	weight := map[string]float64{}
	var modules []string
	var begin, end uint64
	first := true
	walkPaths(r, func(_ *calltree.Process, th *calltree.Thread, path []*calltree.Node, n *calltree.Node) {
		if first || th.BeginNS < begin {
			begin, first = th.BeginNS, false
		}
		end = max(end, th.EndNS)
		if len(path) == 0 {
			return
		}
		f := n.Func()
		names.add(f)
		weight[f.Module] += n.Base.WallNS
		modules = append(modules, f.Module)
	})
	prof.DurationNanos = int64(end - begin)
	mappings := addMappings(prof, modules, weight)

	locations := map[calltree.Func]*profile.Location{}
	location := func(f calltree.Func) *profile.Location {
		l := locations[f]
		if l == nil {
			fn := &profile.Function{ID: uint64(len(prof.Function) + 1), Name: names.export(f), SystemName: f.Name}
			prof.Function = append(prof.Function, fn)
			l = &profile.Location{ID: uint64(len(prof.Location) + 1), Mapping: mappings[f.Module], Line: []profile.Line{{Function: fn}}}
			prof.Location = append(prof.Location, l)
			locations[f] = l
		}
		return l
	}
	rounders := make([]rounder, len(values))
	var labelsOf *calltree.Thread
	var label map[string][]string
	var numUnit map[string][]string
	var num map[string][]int64
	walkPaths(r, func(_ *calltree.Process, th *calltree.Thread, path []*calltree.Node, n *calltree.Node) {
		if th != labelsOf {
			// The labels of the sampled export: the samples of a thread
			// or goroutine share them.
			labelsOf, label, num, numUnit = th, nil, map[string][]int64{"pid": {int64(th.PID)}}, nil
			if th.Goroutine != nil {
				num["goroutine"] = []int64{int64(*th.Goroutine)}
				for k, v := range th.Labels {
					if label == nil {
						label = map[string][]string{}
					}
					label[k] = []string{v}
				}
			} else {
				num["tid"] = []int64{int64(th.TID)}
				if th.Name != "" {
					label = map[string][]string{"thread": {th.Name}}
				}
				if th.Start > 0 {
					num["thread_start"] = []int64{int64(th.Start)}
					numUnit = map[string][]string{"pid": {""}, "tid": {""}, "thread_start": {"nanoseconds"}}
				}
			}
		}
		s := &profile.Sample{Value: make([]int64, len(values)), Label: label, NumLabel: num, NumUnit: numUnit}
		for i := range values {
			s.Value[i] = rounders[i].next(values[i].of(n))
		}
		s.Location = make([]*profile.Location, len(path))
		for i, m := range path {
			s.Location[len(path)-1-i] = location(m.Func())
		}
		prof.Sample = append(prof.Sample, s)
	})
	if err := prof.CheckValid(); err != nil {
		return nil, fmt.Errorf("export: invalid pprof profile: %w", err)
	}
	return prof, nil
}

// foldedTree returns the folded lines of r, the analysis of p: one per
// call path (merged across threads and processes of the same name), the
// process name then the path's functions, with the path's self value
// of value. The time outside the outermost traced calls is the process
// name's own line.
func foldedTree(r *calltree.Result, value treeValue) map[string]float64 {
	lines := map[string]float64{}
	var b strings.Builder
	walkPaths(r, func(pr *calltree.Process, _ *calltree.Thread, path []*calltree.Node, n *calltree.Node) {
		x := value.of(n)
		if x == 0 {
			return
		}
		b.Reset()
		b.WriteString(foldedFrame(pr.Name))
		for _, m := range path {
			b.WriteByte(';')
			b.WriteString(foldedFrame(m.Name))
		}
		lines[b.String()] += x
	})
	return lines
}
