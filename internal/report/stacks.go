package report

import (
	"fmt"
	"strings"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
)

// source is what a report reads: a loaded profile, or a trace read in
// two passes (model.Stream), whose records are never all in memory,
// and the report's filter, compiled once for every analysis of it.
type source struct {
	p *model.Profile // the tables, and the records when s is nil
	s *model.Stream  // nil for a loaded profile
	m *model.Matcher // the report's filter; nil keeps everything
}

// goIDs returns how many goroutine id records the source holds.
func (src source) goIDs() int {
	if src.s != nil {
		return int(src.s.Counts[model.RecordGoID])
	}
	return len(src.p.GoIDs)
}

// analyse runs calltree with o (whose Filter is src.m) over the source
// and groups the samples that pass the filter (whatever o.Root) as
// o.ByGoroutine says: one pass over a stream's records for both. A
// label filter, or a trace too far out of order, cannot stream: the
// error then wraps model.ErrNotStreamable.
func (src source) analyse(o calltree.Options) (*calltree.Result, *data, error) {
	var r *calltree.Result
	var s *calltree.Samples
	var err error
	if src.s == nil {
		r, s, err = calltree.BuildSamples(src.p, o)
	} else {
		r, s, err = calltree.BuildStreamSamples(src.s, o)
	}
	if err != nil {
		return nil, nil, err
	}
	return r, &data{p: s.Profile, Samples: s, src: src, res: r}, nil
}

// data is a profile prepared for the sampling views: the filtered
// samples grouped by owner and stack (calltree.GroupSamples).
type data struct {
	p *model.Profile // the profile the samples are of, label-filtered
	*calltree.Samples
	src source           // the records before the label filter
	res *calltree.Result // the trees of the samples; see result
}

// weight is what a set of samples weighs in a sampling view's shares,
// order and --min: its number of samples or its period sum (byPeriod).
type weight func(calltree.Count) uint64

// byPeriod reports whether the shares weigh each sample by its period
// (model.PeriodAdapts). Where the period is fixed, the shares of samples
// are those of the period, and are counted in samples.
func (d *data) byPeriod() bool {
	return model.PeriodAdapts(d.p.Header) && d.Total.Period > 0
}

// weight returns the weight of the sampling views of d.
func (d *data) weight() weight {
	if d.byPeriod() {
		return func(c calltree.Count) uint64 { return c.Period }
	}
	return func(c calltree.Count) uint64 { return c.Samples }
}

// prepare groups the samples of src that pass its filter by thread
// incarnation or, byGoroutine, by goroutine (calltree.GroupMatched).
func prepare(src source, byGoroutine bool) *data {
	s := calltree.GroupMatched(src.p, src.m, byGoroutine)
	return &data{p: s.Profile, Samples: s, src: src}
}

// prepareSampling prepares the sampling views of src: with trees (the
// view renders them) or for a stream, the trees are built in the pass
// that groups the samples; else only the samples are grouped.
func prepareSampling(src source, byGoroutine, trees bool) (*data, error) {
	if src.s == nil && !trees {
		return prepare(src, byGoroutine), nil
	}
	_, d, err := src.analyse(samplingOptions(src, byGoroutine))
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	return d, nil
}

// samplingOptions are calltree's options for the sampling views.
func samplingOptions(src source, byGoroutine bool) calltree.Options {
	return calltree.Options{Filter: src.m, ByGoroutine: byGoroutine}
}

// result returns the analysis of the samples by calltree.Build, where a
// sample becomes a tree node, with the same filter and grouping: the
// tree, flat and arcflow views render it. It is built on first use,
// since tprof and the header need only the grouped stacks.
func (d *data) result() (*calltree.Result, error) {
	if d.res != nil {
		return d.res, nil
	}
	res, err := calltree.Build(d.src.p, samplingOptions(d.src, d.ByGoroutine))
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	d.res = res
	return res, nil
}

// processName returns "name_pid" for a process, the tprof convention.
func (d *data) processName(pid uint32) string {
	name := "[unknown]"
	if pr := d.p.Process(pid); pr != nil && pr.Name != "" {
		name = pr.Name
	}
	return fmt.Sprintf("%s_%d", name, pid)
}

// ownerName names the owner of the samples of s as tprof does:
// "name_tid" for a thread, with the name of its incarnation, and
// "goroutine N" for a goroutine.
func ownerName(s *calltree.Stack) string {
	if s.Goroutine != nil {
		return strings.TrimSpace(fmt.Sprintf("goroutine %d %s", *s.Goroutine, s.Labels))
	}
	name := "[unknown]"
	if s.Thread != nil && s.Thread.Name != "" {
		name = s.Thread.Name
	}
	return fmt.Sprintf("%s_%d", name, s.TID)
}
