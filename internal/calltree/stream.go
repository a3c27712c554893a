package calltree

import (
	"errors"
	"fmt"
	"io"

	"trueprof/internal/model"
)

// ErrNeedsLoad is returned by BuildStream when the analysis needs the
// recording's records in memory: a label filter (Options.Labels), which
// selects records by the goroutine a thread runs at their time. It wraps
// model.ErrNotStreamable, which BuildStream also returns for a trace
// whose records are too far out of order; in both cases read the trace
// with model.Load and call Build.
var ErrNeedsLoad = fmt.Errorf("%w: a label filter selects records in memory", model.ErrNotStreamable)

// BuildStream is Build over a trace read in two passes (model.Stream): it
// reads the records from the file again, one at a time, and keeps none,
// so that its memory is the trees, the open shadow stacks and the
// stream's reorder window, however many events the trace holds. Its
// Result is Build's on the same trace, bit for bit. See ErrNeedsLoad for
// when it cannot.
func BuildStream(s *model.Stream, o Options) (*Result, error) {
	return buildStream(s, o, nil)
}

// BuildStreamSamples is BuildStream that also groups the samples which
// pass o's thread filter (o.PID, o.TID, o.Thread; o.Root aside), by
// goroutine when o.ByGoroutine, in the same pass over the file: the
// Samples GroupSamples gives for a loaded trace, which the reports' header
// and the sampling views start from.
func BuildStreamSamples(s *model.Stream, o Options) (*Result, *Samples, error) {
	f := model.Filter{PID: o.PID, TID: o.TID, HasPID: o.HasPID, HasTID: o.HasTID, Thread: o.Thread}
	m, err := f.Compile()
	if err != nil {
		return nil, nil, err
	}
	g := newGrouper(s.Profile, f, m, o.ByGoroutine)
	r, err := buildStream(s, o, g)
	if err != nil {
		return nil, nil, err
	}
	return r, g.finish(), nil
}

// buildStream replays s's records and, when g is not nil, groups their
// samples with g.
func buildStream(s *model.Stream, o Options, g *grouper) (*Result, error) {
	if len(o.Labels) > 0 {
		return nil, ErrNeedsLoad
	}
	rs, err := s.Records()
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	a, err := replayRecords(s.Profile, summary{counts: s.Counts, first: s.First, last: s.Last}, rs.Next, o, g)
	if err != nil {
		return nil, err
	}
	return a.result(), nil
}

// replayRecords replays the records next yields (in time order, ties in
// any order of kinds) of the recording whose tables p holds and whose
// records sum summarizes, and sweeps its threads at the end.
func replayRecords(p *model.Profile, sum summary, next func(*model.Record) error, o Options, g *grouper) (*replay, error) {
	if p.Aggregated() {
		return replayTree(p, next, o, g)
	}
	a, err := newReplay(p, sum, o, o.Flow)
	if err != nil {
		return nil, err
	}
	rootSeen := false
	var r model.Record
	// The records of one time, handed over in recordOrder: a trace has
	// them in file order, the replay wants Load's per-kind order.
	batch := make([]model.Record, 0, 8)
	handle := a.onRecord
	if g != nil {
		// recordOrder puts a time's goroutine switches before its
		// samples, as GroupSamples applies them.
		handle = func(r *model.Record) {
			switch r.Kind {
			case model.RecordGoID:
				g.goSwitch(&r.GoID)
			case model.RecordSample:
				g.sample(&r.Sample)
			}
			a.onRecord(r)
		}
	}
	flush := func() {
		if len(batch) == 1 {
			handle(&batch[0])
			return
		}
		for _, k := range recordOrder {
			for i := range batch {
				if batch[i].Kind == k {
					handle(&batch[i])
				}
			}
		}
	}
	for {
		err := next(&r)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if r.Kind == model.RecordEvent && a.rootLocs != nil && a.isRoot(r.Event.Function) {
			rootSeen = true
		}
		if len(batch) > 0 && r.Time() != batch[0].Time() {
			flush()
			batch = batch[:0]
		}
		batch = append(batch, r)
	}
	flush()
	if o.Root != "" && !rootSeen {
		return nil, fmt.Errorf("%w: %q", ErrRootNotFound, o.Root)
	}
	a.sweep()
	return a, nil
}
