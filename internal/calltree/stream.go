package calltree

import (
	"errors"
	"fmt"
	"io"
	"runtime"

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
// pass o.Filter (o.Root aside), by goroutine when o.ByGoroutine, in the
// same pass over the file: the Samples GroupMatched gives for a loaded
// trace, which the reports' header and the sampling views start from.
func BuildStreamSamples(s *model.Stream, o Options) (*Result, *Samples, error) {
	g := newGrouper(s.Profile, o.Filter, o.ByGoroutine)
	r, err := buildStream(s, o, g)
	if err != nil {
		return nil, nil, err
	}
	return r, g.finish(), nil
}

// buildStream replays s's records and, when g is not nil, groups their
// samples with g.
func buildStream(s *model.Stream, o Options, g *grouper) (*Result, error) {
	if len(o.Filter.LabelMatcher()) > 0 {
		return nil, ErrNeedsLoad
	}
	rs, err := s.Records()
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	next := rs.Next
	if runtime.GOMAXPROCS(0) >= 2 && !rs.Held() {
		var stop func()
		next, stop = readAhead(rs.Next)
		defer stop()
	}
	a, err := replayRecords(s.Profile, summary{counts: s.Counts, first: s.First, last: s.Last}, next, o, g)
	if err != nil {
		return nil, err
	}
	return a.result(), nil
}

// aheadRecords is how many records readAhead hands over at a time:
// enough that the two goroutines rarely wait for each other (256 at a
// time made the handovers cost more than the reading saved).
const aheadRecords = 4096

// readAhead returns a next that yields next's records, read (decompressed,
// decoded, put in time order) on another goroutine a few batches ahead
// of the caller, and stop, which ends that goroutine (call it before
// closing what next reads). With two cores the replay then does only
// its own work, the reading a third of the whole.
func readAhead(next func(*model.Record) error) (func(*model.Record) error, func()) {
	type batch struct {
		recs []model.Record
		err  error // after recs: io.EOF at the end
	}
	full := make(chan batch, 2)
	free := make(chan []model.Record, 3)
	for range cap(free) {
		free <- make([]model.Record, aheadRecords)
	}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		for {
			var recs []model.Record
			select {
			case recs = <-free:
			case <-done:
				return
			}
			n := 0
			var err error
			for ; n < len(recs); n++ {
				if err = next(&recs[n]); err != nil {
					break
				}
			}
			select {
			case full <- batch{recs[:n], err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	var cur batch
	i := 0
	read := func(r *model.Record) error {
		for i == len(cur.recs) {
			if cur.err != nil {
				return cur.err
			}
			if cur.recs != nil {
				free <- cur.recs[:cap(cur.recs)]
			}
			cur, i = <-full, 0
		}
		r.Set(&cur.recs[i])
		i++
		return nil
	}
	stop := func() {
		close(done)
		<-exited
	}
	return read, stop
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
	// The records of one time are handed over in recordOrder: a trace
	// has them in file order, the replay wants Load's per-kind order.
	// next reads each record straight into buf[n]; buf[tie:n] are those
	// of the time at hand, so that a record is not copied on its way.
	flush := func(batch []model.Record) {
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
	buf := make([]model.Record, 64)
	tie, n := 0, 0
	var tieTime uint64 // buf[tie]'s
	for {
		if n == len(buf) {
			// Only the records of the time at hand are moved (a tie
			// longer than buf grows it).
			if tie == 0 {
				buf = append(buf, make([]model.Record, len(buf))...)
			} else {
				n = copy(buf, buf[tie:n])
				tie = 0
			}
		}
		r := &buf[n]
		if err := next(r); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, err
		}
		if r.Kind == model.RecordEvent && a.rootLocs != nil && a.isRoot(r.Event.Function) {
			rootSeen = true
		}
		if t := r.Time(); n == tie || t != tieTime {
			if n > tie {
				flush(buf[tie:n])
				tie = n
			}
			tieTime = t
		}
		n++
	}
	flush(buf[tie:n])
	if o.Root != "" && !rootSeen {
		return nil, fmt.Errorf("%w: %q", ErrRootNotFound, o.Root)
	}
	a.sweep()
	return a, nil
}
