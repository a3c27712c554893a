package export

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/google/pprof/profile"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
)

// PPROF writes the samples of p that pass f to w as a gzipped pprof
// profile.proto with two sample types: "samples" (count, the default) and
// the sum of the samples' Period ("cpu"/nanoseconds for the clock events,
// the event's name/count for others).
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
// damaged trace) become the profile's comments.
//
// For a Go target (goroutine switches recorded), samples are per
// goroutine instead, as in Go's own CPU profiles: the numeric label
// "goroutine" and, as string labels, the runtime/pprof labels the
// goroutine carried when the samples were taken, so that `go tool pprof
// -tagfocus 'worker=^2$'` works; a thread's samples before it ran any
// goroutine keep their thread labels.
//
// PPROFStream does the same without holding the records.
func PPROF(w io.Writer, p *model.Profile, f model.Filter) error {
	prof, err := toPprof(p, f)
	if err != nil {
		return err
	}
	return prof.Write(w)
}

// PPROFStream is PPROF for a trace read in two passes: the samples are
// grouped in one pass over the records (calltree.BuildStreamSamples),
// none of which is kept, so that memory is the distinct stacks however
// many records the trace holds. A label filter, or a trace too far out
// of order, gives an error wrapping model.ErrNotStreamable before
// anything is written: load the trace and call PPROF.
func PPROFStream(w io.Writer, s *model.Stream, f model.Filter) error {
	samples, err := streamSamples(s, f, s.Counts[model.RecordGoID] > 0)
	if err != nil {
		return err
	}
	prof, err := pprofOf(s.Profile, samples)
	if err != nil {
		return err
	}
	return prof.Write(w)
}

// streamSamples groups the samples of s that pass f, by goroutine when
// byGoroutine, in one pass over its records.
func streamSamples(s *model.Stream, f model.Filter, byGoroutine bool) (*calltree.Samples, error) {
	if len(f.Labels) > 0 {
		if _, err := f.Compile(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("export: %w", calltree.ErrNeedsLoad)
	}
	_, samples, err := calltree.BuildStreamSamples(s, calltree.Options{PID: f.PID, TID: f.TID, HasPID: f.HasPID,
		HasTID: f.HasTID, Thread: f.Thread, ByGoroutine: byGoroutine})
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	return samples, nil
}

// toPprof builds the pprof profile of p's samples that pass f; it is
// separate from PPROF for tests.
func toPprof(p *model.Profile, f model.Filter) (*profile.Profile, error) {
	// One pprof sample per thread incarnation and stack or, for a Go
	// target, per goroutine, the labels it carried then, and stack.
	return pprofOf(p, calltree.GroupSamples(p, f, len(p.GoIDs) > 0))
}

// pprofOf builds the pprof profile of samples, grouped from p's records.
func pprofOf(p *model.Profile, samples *calltree.Samples) (*profile.Profile, error) {
	stacks := samples.Stacks
	valueType := &profile.ValueType{Type: p.Header.Event, Unit: "count"}
	if model.PeriodUnit(p.Header.Event) == "nanoseconds" {
		valueType = &profile.ValueType{Type: "cpu", Unit: "nanoseconds"}
	}
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
	modules := map[string]map[string]bool{}
	addName := func(name, module string) {
		if modules[name] == nil {
			modules[name] = map[string]bool{}
		}
		modules[name][module] = true
	}
	for i := range stacks {
		locs[i] = p.Stack(stacks[i].StackID, nil)
		if len(locs[i]) == 0 {
			addName(calltree.Unknown.Name, calltree.Unknown.Module)
		}
		for _, id := range locs[i] {
			if usedLoc[id] {
				continue
			}
			usedLoc[id] = true
			locIDs = append(locIDs, id)
			frames, module := calltree.Frames(p, id)
			for _, fr := range frames {
				addName(fr.Function, module)
			}
		}
	}
	exportName := func(name, module string) string {
		if len(modules[name]) > 1 {
			return fmt.Sprintf("%s (%s)", name, module)
		}
		return name
	}

	// Mappings, one per module, in module order.
	mappings := map[string]*profile.Mapping{}
	for _, id := range locIDs {
		_, module := calltree.Frames(p, id)
		if module != "" {
			mappings[module] = &profile.Mapping{
				File:            module,
				HasFunctions:    true,
				HasFilenames:    true,
				HasLineNumbers:  true,
				HasInlineFrames: true,
			}
		}
	}
	// pprof names a profile after its first mapping ("File:" in its
	// reports): put first the most sampled module that looks like a
	// program rather than a library or a pseudo module.
	weight := map[string]uint64{}
	for i := range stacks {
		seen := map[string]bool{}
		for _, id := range locs[i] {
			if _, module := calltree.Frames(p, id); !seen[module] {
				seen[module] = true
				weight[module] += stacks[i].Samples
			}
		}
	}
	program := func(module string) bool {
		return !strings.HasPrefix(module, "[") && !sharedLibrary.MatchString(module)
	}
	order := slices.Collect(maps.Keys(mappings))
	slices.SortFunc(order, func(a, b string) int {
		if pa, pb := program(a), program(b); pa != pb {
			if pa {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(weight[b], weight[a]), cmp.Compare(a, b))
	})
	for _, module := range order {
		m := mappings[module]
		m.ID = uint64(len(prof.Mapping) + 1)
		prof.Mapping = append(prof.Mapping, m)
	}

	type funcKey struct{ name, file string }
	functions := map[funcKey]*profile.Function{}
	function := func(name, module, file string) *profile.Function {
		k := funcKey{exportName(name, module), file}
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

// sharedLibrary matches the file names of shared libraries: "libc.so.6".
var sharedLibrary = regexp.MustCompile(`\.so($|\.)`)
