package record

import (
	"errors"
	"fmt"

	"trueprof/internal/symbolize"
	"trueprof/internal/trace"
	"trueprof/internal/uprobe"
)

// eventLabels marks an instrEvent that is a change of a goroutine's
// labels: its addr is the goroutine id and module the key of the change
// in session.labelSets (an instrEvent holds no pointers).
const eventLabels trace.EventKind = 0xfe

// startLabels follows the runtime/pprof labels of a Go target whose
// goroutines are followed, written as trace.Labels records, so that
// reports can keep the samples and events of the goroutines that carry
// given labels. A program that sets no labels is left alone; one whose
// label sets cannot be read is said once and recorded without.
func (s *session) startLabels(pid int, path string, layout symbolize.GoLayout) {
	l, err := uprobe.AttachLabels(pid, path, layout)
	if errors.Is(err, uprobe.ErrNoLabels) {
		return
	}
	if err != nil {
		fmt.Fprintf(s.log, "trueprof: goroutine labels not recorded: %v\n", err)
		return
	}
	s.sources = append(s.sources, &labelSource{l: l, s: s})
}

// labelSource delivers a Go target's label changes as events.
type labelSource struct {
	l *uprobe.Labels
	s *session
	// last holds the changes finish read, which the next drain delivers.
	last []instrEvent
}

func (src *labelSource) fds() []int { return src.l.Fds() }

func (src *labelSource) drain(fn func(instrEvent)) {
	for _, e := range src.last {
		fn(e)
	}
	src.last = nil
	src.l.Read(func(c uprobe.LabelChange) {
		s := src.s
		if s.labelSets == nil {
			s.labelSets = map[uint32]uprobe.LabelChange{}
		}
		s.nextLabel++
		s.labelSets[s.nextLabel] = c
		fn(instrEvent{time: c.Time, pid: c.PID, tid: c.TID, addr: c.GoID, module: s.nextLabel, kind: eventLabels})
	})
}

func (src *labelSource) finish() {
	var last []instrEvent
	src.drain(func(e instrEvent) { last = append(last, e) })
	src.last = last
}

func (src *labelSource) lost() uint64 { return src.l.Lost() }
func (src *labelSource) close() error { return src.l.Close() }

// writeLabels writes the trace record of a label change.
func (s *session) writeLabels(e *instrEvent) error {
	c := s.labelSets[e.module]
	delete(s.labelSets, e.module)
	r := &trace.Labels{Time: e.time, PID: e.pid, GoID: e.addr, Truncated: c.Truncated}
	for _, p := range c.Pairs {
		k, err := s.w.Intern(p.Key)
		if err != nil {
			return err
		}
		v, err := s.w.Intern(p.Value)
		if err != nil {
			return err
		}
		r.Pairs = append(r.Pairs, trace.LabelPair{Key: k, Value: v})
	}
	return s.w.Write(r)
}
