package record

import (
	"context"
	"errors"
	"fmt"
	"math"

	"trueprof/internal/control"
	"trueprof/internal/perf"
	"trueprof/internal/trace"
)

// Probes changed while the target runs: trueprof ctl trace add, trace
// remove and root (docs/control.md). The loop carries them out between
// two drains, like every request; the planner does the placing, or for
// hooks, which record every function, the hook filter the filtering.

// probeRequest carries out a trace-add, trace-remove or root request.
func (s *session) probeRequest(req control.Request) (control.Answer, error) {
	if len(s.cfg.Command) == 0 && !processAlive(s.pid) {
		return control.Answer{}, fmt.Errorf("the attached process %d is gone", s.pid)
	}
	if s.mech == MechHook {
		return s.hookRequest(req)
	}
	p, err := s.livePlanner()
	if err != nil {
		return control.Answer{}, err
	}
	if p.stopped {
		return control.Answer{}, errors.New("the recording is ending")
	}
	var ch *control.ProbeChange
	switch req.Cmd {
	case control.CmdTraceAdd:
		ch, err = p.addPattern(s.pid, req.Pattern)
	case control.CmdTraceRemove:
		ch, err = p.removePattern(req.Pattern, perf.Now())
	case control.CmdRoot:
		ch, err = p.replaceRoot(s.pid, req.Pattern, perf.Now())
	}
	if err != nil {
		return control.Answer{}, err
	}
	if err := s.calibrateGained(); err != nil {
		return control.Answer{}, err
	}
	return control.Answer{Probes: ch}, nil
}

// calibrateGained calibrates a sampling recording once it gained uprobes
// (livePlanner) and the first of them are in place, as a uprobe
// recording is calibrated: in the run, by a burst now (calibrationBurst;
// the other comes at the end), or with the stored calibration, written
// as a Calibration record since the header went out without one.
func (s *session) calibrateGained() error {
	if !s.gained || s.gainedCalibrated {
		return nil
	}
	s.gainedCalibrated = true
	switch {
	case s.uprobeInRun():
		s.calibrationBurst(context.Background(), "first trace add")
	case s.cfg.Calibration != nil:
		cal, err := s.cfg.Calibration(MechUprobe)
		if err != nil {
			fmt.Fprintf(s.log, "trueprof: no calibration for the probes added: %v; reports show raw times\n", err)
			return nil
		}
		s.hdr.Calibration = cal // for the cost warning at the end
		return s.w.Write(&trace.CalibrationRecord{Calibration: cal})
	}
	return nil
}

// livePlanner returns the session's uprobe planner, making one for a
// recording that probed nothing so far: a sampling recording gains
// function events (its header still says no instrumentation; the Probe
// records say from when each function counts, and the trace is read as
// an instrumented one, calibrated as calibrateGained says).
func (s *session) livePlanner() (*uprobePlanner, error) {
	if s.uprobes != nil {
		return s.uprobes, nil
	}
	p, err := newPlanner(s.cfg.Command, s.pid, s.log)
	if err != nil {
		return nil, err
	}
	s.mech, s.gained = MechUprobe, true
	s.openPauses()
	p.res, p.w, p.pauses, p.addSource = s.res, s.w, s.pauses, s.addSource
	s.uprobes, s.planner = p, p
	return p, nil
}

// hookFilter is what trace remove and add do to a recording by
// -finstrument-functions hooks: the hooks call the library for every
// function, so the recorder filters their events by function. off holds,
// by location id, the windows [from, to) in which a function's events
// are dropped (to is math.MaxUint64 while it stays removed).
type hookFilter struct {
	off map[uint32][][2]uint64
}

// drops reports whether an event of function fn at time t is filtered
// out.
func (f *hookFilter) drops(fn uint32, t uint64) bool {
	for _, w := range f.off[fn] {
		if t >= w[0] && t < w[1] {
			return true
		}
	}
	return false
}

// removed reports whether fn is filtered out now.
func (f *hookFilter) removed(fn uint32) bool {
	ws := f.off[fn]
	return len(ws) > 0 && ws[len(ws)-1][1] == math.MaxUint64
}

// hookRequest carries out a probe request on a recording by hooks:
// remove filters out the functions matching the pattern from now on,
// add records those filtered out again; the Probe records say when
// (mechanism removed, and hook), as for uprobes. A root cannot be set:
// the hooks record every function.
func (s *session) hookRequest(req control.Request) (control.Answer, error) {
	if req.Cmd == control.CmdRoot {
		return control.Answer{}, errors.New("the target's -finstrument-functions hooks record every function: a root needs uprobes (record it with --mech uprobe); report --root FUNC shows a root's subgraph")
	}
	locs, err := s.hookLocations(req.Pattern)
	if err != nil {
		return control.Answer{}, err
	}
	if len(locs) == 0 {
		return control.Answer{}, fmt.Errorf("no function of the target's modules matches %q", req.Pattern)
	}
	if s.hooks.off == nil {
		s.hooks.off = map[uint32][][2]uint64{}
	}
	t := perf.Now()
	var names []string
	for loc, l := range locs {
		removed := s.hooks.removed(loc)
		rec := trace.Probe{Time: t, PID: uint32(s.pid), Function: loc, Address: l.addr, Mech: trace.ProbeHook}
		switch {
		case req.Cmd == control.CmdTraceRemove && !removed:
			s.hooks.off[loc] = append(s.hooks.off[loc], [2]uint64{t, math.MaxUint64})
			rec.Mech = trace.ProbeRemoved
		case req.Cmd == control.CmdTraceAdd && removed:
			s.hooks.off[loc][len(s.hooks.off[loc])-1][1] = t
		default:
			continue
		}
		names = append(names, l.name)
		if err := s.w.Write(&rec); err != nil {
			return control.Answer{}, err
		}
	}
	if len(names) == 0 {
		if req.Cmd == control.CmdTraceAdd {
			return control.Answer{}, fmt.Errorf("the hooks record every function: the %d functions matching %q are recorded already", len(locs), req.Pattern)
		}
		return control.Answer{}, fmt.Errorf("the %d functions matching %q are filtered out already", len(locs), req.Pattern)
	}
	return control.Answer{Probes: &control.ProbeChange{Count: len(names), Functions: listed(names)}}, nil
}

// hookLocation is a function a hook filter names: its name and address
// in its file.
type hookLocation struct {
	name string
	addr uint64
}

// hookLocations returns, by location id, the functions matching pattern
// in the files the target maps now: the ids the hooks' events resolve
// to, the module's path and the function's file offset.
func (s *session) hookLocations(pattern string) (map[uint32]hookLocation, error) {
	exe, err := targetPath(s.cfg.Command, s.pid)
	if err != nil {
		return nil, err
	}
	mods, err := matchMapped(s.pid, exe, pattern, nil, s.log)
	if err != nil {
		return nil, err
	}
	out := map[uint32]hookLocation{}
	for _, m := range mods {
		module, err := s.res.Module(m.path)
		if err != nil {
			return nil, err
		}
		for _, site := range m.sites {
			loc, err := s.res.FileLocation(uint32(s.pid), module, site.StartOffset)
			if err != nil {
				return nil, err
			}
			out[loc] = hookLocation{name: site.Function, addr: site.Start}
		}
	}
	return out, nil
}
