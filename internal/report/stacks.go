package report

import (
	"fmt"
	"strings"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
)

// Func identifies a function (calltree.Func).
type Func = calltree.Func

// Stack is the samples of one owner that share a call stack
// (calltree.Stack).
type Stack = calltree.Stack

// data is a profile prepared for the sampling views: the filtered
// samples grouped by owner and stack (calltree.GroupSamples).
type data struct {
	p *model.Profile // the profile the samples are of, label-filtered
	*calltree.Samples
	all *model.Profile   // the profile before the label filter
	res *calltree.Result // the trees of the samples; see result
}

// prepare groups the samples of p that pass f by thread incarnation or,
// byGoroutine, by goroutine (calltree.GroupSamples).
func prepare(p *model.Profile, f Filter, byGoroutine bool) *data {
	s := calltree.GroupSamples(p, f, byGoroutine)
	return &data{p: s.Profile, Samples: s, all: p}
}

// result returns the analysis of the samples by calltree.Build, where a
// sample becomes a tree node, with the same filter and grouping: the
// tree, flat and arcflow views render it. It is built on first use,
// since tprof and the header need only the grouped stacks.
func (d *data) result() (*calltree.Result, error) {
	if d.res != nil {
		return d.res, nil
	}
	m, err := d.Filter.Compile()
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	f := d.Filter
	res, err := calltree.Build(d.all, calltree.Options{PID: f.PID, TID: f.TID, HasPID: f.HasPID, HasTID: f.HasTID,
		Thread: f.Thread, Labels: m.LabelMatcher(), ByGoroutine: d.ByGoroutine})
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
func ownerName(s *Stack) string {
	if s.Goroutine != nil {
		return strings.TrimSpace(fmt.Sprintf("goroutine %d %s", *s.Goroutine, s.Labels))
	}
	name := "[unknown]"
	if s.Thread != nil && s.Thread.Name != "" {
		name = s.Thread.Name
	}
	return fmt.Sprintf("%s_%d", name, s.TID)
}
