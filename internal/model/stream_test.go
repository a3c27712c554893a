package model

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"trueprof/internal/trace"
)

// streamed reads data in two passes (OpenStream's, then Records, which
// hands out the records the first pass held if there were at most hold)
// into a Profile like Load's, or returns the error of Records.
func streamed(t *testing.T, data []byte, hold int) (*Stream, *Profile, error) {
	t.Helper()
	s, err := newStream(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }, hold)
	if err != nil {
		t.Fatal(err)
	}
	p := *s.Profile
	rs, err := s.Records()
	if err != nil {
		return s, nil, err
	}
	defer rs.Close()
	var n uint64
	for _, c := range s.Counts {
		n += c
	}
	if held := s.Lateness == 0 && n <= uint64(hold); rs.Held() != held {
		t.Errorf("%d records, %d ns late, hold %d: Records holds them %v, want %v", n, s.Lateness, hold, rs.Held(), held)
	}
	var r Record
	for {
		err := rs.Next(&r)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p.appendRecord(&r)
	}
	return s, &p, nil
}

// TestStreamEqualsLoad reads every trace fixture both ways: the tables
// of the first pass and the records of the second are Load's, record for
// record, except for wrap mode's samples, written out of order, which
// the stream refuses (ErrNotStreamable) rather than reorder wrongly.
func TestStreamEqualsLoad(t *testing.T) {
	files, _ := filepath.Glob("../trace/testdata/*.trace")
	if len(files) == 0 {
		t.Fatal("no trace fixtures")
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		want, err := Load(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		// Records reads the file again (hold 0), or hands out what the
		// first pass held: all, or none when it had more than 100.
		for _, hold := range []int{0, 100, maxHeld} {
			s, got, err := streamed(t, data, hold)
			if err != nil {
				if errors.Is(err, ErrNotStreamable) && s.Lateness > ReorderWindow {
					t.Logf("%s: %v (records up to %d ns late)", name, err, s.Lateness)
					continue
				}
				t.Fatalf("%s: %v", name, err)
			}
			if n := uint64(len(want.Samples)); s.Counts[RecordSample] != n {
				t.Errorf("%s: counted %d samples, Load has %d", name, s.Counts[RecordSample], n)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s, hold %d: the stream differs from Load:\n got %+v\nwant %+v", name, hold, got, want)
			}
		}
	}
}

// TestStreamReorders writes records up to half a second out of order,
// as the recorder's per-CPU buffers do, across several chunks: the
// stream puts them back in Load's order, ties in file order.
func TestStreamReorders(t *testing.T) {
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, &trace.Header{Event: "cpu-clock"}, trace.Options{Mode: trace.ModeNormal})
	if err != nil {
		t.Fatal(err)
	}
	const ms = 1_000_000
	for i := range 3000 {
		// Two "CPUs": one on time, one 500 ms behind; equal times tie.
		base := uint64(i) * ms
		if err := w.Write(&trace.Switch{Time: base + 600*ms, PID: 1, TID: 1, CPU: 0, Out: i%2 == 0}); err != nil {
			t.Fatal(err)
		}
		if err := w.Write(&trace.Switch{Time: base + 100*ms, PID: 2, TID: 2, CPU: 1, Out: i%2 == 0}); err != nil {
			t.Fatal(err)
		}
		if err := w.Write(&trace.GoID{Time: base + 100*ms, PID: 2, TID: 2, GoID: uint64(i)}); err != nil {
			t.Fatal(err)
		}
		if i%500 == 0 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Write(&trace.End{Time: 4000 * ms}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	want, err := Load(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	s, got, err := streamed(t, buf.Bytes(), maxHeld)
	if err != nil {
		t.Fatal(err)
	}
	if s.Lateness != 500*ms {
		t.Errorf("lateness %d, want %d", s.Lateness, 500*ms)
	}
	if !reflect.DeepEqual(got.Switches, want.Switches) || !reflect.DeepEqual(got.GoIDs, want.GoIDs) {
		t.Error("the stream's order differs from Load's")
	}
	if len(got.Switches) != 6000 || len(got.GoIDs) != 3000 {
		t.Errorf("%d switches, %d goids", len(got.Switches), len(got.GoIDs))
	}
}

// TestStreamReordersSequences interleaves ordered sequences, as a
// recording writes its kernel records ahead of its probe events' batches:
// a few (the earliest goes out as read, each other a lane of Records),
// then more than maxLanes (the rest wait in the heap), each mixing
// events with other kinds, with ties across and within sequences. The
// stream gives Load's order and holds no more lanes than it needs.
func TestStreamReordersSequences(t *testing.T) {
	for _, seqs := range []int{3, maxLanes + 9} {
		t.Run(fmt.Sprint(seqs), func(t *testing.T) {
			data := writeTrace(t, func(*trace.Writer) []trace.Record {
				recs := []trace.Record{
					&trace.String{ID: 1, Text: "prog"}, &trace.String{ID: 2, Text: "f"},
					&trace.Location{ID: 1, Module: 1, Offset: 0x10, Lines: []trace.Line{{Function: 2}}},
				}
				for i := range 2000 {
					for k := range seqs {
						// Sequence k runs k*100 us behind the first; times
						// step by 50 ns in 100 ns: each sequence ties with
						// itself and with the others.
						ts := uint64(10_000_000+100*(i-i%2)) - uint64(k)*100_000
						tid := uint32(10 + k)
						if i%5 == 4 {
							recs = append(recs, &trace.Switch{Time: ts, PID: 5, TID: tid, Out: i%10 == 4})
						} else {
							recs = append(recs, &trace.Event{Time: ts, PID: 5, TID: tid, Kind: trace.EventKind(1 + i%2), Function: 1})
						}
					}
				}
				return append(recs, &trace.End{Time: 20_000_000})
			})
			lanes, heaped := 0, 0
			want, _ := streamOrder(t, data, func(rs *Records) {
				lanes, heaped = max(lanes, len(rs.lanes)), max(heaped, len(rs.q))
			})
			if len(want.Events) != 1600*seqs || len(want.Switches) != 400*seqs {
				t.Errorf("%d events, %d switches", len(want.Events), len(want.Switches))
			}
			// The earliest sequence goes out as read; the others wait.
			if wantLanes := min(seqs-1, maxLanes); lanes != wantLanes || (heaped > 0) != (seqs-1 > maxLanes) {
				t.Errorf("%d sequences: %d lanes (want %d), up to %d records in the heap", seqs, lanes, wantLanes, heaped)
			}
		})
	}
}

// TestStreamWindowFollowsWhatIsToCome writes a thread's events behind
// the context switches of the CPUs, as a recording's probe events trail
// its kernel records: 20 us behind, and 100 ms behind in one stretch.
// The window is not the file's lateness (100 ms, 100,000 events), but
// what the first pass saw is still to come: the events go as they are
// read, and only the switches wait, while they lead.
func TestStreamWindowFollowsWhatIsToCome(t *testing.T) {
	const us = 1000
	data := writeTrace(t, func(*trace.Writer) []trace.Record {
		recs := []trace.Record{
			&trace.String{ID: 1, Text: "prog"}, &trace.String{ID: 2, Text: "f"},
			&trace.Location{ID: 1, Module: 1, Offset: 0x10, Lines: []trace.Line{{Function: 2}}},
		}
		next := uint64(0) // the next switch's time
		for i := range 300_000 {
			ts := uint64(1_000_000 + i*us)
			lead := uint64(20 * us)
			if i >= 100_000 && i < 110_000 {
				lead = 100_000 * us
			}
			for next == 0 || next <= ts+lead {
				if next == 0 {
					next = ts
				}
				recs = append(recs, &trace.Switch{Time: next, PID: 7, TID: 7, CPU: 1, Out: next/(10*us)%2 == 0})
				next += 10 * us
			}
			recs = append(recs, &trace.Event{Time: ts, PID: 5, TID: 5, Kind: trace.EventKind(1 + i%2), Function: 1})
		}
		return append(recs, &trace.End{Time: 1_000_000_000})
	})
	most := 0
	_, s := streamOrder(t, data, func(rs *Records) { most = max(most, rs.waitingRecords()) })
	if s.Lateness < 99_000*us {
		t.Fatalf("lateness %d: the test lost its late stretch", s.Lateness)
	}
	// The stretch's switches.
	if most > 10_000 {
		t.Errorf("up to %d records waited (the lateness is %d events)", most, s.Lateness/us)
	}
	t.Logf("up to %d records waited", most)
}

// streamOrder reads data as a stream holding nothing in its first pass,
// calling each after every record, and checks that the records come in
// Load's order; it returns Load's profile and the stream.
func streamOrder(t *testing.T, data []byte, each func(*Records)) (*Profile, *Stream) {
	t.Helper()
	want, err := Load(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	s, err := newStream(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }, 0)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := s.Records()
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	p := *s.Profile
	var r Record
	for rs.Next(&r) == nil {
		p.appendRecord(&r)
		each(rs)
	}
	if !reflect.DeepEqual(&p, want) {
		t.Errorf("the stream's order differs from Load's")
	}
	return want, s
}

// waitingRecords is the number of records rs holds in its window.
func (rs *Records) waitingRecords() int {
	n := len(rs.q)
	for _, l := range rs.lanes {
		for _, b := range l.recs.blocks {
			n += len(b)
		}
		if len(l.recs.blocks) > 0 {
			n -= l.recs.head
		}
	}
	return n
}

// TestStreamSkimsEvents reads an instrumented trace whose first pass,
// holding nothing (hold 0), skims the runs of events of one thread
// (trace.Reader.SkimEvents): its counts, times, threads and records are
// Load's. The trace has runs cut by another thread, by a function defined
// later, by times that go back, and by a thread's exit written before
// events after it, which belong to a new incarnation of the tid; it ends
// with an event of a function never defined.
func TestStreamSkimsEvents(t *testing.T) {
	data := writeTrace(t, func(*trace.Writer) []trace.Record { return skimmedEvents() })
	want, err := Load(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if len(want.Threads) < 3 || !errors.Is(want.Err, trace.ErrCorrupt) {
		t.Fatalf("%d thread incarnations (want the exited tid's two and another), error %v", len(want.Threads), want.Err)
	}
	held, _, err := streamed(t, data, maxHeld)
	if err != nil {
		t.Fatal(err)
	}
	s, got, err := streamed(t, data, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the skimming stream differs from Load:\n got %+v\nwant %+v", got, want)
	}
	if n := uint64(len(want.Events)); s.Counts[RecordEvent] != n {
		t.Errorf("counted %d events, Load has %d", s.Counts[RecordEvent], n)
	}
	if s.Counts != held.Counts || s.First != held.First || s.Last != held.Last || s.Lateness != held.Lateness || s.records != held.records {
		t.Errorf("skimmed: counts %v, times %d-%d, %d late, %d records; held: %v, %d-%d, %d late, %d records",
			s.Counts, s.First, s.Last, s.Lateness, s.records, held.Counts, held.First, held.Last, held.Lateness, held.records)
	}
	if s.Lateness == 0 {
		t.Error("no event came late: the test lost its times that go back")
	}
}

// skimmedEvents are the records of TestStreamSkimsEvents.
func skimmedEvents() []trace.Record {
	recs := []trace.Record{
		&trace.String{ID: 1, Text: "prog"}, &trace.String{ID: 2, Text: "f"},
		&trace.Location{ID: 1, Module: 1, Offset: 0x10, Lines: []trace.Line{{Function: 2}}},
		&trace.Exit{Time: 50_200, PID: 5, TID: 6}, // inside a run of tid 6, 50,130-50,283
	}
	for i := range 6000 {
		tid := uint32(5 + i%100/90) // runs of 90 events of tid 5, then 10 of tid 6
		recs = append(recs, &trace.Event{Time: uint64(1000 + 17*i - 40*(i%50/49)), PID: 5, TID: tid, Kind: trace.EventKind(1 + i%2), Function: 1})
		if i == 3000 {
			recs = append(recs, &trace.Location{ID: 2, Module: 1, Offset: 0x20, Lines: []trace.Line{{Function: 2}}})
		}
		if i > 3000 && i%7 == 0 {
			recs = append(recs, &trace.Event{Time: uint64(1000 + 17*i), PID: 5, TID: tid, Kind: trace.EventEntry, Function: 2})
		}
	}
	// An event of a function never defined, in a run of tid 6: the chunk is
	// corrupt, and the skim stops before it as Load does.
	recs = append(recs, &trace.Event{Time: 103_000, PID: 5, TID: 6, Kind: trace.EventExit, Function: 3}, &trace.End{Time: 200_000})
	return recs
}
