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
// stay sorted after every record, each new one inserted in its place; it
// holds no time-ordered records: those go to the keep function given to
// NewTables.
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
		if exec != nil && exec.Start != 0 {
			exec = nil // only a start time still unset is set
		}
	}
	if err := l.add(rec); err != nil {
		return false, err
	}
	if exec != nil && exec.Start != 0 {
		// Its start time may have just been set: it moves among its
		// tid's incarnations.
		p := l.p
		i := slices.Index(p.Threads, exec)
		p.Threads = slices.Delete(p.Threads, i, i+1)
		insertThread(p, exec)
		threads = true
	}
	if len(l.threads) == n {
		return threads, nil
	}
	p := l.p
	for _, th := range l.threads[n:] {
		insertThread(p, th)
		byPID := func(pr *Process, pid uint32) int { return cmp.Compare(pr.PID, pid) }
		if i, found := slices.BinarySearchFunc(p.Processes, th.PID, byPID); !found {
			p.Processes = slices.Insert(p.Processes, i, &Process{PID: th.PID})
		}
	}
	return true, nil
}

// insertThread inserts th into p.Threads in Load's order (threadOrder),
// after the threads it ties with, as Load's stable sort leaves them: a
// binary search, where sorting the whole list again for each new thread
// made adding n threads cost n² log n.
func insertThread(p *Profile, th *Thread) {
	i, _ := slices.BinarySearchFunc(p.Threads, th, func(a, b *Thread) int {
		return cmp.Or(threadOrder(a, b), -1) // ties: past them
	})
	p.Threads = slices.Insert(p.Threads, i, th)
}
