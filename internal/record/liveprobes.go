package record

import (
	"errors"
	"fmt"

	"trueprof/internal/control"
	"trueprof/internal/perf"
)

// Probes changed while the target runs: trueprof ctl trace add, trace
// remove and root (docs/control.md). The loop carries them out between
// two drains, like every request; the planner does the placing.

// probeRequest carries out a trace-add, trace-remove or root request.
func (s *session) probeRequest(req control.Request) (control.Answer, error) {
	if s.mech == MechHook {
		return control.Answer{}, errors.New("the target's -finstrument-functions hooks record every function: trace add, remove and root need uprobes (record it with --mech uprobe --trace PATTERN)")
	}
	if len(s.cfg.Command) == 0 && !processAlive(s.pid) {
		return control.Answer{}, fmt.Errorf("the attached process %d is gone", s.pid)
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
	return control.Answer{Probes: ch}, nil
}

// livePlanner returns the session's uprobe planner, making one for a
// recording that probed nothing so far: a sampling recording gains
// function events (its header still says no instrumentation; the Probe
// records say from when each function counts, and the trace is read as
// an instrumented one, without calibration).
func (s *session) livePlanner() (*uprobePlanner, error) {
	if s.uprobes != nil {
		return s.uprobes, nil
	}
	p, err := newPlanner(s.cfg.Command, s.pid, s.log)
	if err != nil {
		return nil, err
	}
	s.mech = MechUprobe
	s.openPauses()
	p.res, p.w, p.pauses, p.addSource = s.res, s.w, s.pauses, s.addSource
	s.uprobes, s.planner = p, p
	return p, nil
}
