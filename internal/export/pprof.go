package export

import (
	"fmt"
	"io"

	"github.com/google/pprof/profile"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
)

// PPROF writes p's data that pass f to w as a gzipped pprof
// profile.proto.
//
// Of a sampling recording, the samples, with two sample types: "samples"
// (count) and the sum of the samples' Period ("cpu"/nanoseconds for the
// clock events, the event's name/count for others); the default is the
// periods where they adapt (model.PeriodAdapts), as the reports weigh
// the samples, else the samples.
//
// Of an instrumented recording (function entry and exit events), the
// call-path trees of calltree's analysis, which the reports show, with
// the recording's root and calibration: one pprof sample per call path,
// its values the path's self values, so that pprof's flat is a
// function's self and its cum the function's total (a recursive function
// counted once). The sample types are "calls"/count, "wall"/nanoseconds
// (calibrated; the default), "wall_raw"/nanoseconds (as recorded),
// "cpu"/nanoseconds when the recording has context switches, and, when
// it has samples alongside, "samples"/count and the sum of their periods
// under the event's name ("cpu-clock"/nanoseconds): the samples merged
// into the trees, on the paths the reports show them, as functions not
// traced below the traced ones. Calibrated times are rounded to whole
// nanoseconds so that they add up to the rounded total. The time outside
// a thread's outermost traced calls (its root's self) is a sample without
// a location: it counts in pprof's total, not in any function.
//
// pprof's reports merge functions by name, while trueprof tells functions
// apart by name and module; so a name that occurs in more than one module
// is exported as "name (module)" in each of them, and `go tool pprof -top`
// then shows exactly the rows of trueprof's flat report.
//
// Each module is a mapping without an address range (the model keeps no
// ranges, and a module is mapped at different addresses in different
// processes), marked as symbolized so that pprof does not look for the
// binaries. Each sample carries the string label "thread" (the name of
// its thread incarnation) and the numeric labels "pid" and "tid"; a
// thread created during the recording also "thread_start" (its creation,
// trace clock ns), so that a reused tid's two threads stay apart. The
// report header's warnings (lost records, throttling, truncated stacks, a
// damaged trace, the analysis's repairs) become the profile's comments.
//
// For a Go target (goroutine switches recorded), samples are per
// goroutine instead, as in Go's own CPU profiles: the numeric label
// "goroutine" and, as string labels, the runtime/pprof labels the
// goroutine carried when the samples were taken (of an instrumented
// recording, during the recording), so that `go tool pprof -tagfocus
// 'worker=^2$'` works; a thread's samples before it ran any goroutine
// keep their thread labels.
//
// PPROFStream does the same without holding the records.
func PPROF(w io.Writer, p *model.Profile, f model.Filter) error {
	return writePprof(w, loadedSource(p), f)
}

// PPROFStream is PPROF for a trace read in two passes: the trees, or the
// samples, come from one pass over the records (calltree.BuildStream, or
// calltree.GroupStreamSamples), none of which is kept, so that memory is
// the trees or the distinct stacks however many records the trace holds.
// A label filter, or a trace too far out of order, gives an error
// wrapping model.ErrNotStreamable before anything is written: load the
// trace and call PPROF.
func PPROFStream(w io.Writer, s *model.Stream, f model.Filter) error {
	return writePprof(w, streamSource(s), f)
}

// writePprof writes the pprof profile of src's data that pass f.
func writePprof(w io.Writer, src source, f model.Filter) error {
	prof, err := toPprof(src, f)
	if err != nil {
		return err
	}
	return prof.Write(w)
}

// toPprof builds the pprof profile of src's data that pass f.
func toPprof(src source, f model.Filter) (*profile.Profile, error) {
	if src.rec.events {
		r, err := src.tree(f)
		if err != nil {
			return nil, err
		}
		return pprofOfTree(src.p, r, src.rec)
	}
	// One pprof sample per thread incarnation and stack or, for a Go
	// target, per goroutine, the labels it carried then, and stack.
	samples, err := src.samples(f, src.rec.goroutines)
	if err != nil {
		return nil, err
	}
	return pprofOf(src.p, samples)
}

// periodType is the sample type of the sum of the periods of p's
// samples: "cpu"/nanoseconds for the clock events, as Go's CPU profiles,
// else the event's name/count.
func periodType(p *model.Profile) *profile.ValueType {
	if model.PeriodUnit(p.Header.Event) == "nanoseconds" {
		return &profile.ValueType{Type: "cpu", Unit: "nanoseconds"}
	}
	return &profile.ValueType{Type: p.Header.Event, Unit: "count"}
}

// pprofOf builds the pprof profile of samples, grouped from p's records.
func pprofOf(p *model.Profile, samples *calltree.Samples) (*profile.Profile, error) {
	stacks := samples.Stacks
	valueType := periodType(p)
	prof := &profile.Profile{
		SampleType: []*profile.ValueType{
			{Type: "samples", Unit: "count"},
			valueType,
		},
		DefaultSampleType: "samples",
		PeriodType:        valueType,
		Period:            int64(p.Header.Period),
		DurationNanos:     int64(samples.Last - samples.First),
	}
	if prof.Period == 0 && p.Header.Freq != 0 && valueType.Unit == "nanoseconds" {
		prof.Period = int64(1e9 / p.Header.Freq)
	}
	if model.PeriodAdapts(p.Header) {
		// A sample stands for its period's events: pprof shows them
		// first, as the reports weigh by them.
		prof.DefaultSampleType = valueType.Type
	}
	if !p.Header.StartTime.IsZero() {
		prof.TimeNanos = p.Header.StartTime.UnixNano()
	}
	for _, w := range samples.Warnings() {
		prof.Comments = append(prof.Comments, "trueprof: "+w)
	}

	// The locations used, in order of first use, and each function name's
	// modules, to qualify the names that several modules define.
	locs := make([][]uint32, len(stacks))
	var locIDs []uint32
	usedLoc := map[uint32]bool{}
	names := names{}
	for i := range stacks {
		locs[i] = p.Stack(stacks[i].StackID, nil)
		if len(locs[i]) == 0 {
			names.add(calltree.Unknown)
		}
		for _, id := range locs[i] {
			if usedLoc[id] {
				continue
			}
			usedLoc[id] = true
			locIDs = append(locIDs, id)
			frames, module := calltree.Frames(p, id)
			for _, fr := range frames {
				names.add(calltree.Func{Name: fr.Function, Module: module})
			}
		}
	}

	// Mappings, one per module; the most sampled first.
	weight := map[string]float64{}
	for i := range stacks {
		seen := map[string]bool{}
		for _, id := range locs[i] {
			if _, module := calltree.Frames(p, id); !seen[module] {
				seen[module] = true
				weight[module] += float64(stacks[i].Samples)
			}
		}
	}
	var modules []string
	for _, id := range locIDs {
		_, module := calltree.Frames(p, id)
		modules = append(modules, module)
	}
	mappings := addMappings(prof, modules, weight)

	type funcKey struct{ name, file string }
	functions := map[funcKey]*profile.Function{}
	function := func(name, module, file string) *profile.Function {
		k := funcKey{names.export(calltree.Func{Name: name, Module: module}), file}
		fn := functions[k]
		if fn == nil {
			fn = &profile.Function{
				ID:         uint64(len(prof.Function) + 1),
				Name:       k.name,
				SystemName: name,
				Filename:   file,
			}
			functions[k] = fn
			prof.Function = append(prof.Function, fn)
		}
		return fn
	}

	// Locations keep the model's ids; a sample without a stack gets a
	// location of its own after them, as trueprof's reports count it under
	// the function "[unknown]".
	locations := map[uint32]*profile.Location{}
	for _, id := range locIDs {
		frames, module := calltree.Frames(p, id)
		l := &profile.Location{ID: uint64(id), Mapping: mappings[module]}
		if int(id) < len(p.Locations) {
			l.Address = p.Locations[id].Address
		}
		// Both orders are innermost first, the caller the inlined
		// frames were inlined into last.
		for _, fr := range frames {
			l.Line = append(l.Line, profile.Line{
				Function: function(fr.Function, module, fr.File),
				Line:     int64(fr.Line),
			})
		}
		locations[id] = l
		prof.Location = append(prof.Location, l)
	}
	var unknown *profile.Location
	unknownID := uint64(max(len(p.Locations), 1))
	for _, id := range locIDs {
		unknownID = max(unknownID, uint64(id)+1)
	}
	for i := range stacks {
		st := &stacks[i]
		s := &profile.Sample{
			Value:    []int64{int64(st.Samples), int64(st.Period)},
			NumLabel: map[string][]int64{"pid": {int64(st.PID)}, "tid": {int64(st.TID)}},
		}
		if st.Goroutine != nil {
			// As Go's own CPU profiles: the goroutine's pprof labels at
			// the time, for -tagfocus; and the goroutine, for -tagshow.
			delete(s.NumLabel, "tid")
			s.NumLabel["goroutine"] = []int64{int64(*st.Goroutine)}
			for _, l := range st.LabelsAt {
				if s.Label == nil {
					s.Label = map[string][]string{}
				}
				s.Label[l.Key] = append(s.Label[l.Key], l.Value)
			}
		}
		if th := st.Thread; th != nil {
			if th.Name != "" {
				s.Label = map[string][]string{"thread": {th.Name}}
			}
			if th.Start > 0 {
				s.NumLabel["thread_start"] = []int64{int64(th.Start)}
				s.NumUnit = map[string][]string{"pid": {""}, "tid": {""}, "thread_start": {"nanoseconds"}}
			}
		}
		for _, id := range locs[i] {
			s.Location = append(s.Location, locations[id])
		}
		if len(s.Location) == 0 {
			if unknown == nil {
				unknown = &profile.Location{
					ID:   unknownID,
					Line: []profile.Line{{Function: function(calltree.Unknown.Name, calltree.Unknown.Module, "")}},
				}
				prof.Location = append(prof.Location, unknown)
			}
			s.Location = []*profile.Location{unknown}
		}
		prof.Sample = append(prof.Sample, s)
	}
	if err := prof.CheckValid(); err != nil {
		return nil, fmt.Errorf("export: invalid pprof profile: %w", err)
	}
	return prof, nil
}
