package record

import (
	"bytes"
	"testing"

	"trueprof/internal/control"
	"trueprof/internal/trace"
)

// TestControlPause drives pause and resume through controlRequest on a
// session without a kernel: records of the open pause and, in the
// backlog, of the closed one are dropped and counted, others kept, and
// each pause is one Pause record with its drops.
func TestControlPause(t *testing.T) {
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, &trace.Header{}, trace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := &session{w: w}
	if a, _ := s.controlRequest(control.Request{Cmd: control.CmdResume}, nil); a.Error != "not paused" {
		t.Errorf("resume unpaused: %+v", a)
	}
	if s.drop(100) {
		t.Error("dropped a record of a session never paused")
	}
	s.ctl.pausedAt, s.ctl.pauses = 1000, 1 // as CmdPause at 1000
	if a, _ := s.controlRequest(control.Request{Cmd: control.CmdPause}, nil); a.Error != "already paused" {
		t.Errorf("pause paused: %+v", a)
	}
	for _, tc := range []struct {
		t    uint64
		drop bool
	}{{999, false}, {1000, true}, {5000, true}} {
		if got := s.drop(tc.t); got != tc.drop {
			t.Errorf("paused since 1000: drop(%d) = %v", tc.t, got)
		}
	}
	if err := s.endPause(6000); err != nil {
		t.Fatal(err)
	}
	// The backlog still holds records of the pause.
	for _, tc := range []struct {
		t    uint64
		drop bool
	}{{999, false}, {5999, true}, {6000, false}} {
		if got := s.drop(tc.t); got != tc.drop {
			t.Errorf("paused from 1000 to 6000: drop(%d) = %v", tc.t, got)
		}
	}
	if err := s.endPause(7000); err != nil { // not paused: nothing
		t.Fatal(err)
	}
	if st := s.controlStatus(); st.Dropped != 3 || st.Pauses != 1 || st.Paused || st.PausedNS != 5000 {
		t.Errorf("status %+v: want 3 dropped in one pause of 5000 ns", st)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := trace.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var pauses []trace.Pause
	for {
		rec, err := r.Next()
		if err != nil {
			break
		}
		if p, ok := rec.(*trace.Pause); ok {
			pauses = append(pauses, *p)
		}
	}
	if len(pauses) != 1 || pauses[0] != (trace.Pause{Time: 6000, Duration: 5000, Dropped: 2}) {
		t.Errorf("Pause records %+v, want one ending at 6000 after 5000 ns with 2 dropped", pauses)
	}
}

// TestControlPausesInBacklog closes two pauses before the loop reaches
// the records of either (a hooked target's backlog can be that long):
// the records of both are dropped, those between and after them kept,
// also when they come out of order.
func TestControlPausesInBacklog(t *testing.T) {
	w, err := trace.NewWriter(&bytes.Buffer{}, &trace.Header{}, trace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := &session{w: w}
	for _, p := range [][2]uint64{{1000, 2000}, {3000, 4000}} {
		s.ctl.pausedAt = p[0]
		if err := s.endPause(p[1]); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		t    uint64
		drop bool
	}{{500, false}, {1000, true}, {1999, true}, {2000, false}, {2999, false}, {3000, true}, {3999, true}, {4000, false}, {1500, true}, {3500, true}, {2500, false}} {
		if got := s.drop(tc.t); got != tc.drop {
			t.Errorf("paused from 1000 to 2000 and 3000 to 4000: drop(%d) = %v", tc.t, got)
		}
	}
}
