package modeltest

import (
	"io"

	"trueprof/internal/trace"
)

// WriteCalls writes to w the trace of a hook recording of one thread
// (pid and tid 7) whose main calls mid mids times, mid calling leaf
// twice: 6·mids+2 events, 9 ns apart, the shape of a
// -finstrument-functions build of testutil.CallsC. Benchmarks of
// the analysis read it as a file, apart from the recorder's drops.
func WriteCalls(w io.Writer, mids int) error {
	tw, err := trace.NewWriter(w, &trace.Header{Event: "dummy", Instrument: "hook"}, trace.Options{Mode: trace.ModeNormal})
	if err != nil {
		return err
	}
	// The first error is kept and the rest of the writes skipped.
	var werr error
	write := func(r trace.Record) {
		if werr == nil {
			werr = tw.Write(r)
		}
	}
	intern := func(s string) uint32 {
		id, err := tw.Intern(s)
		if werr == nil {
			werr = err
		}
		return id
	}
	mod := intern("/usr/bin/calls_fi")
	for i, name := range []string{"main", "mid", "leaf"} {
		write(&trace.Location{ID: uint32(i + 1), Address: 0x401000 + uint64(i)*0x40, Module: mod,
			Offset: 0x1000 + uint64(i)*0x40, Lines: []trace.Line{{Function: intern(name)}}})
	}
	now := uint64(1_000_000)
	write(&trace.Comm{Time: now, PID: 7, TID: 7, Name: intern("calls_fi"), Exec: true})
	ev := func(k trace.EventKind, fn uint32) {
		now += 9
		write(&trace.Event{Time: now, PID: 7, TID: 7, Kind: k, Function: fn})
	}
	ev(trace.EventEntry, 1)
	for range mids {
		ev(trace.EventEntry, 2)
		ev(trace.EventEntry, 3)
		ev(trace.EventExit, 3)
		ev(trace.EventEntry, 3)
		ev(trace.EventExit, 3)
		ev(trace.EventExit, 2)
	}
	ev(trace.EventExit, 1)
	write(&trace.End{Time: now + 10, Reason: intern("exited")})
	if werr != nil {
		return werr
	}
	return tw.Close()
}
