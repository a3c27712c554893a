package trace

import (
	"bytes"
	"cmp"
	"errors"
	"reflect"
	"slices"
	"testing"
)

// samplesOf splits recs into samples and the other records.
func samplesOf(recs []Record) (samples []*Sample, other []Record) {
	for _, r := range recs {
		if s, ok := r.(*Sample); ok {
			samples = append(samples, s)
		} else {
			other = append(other, r)
		}
	}
	return samples, other
}

func TestModeNormal(t *testing.T) {
	const limit = 64 << 10
	stream := recorderStream(50000)
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testHeader(), Options{Mode: ModeNormal, SizeLimit: limit, ChunkSize: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	var accepted []Record
	var rejected int
	for _, r := range stream {
		err := w.Write(r)
		switch {
		case errors.Is(err, ErrSizeLimit):
			if _, ok := r.(*Sample); !ok {
				t.Fatalf("Write(%T) = ErrSizeLimit: only samples may be refused", r)
			}
			rejected++
		case err != nil:
			t.Fatal(err)
		default:
			if rejected > 0 {
				if _, ok := r.(*Sample); ok {
					t.Fatal("a sample was accepted after ErrSizeLimit")
				}
			}
			accepted = append(accepted, r)
		}
	}
	if rejected == 0 {
		t.Fatal("the size limit was never reached")
	}
	lost := &Lost{Time: 1, Kind: LostSize, Count: uint64(rejected)}
	if err := w.Write(lost); err != nil {
		t.Fatalf("Write(Lost) after the limit: %v", err)
	}
	accepted = append(accepted, lost)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.Rejected != uint64(rejected) {
		t.Errorf("Stats().Rejected = %d, want %d", st.Rejected, rejected)
	}
	size := int64(buf.Len())
	t.Logf("limit %d, file %d bytes, %d samples refused", limit, size, rejected)
	// The records after the limit (a few Lost, Throttle, Exit, End) may
	// go slightly over; the samples stop within sizeLimitSlack below.
	if size > limit || size < limit-2*sizeLimitSlack {
		t.Errorf("file size %d, want close to the limit %d", size, limit)
	}
	h, got, err := readAll(t, buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if h.Mode != "normal" || h.SizeLimit != limit {
		t.Errorf("header mode %q limit %d", h.Mode, h.SizeLimit)
	}
	if !reflect.DeepEqual(got, accepted) {
		t.Errorf("read %d records, want the %d accepted", len(got), len(accepted))
	}
}

func TestModeWrap(t *testing.T) {
	const limit = 32 << 10
	stream := recorderStream(50000)
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testHeader(), Options{Mode: ModeWrap, SizeLimit: limit})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range stream {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if st := w.Stats(); st.Retained == 0 || st.Retained > limit {
		t.Errorf("Stats().Retained = %d, want in (0, %d]", st.Retained, limit)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	_, got, err := readAll(t, buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	wantSamples, wantOther := samplesOf(stream)
	gotSamples, gotOther := samplesOf(got)
	t.Logf("file %d bytes; kept %d of %d samples; %+v", buf.Len(), len(gotSamples), len(wantSamples), st)

	// All non-sample records, End last, with a Lost record before it
	// stamped with the newest discarded sample's time.
	kept := map[*Sample]bool{}
	for _, s := range checkThreadSuffixes(t, gotSamples, wantSamples) {
		kept[s] = true
	}
	var newestDiscarded uint64
	for _, s := range wantSamples {
		if !kept[s] {
			newestDiscarded = max(newestDiscarded, s.Time)
		}
	}
	end := wantOther[len(wantOther)-1]
	wantOther = append(wantOther[:len(wantOther)-1:len(wantOther)-1],
		&Lost{Time: newestDiscarded, Kind: LostWrap, Count: st.Discarded}, end)
	if !reflect.DeepEqual(gotOther, wantOther) {
		t.Errorf("non-sample records differ: got %d, want %d", len(gotOther), len(wantOther))
	}
	if got[len(got)-1] != gotOther[len(gotOther)-1] {
		t.Errorf("last record is %T, want *End", got[len(got)-1])
	}
	if st.Discarded == 0 || st.Discarded+uint64(len(gotSamples)) != uint64(len(wantSamples)) {
		t.Errorf("discarded %d + kept %d != %d samples", st.Discarded, len(gotSamples), len(wantSamples))
	}
	// The other records take their share of the limit: the whole file
	// stays within it.
	if buf.Len() > limit {
		t.Errorf("file of %d bytes, limit %d", buf.Len(), limit)
	}
}

// checkThreadSuffixes checks that got holds, for each thread of want,
// the newest of its samples in order and at least one, and returns want's
// samples equal to them.
func checkThreadSuffixes(t *testing.T, got, want []*Sample) []*Sample {
	t.Helper()
	byThread := func(ss []*Sample) map[uint32][]*Sample {
		m := map[uint32][]*Sample{}
		for _, s := range ss {
			m[s.TID] = append(m[s.TID], s)
		}
		return m
	}
	g, wt := byThread(got), byThread(want)
	var kept []*Sample
	for tid, ws := range wt {
		gs := g[tid]
		if len(gs) == 0 || len(gs) > len(ws) || !reflect.DeepEqual(gs, ws[len(ws)-len(gs):]) {
			t.Errorf("thread %d: kept %d samples, not the newest of its %d", tid, len(gs), len(ws))
			continue
		}
		kept = append(kept, ws[len(ws)-len(gs):]...)
	}
	if len(g) != len(wt) {
		t.Errorf("samples of %d threads kept, want %d", len(g), len(wt))
	}
	return kept
}

// writeSize is the size of a trace of recs alone.
func writeSize(t *testing.T, recs []Record) int64 {
	return int64(len(writeTrace(t, Options{}, recs)))
}

func TestModeWrapNothingDiscarded(t *testing.T) {
	stream := recorderStream(100)
	data := writeTrace(t, Options{Mode: ModeWrap, SizeLimit: 1 << 20}, stream)
	_, got, err := readAll(t, data)
	if err != nil {
		t.Fatal(err)
	}
	// Each thread's samples come in chunks of their own: in time order
	// (the stream's order) once sorted.
	wantSamples, wantOther := samplesOf(stream)
	gotSamples, gotOther := samplesOf(got)
	slices.SortStableFunc(gotSamples, func(a, b *Sample) int { return cmp.Compare(a.Time, b.Time) })
	if !reflect.DeepEqual(gotSamples, wantSamples) || !reflect.DeepEqual(gotOther, wantOther) {
		t.Error("records differ")
	}
}

func TestModeContinuous(t *testing.T) {
	stream := recorderStream(50000)
	// SizeLimit is ignored in continuous mode.
	data := writeTrace(t, Options{Mode: ModeContinuous, SizeLimit: 1000, ChunkSize: 8 << 10}, stream)
	h, got, err := readAll(t, data)
	if err != nil {
		t.Fatal(err)
	}
	if h.Mode != "continuous" || h.SizeLimit != 0 {
		t.Errorf("header mode %q limit %d", h.Mode, h.SizeLimit)
	}
	if !reflect.DeepEqual(got, stream) {
		t.Errorf("read %d records, want %d", len(got), len(stream))
	}
}

// TestFlush checks that Flush makes every record so far readable, as the
// recorder's one-second ticker relies on.
func TestFlush(t *testing.T) {
	stream := recorderStream(1000)
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testHeader(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range stream {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
		if i%300 != 0 {
			continue
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		// Reading what a SIGKILL would leave behind right now.
		_, got, err := readAll(t, bytes.Clone(buf.Bytes()))
		if err != nil || !reflect.DeepEqual(got, stream[:i+1]) {
			t.Fatalf("after Flush at record %d: read %d records, err %v", i, len(got), err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// eventStream is an instrumented recording's records: a module, a
// location, then n calls of one thread (entry and exit each), with an
// adjustment every 1000 calls.
func eventStream(n int) []Record {
	recs := []Record{
		&String{ID: 1, Text: "calls"},
		&Location{ID: 1, Address: 0x1000, Module: 1, Offset: 0x1000},
	}
	t := uint64(1000)
	for i := 0; i < n; i++ {
		recs = append(recs, &Event{Time: t, PID: 7, TID: 7, Kind: EventEntry, Function: 1})
		recs = append(recs, &Event{Time: t + 17 + uint64(i%5), PID: 7, TID: 7, Kind: EventExit, Function: 1})
		if i%1000 == 999 {
			recs = append(recs, &Adjust{Time: t + 30, PID: 7, TID: 7, Duration: 5})
		}
		t += 40 + uint64(i%7)
	}
	return recs
}

// TestModesBoundEvents checks that events count against the size limit
// like samples, with their loss in a Lost record, and that adjustments
// (like every record but samples and events) are all kept.
func TestModesBoundEvents(t *testing.T) {
	const limit = 16 << 10
	stream := eventStream(200000)
	var events, adjusts int
	for _, r := range stream {
		switch r.(type) {
		case *Event:
			events++
		case *Adjust:
			adjusts++
		}
	}
	for _, tc := range []struct {
		mode Mode
		kind LostKind
	}{
		{ModeNormal, LostSize},
		{ModeWrap, LostWrap},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			var buf bytes.Buffer
			w, err := NewWriter(&buf, testHeader(), Options{Mode: tc.mode, SizeLimit: limit, ChunkSize: 16 << 10})
			if err != nil {
				t.Fatal(err)
			}
			refused := 0
			for _, r := range stream {
				err := w.Write(r)
				switch {
				case errors.Is(err, ErrSizeLimit):
					if _, ok := r.(*Event); !ok {
						t.Fatalf("Write(%T) = ErrSizeLimit: only samples and events may be refused", r)
					}
					refused++
				case err != nil:
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			_, got, err := readAll(t, buf.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			var kept, keptAdjusts int
			var lost uint64
			var lastKept, firstKept uint64
			for _, r := range got {
				switch r := r.(type) {
				case *Event:
					if kept == 0 {
						firstKept = r.Time
					}
					kept++
					lastKept = r.Time
				case *Adjust:
					keptAdjusts++
				case *Lost:
					if r.Kind != tc.kind {
						t.Errorf("Lost kind %d, want %d", r.Kind, tc.kind)
					}
					lost += r.Count
				}
			}
			t.Logf("%s: file %d bytes for a %d-byte limit; %d of %d events kept, %d lost, %d refused by Write",
				tc.mode, buf.Len(), limit, kept, events, lost, refused)
			if kept == 0 || kept == events {
				t.Fatalf("kept %d of %d events: the limit did not bound them", kept, events)
			}
			if uint64(kept)+lost != uint64(events) {
				t.Errorf("kept %d + lost %d != %d events", kept, lost, events)
			}
			if keptAdjusts != adjusts {
				t.Errorf("kept %d of %d adjustments: they are never bounded", keptAdjusts, adjusts)
			}
			// Normal keeps the oldest events, wrap the newest; the
			// adjustments come on top of the limit.
			var last uint64
			for _, r := range stream {
				if e, ok := r.(*Event); ok {
					last = e.Time
				}
			}
			switch tc.mode {
			case ModeNormal:
				if refused != int(lost) || lastKept == last {
					t.Errorf("normal: %d refused, %d lost, last kept event at %d (stream ends at %d)", refused, lost, lastKept, last)
				}
			case ModeWrap:
				if refused != 0 || lastKept != last || firstKept == 1000 {
					t.Errorf("wrap: %d refused, kept events %d..%d of 1000..%d", refused, firstKept, lastKept, last)
				}
			}
			if max := int64(limit + 8<<10); int64(buf.Len()) > max {
				t.Errorf("file %d bytes, want at most %d", buf.Len(), max)
			}
		})
	}
}

// TestModeWrapPerThread records three thread incarnations in wrap mode:
// thread 10 busy early, then exiting (its Exit record written before its
// last 120,000 events, which stay its own); thread 11 busy late, more than the
// whole budget; thread 10's id reused for a few calls at the end. Each
// keeps its most recent events as whole calls (cut where its depth was
// lowest: only main's exit lacks its entry), the quiet ones included,
// and the Lost record counts every event that went.
func TestModeWrapPerThread(t *testing.T) {
	const limit = 16 << 10
	var stream []Record
	var now uint64 = 1000
	// calls appends a thread's main entry, n mid calls (two leaf calls
	// each) and main's exit.
	calls := func(tid uint32, n int) {
		ev := func(k EventKind, fn uint32) {
			now += 7 + now%5
			stream = append(stream, &Event{Time: now, PID: 10, TID: tid, Kind: k, Function: fn})
		}
		ev(EventEntry, 1)
		for range n {
			ev(EventEntry, 2)
			ev(EventEntry, 3)
			ev(EventExit, 3)
			ev(EventEntry, 3)
			ev(EventExit, 3)
			ev(EventExit, 2)
		}
		ev(EventExit, 1)
	}
	calls(10, 50000)
	// The Exit comes before the thread's last events, as the kernel's
	// record comes before the hooks' rings are drained.
	exit := &Exit{Time: now + 1, PID: 10, PPID: 1, TID: 10, PTID: 10}
	stream = slices.Insert(stream, len(stream)-6*20000, Record(exit))
	calls(11, 200000)
	calls(10, 100)
	stream = append(stream, &End{Time: now + 1})

	data := writeTrace(t, Options{Mode: ModeWrap, SizeLimit: limit, ChunkSize: 64 << 10}, stream)
	_, got, err := readAll(t, data)
	if err != nil {
		t.Fatal(err)
	}
	// The incarnations, told apart by time: the Exit splits thread 10.
	inc := func(e *Event) int {
		if e.TID == 11 {
			return 1
		}
		if e.Time > exit.Time {
			return 2
		}
		return 0
	}
	var want, kept [3][]Event
	for _, r := range stream {
		if e, ok := r.(*Event); ok {
			want[inc(e)] = append(want[inc(e)], *e)
		}
	}
	var lost uint64
	for _, r := range got {
		switch r := r.(type) {
		case *Event:
			kept[inc(r)] = append(kept[inc(r)], *r)
		case *Lost:
			lost += r.Count
		}
	}
	t.Logf("file %d bytes for a %d-byte budget: kept %d of %d, %d of %d, %d of %d events; %d lost",
		len(data), limit, len(kept[0]), len(want[0]), len(kept[1]), len(want[1]), len(kept[2]), len(want[2]), lost)
	var total, all uint64
	for i := range want {
		k, wt := kept[i], want[i]
		total += uint64(len(k))
		all += uint64(len(wt))
		if len(k) == 0 || len(k) > len(wt) || !reflect.DeepEqual(k, wt[len(wt)-len(k):]) {
			t.Errorf("incarnation %d: kept %d events, not the newest of its %d", i, len(k), len(wt))
			continue
		}
		// Replayed on a shadow stack: whole calls but main, whose entry
		// went before the cut.
		var depth, unmatched int
		for _, e := range k {
			switch {
			case e.Kind == EventEntry:
				depth++
			case depth > 0:
				depth--
			default:
				unmatched++
			}
		}
		if wantCut := min(len(wt)-len(k), 1); unmatched != wantCut || depth != 0 {
			t.Errorf("incarnation %d: %d exits without their entry (want %d), %d calls open at the end", i, unmatched, wantCut, depth)
		}
	}
	if len(kept[1]) == len(want[1]) {
		t.Error("the busy thread kept everything: the budget did not bound it")
	}
	if total+lost != all {
		t.Errorf("kept %d + lost %d != %d events", total, lost, all)
	}
	if size := int64(len(data)) - writeSize(t, []Record{exit, stream[len(stream)-1]}); size > limit+1<<10 {
		t.Errorf("%d bytes of events for a %d-byte budget", size, limit)
	}
}

// TestModeWrapForgetsExited checks that Flush forgets the threads that
// exited long before the latest record, keeping their events, and keeps
// those that exited recently (their records may still come).
func TestModeWrapForgetsExited(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testHeader(), Options{Mode: ModeWrap, SizeLimit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	const sec = 1_000_000_000
	recs := []Record{
		&Event{Time: 1, PID: 5, TID: 6, Kind: EventEntry, Function: 1},
		&Exit{Time: 2, PID: 5, TID: 6},
		&Event{Time: 1, PID: 5, TID: 6, Kind: EventExit, Function: 1}, // late, same incarnation
		&Event{Time: 10 * sec, PID: 5, TID: 7, Kind: EventEntry, Function: 1},
		&Exit{Time: 10*sec + 1, PID: 5, TID: 7},
		&Event{Time: 10*sec + 2, PID: 5, TID: 8, Kind: EventEntry, Function: 1},
	}
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, ok := w.threads[[2]uint32{5, 6}]; ok {
		t.Error("thread 6, exited 10 s before the latest record, is still open")
	}
	if _, ok := w.threads[[2]uint32{5, 7}]; !ok {
		t.Error("thread 7, exited just now, was forgotten")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_, got, err := readAll(t, buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	var events int
	for _, r := range got {
		if _, ok := r.(*Event); ok {
			events++
		}
	}
	if events != 4 {
		t.Errorf("read %d events, want the 4 written", events)
	}
}
