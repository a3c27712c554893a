package export

import (
	"fmt"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
)

// source is a recording to export, loaded or read as a stream: its
// tables, the kinds of records it holds, and the two analyses the
// exports start from.
type source struct {
	p   *model.Profile
	rec recording
	// tree analyses an instrumented recording's data that pass f as its
	// export shows them: the recording's root for a --root recording, as
	// the reports; by goroutine when goroutine switches were recorded, as
	// the sampled export.
	tree func(f model.Filter) (*calltree.Result, error)
	// samples groups the samples that pass f by owner and stack.
	samples func(f model.Filter, byGoroutine bool) (*calltree.Samples, error)
}

// recording says which kinds of records a recording holds, which decide
// what its exports hold.
type recording struct {
	events, switches, samples, goroutines bool
}

// recordingOf is what the recording p holds, given which kinds of
// records its trace has. Its calls are its function events or, in an
// aggregated recording (record --aggregate), the trees that sum them
// (model.Profile.HasCalls), exported as the events they sum; the latter
// has measured CPU time in them when it recorded context switches.
func recordingOf(p *model.Profile, switches, samples, goroutines bool) recording {
	if p.Tree != nil && p.Tree.Switches {
		switches = true
	}
	return recording{events: p.HasCalls(), switches: switches, samples: samples, goroutines: goroutines}
}

// loadedSource is the source of the loaded recording p.
func loadedSource(p *model.Profile) source {
	return source{
		p:   p,
		rec: recordingOf(p, len(p.Switches) > 0, len(p.Samples) > 0, len(p.GoIDs) > 0),
		tree: func(f model.Filter) (*calltree.Result, error) {
			m, err := f.Compile()
			if err != nil {
				return nil, fmt.Errorf("export: %w", err)
			}
			r, err := calltree.Build(p, treeOptions(p, m, len(p.GoIDs) > 0))
			if err != nil {
				return nil, fmt.Errorf("export: %w", err)
			}
			return r, nil
		},
		samples: func(f model.Filter, byGoroutine bool) (*calltree.Samples, error) {
			return calltree.GroupSamples(p, f, byGoroutine), nil
		},
	}
}

// streamSource is the source of the trace s, each analysis one pass over
// its records, none of which is kept. A label filter gives
// calltree.ErrNeedsLoad.
func streamSource(s *model.Stream) source {
	c := &s.Counts
	return source{
		p:   s.Profile,
		rec: recordingOf(s.Profile, c[model.RecordSwitch] > 0, c[model.RecordSample] > 0, c[model.RecordGoID] > 0),
		tree: func(f model.Filter) (*calltree.Result, error) {
			m, err := f.Compile()
			if err != nil {
				return nil, fmt.Errorf("export: %w", err)
			}
			r, err := calltree.BuildStream(s, treeOptions(s.Profile, m, c[model.RecordGoID] > 0))
			if err != nil {
				return nil, fmt.Errorf("export: %w", err)
			}
			return r, nil
		},
		samples: func(f model.Filter, byGoroutine bool) (*calltree.Samples, error) {
			samples, err := calltree.GroupStreamSamples(s, f, byGoroutine)
			if err != nil {
				return nil, fmt.Errorf("export: %w", err)
			}
			return samples, nil
		},
	}
}

// treeOptions are the analysis options of a source's tree: m is its
// compiled filter.
func treeOptions(p *model.Profile, m *model.Matcher, byGoroutine bool) calltree.Options {
	return calltree.Options{Root: p.Header.Root, Filter: m, ByGoroutine: byGoroutine}
}
