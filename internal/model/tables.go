package model

import (
	"cmp"
	"slices"

	"trueprof/internal/trace"
)

// Tables builds a Profile's tables (strings, locations, stacks, threads,
// processes) from a trace's records one at a time, as a recorder writes
// them, so that an analysis can run while recording (record
// --aggregate): the loader Load uses, kept open. Its Profile's Threads
// stay sorted after every record; it holds no time-ordered records:
// those go to the keep function given to NewTables.
type Tables struct {
	l *loader
}

// NewTables returns Tables for a trace with header h; each time-ordered
// record (Sample, Event, Switch, Adjust, IRQ, GoID) that Add reads goes
// to keep, which must not retain it.
func NewTables(h trace.Header, keep func(*Record)) *Tables {
	l := &loader{
		p:       &Profile{Header: h, Locations: []Location{{}}, Stacks: []StackNode{{}}},
		strings: map[uint32]string{0: ""},
		current: map[[2]uint32]*Thread{},
		keep:    keep,
	}
	return &Tables{l: l}
}

// Profile returns the profile the tables fill; it changes with every Add.
func (t *Tables) Profile() *Profile { return t.l.p }

// Add reads rec. threads reports that a thread incarnation was created or
// its start time set (an exec), which invalidates what callers learned
// from Profile.ThreadSpan. An error says rec refers to something never
// defined, as Load's Profile.Err would.
func (t *Tables) Add(rec trace.Record) (threads bool, err error) {
	l := t.l
	n := len(l.threads)
	var exec *Thread
	if c, ok := rec.(*trace.Comm); ok && c.Exec {
		exec = l.current[[2]uint32{c.PID, c.TID}]
	}
	if err := l.add(rec); err != nil {
		return false, err
	}
	if exec != nil && exec.Start != 0 {
		t.sort() // its start time may have just been set
		threads = true
	}
	if len(l.threads) == n {
		return threads, nil
	}
	p := l.p
	for _, th := range l.threads[n:] {
		p.Threads = append(p.Threads, th)
		if p.Process(th.PID) == nil {
			p.Processes = append(p.Processes, &Process{PID: th.PID})
			slices.SortFunc(p.Processes, func(a, b *Process) int { return cmp.Compare(a.PID, b.PID) })
		}
	}
	t.sort()
	return true, nil
}

// sort keeps the threads in Load's order (threadOrder).
func (t *Tables) sort() {
	slices.SortStableFunc(t.l.p.Threads, threadOrder)
}
