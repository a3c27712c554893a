package calltree

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
	"trueprof/internal/trace"
)

// records returns the time-ordered records of p as a trace may hold
// them: by time, and at equal times in the kind order opposite to the
// replay's, so that replayRecords must put them back in order.
func records(p *model.Profile) []model.Record {
	var rs []model.Record
	for _, r := range p.Adjusts {
		rs = append(rs, model.Record{Kind: model.RecordAdjust, Adjust: r})
	}
	for _, r := range p.Switches {
		rs = append(rs, model.Record{Kind: model.RecordSwitch, Switch: r})
	}
	for _, r := range p.GoIDs {
		rs = append(rs, model.Record{Kind: model.RecordGoID, GoID: r})
	}
	for _, r := range p.IRQs {
		rs = append(rs, model.Record{Kind: model.RecordIRQ, IRQ: r})
	}
	for _, r := range p.Events {
		rs = append(rs, model.Record{Kind: model.RecordEvent, Event: r})
	}
	for _, r := range p.Samples {
		rs = append(rs, model.Record{Kind: model.RecordSample, Sample: r})
	}
	rank := func(k model.RecordKind) int { return slices.Index(recordOrder[:], k) }
	slices.SortStableFunc(rs, func(x, y model.Record) int {
		return cmp.Or(cmp.Compare(x.Time(), y.Time()), cmp.Compare(rank(y.Kind), rank(x.Kind)))
	})
	return rs
}

// TestRecordsSameResult checks that replaying a recording's records one
// at a time, from its tables alone (as BuildStream does), gives Build's
// Result bit for bit, callflows included: over random instrumented and
// sampled recordings and the golden fixtures, with the options that
// change the replay.
func TestRecordsSameResult(t *testing.T) {
	inputs := profileInputs(200, 5, modeltest.InstrFixture(), modeltest.GoFixture(), modeltest.Fixture())
	opts := []Options{{}, {Raw: true}, {Root: "b"}, {Root: "compute"}, {ExcludeInterrupts: true},
		{Filter: modeltest.Matcher(t, model.Filter{Thread: "t1"})}, {Filter: modeltest.Matcher(t, model.Filter{TID: 11, HasTID: true})},
		{ByGoroutine: true}}
	compared := 0
	for _, in := range inputs {
		for _, o := range opts {
			o.Flow = true
			want, wantErr := Build(in.p, o)
			tables := *in.p
			tables.Samples, tables.Events, tables.Switches, tables.Adjusts, tables.IRQs, tables.GoIDs = nil, nil, nil, nil, nil, nil
			rs := records(in.p)
			next := func(r *model.Record) error {
				if len(rs) == 0 {
					return io.EOF
				}
				*r, rs = rs[0], rs[1:]
				return nil
			}
			a, err := replayRecords(&tables, summarize(in.p), next, o, nil)
			if wantErr != nil || err != nil {
				if fmt.Sprint(err) != fmt.Sprint(wantErr) {
					t.Errorf("%s %+v: error %v, Build's %v", in.name, o, err, wantErr)
				}
				continue
			}
			if got := a.result(); !sameResult(t, got, want) {
				t.Errorf("%s %+v: the records replayed one at a time give\n%+v\nBuild\n%+v", in.name, o, got, want)
			}
			compared++
		}
	}
	if compared < 1500 {
		t.Errorf("only %d comparisons", compared)
	}
}

// TestBuildStreamFile writes an instrumented trace of two interleaved
// threads with context switches, out of time order across them as the
// recorder's per-thread rings write it, and checks that BuildStream over
// the file gives Build's Result on model.Open's profile of it.
func TestBuildStreamFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hooks.trace")
	w := modeltest.NewTraceFile(t, path, &trace.Header{Event: "dummy", Instrument: "hook"}, "main", "mid", "leaf")
	w.Write(&trace.Comm{Time: 1000, PID: 7, TID: 7, Name: w.Intern("app"), Exec: true})
	w.Write(&trace.Fork{Time: 1000, PID: 7, TID: 8, PPID: 7, PTID: 7})
	// Each thread's records go out in blocks of 50 calls, the second
	// thread's block after the first's although it starts earlier.
	for block := range 40 {
		for _, tid := range []uint32{8, 7} {
			now := 2000 + uint64(block)*50*60 + uint64(tid-7)*7
			ev := func(k trace.EventKind, fn uint32) {
				now += 10
				w.Write(&trace.Event{Time: now, PID: 7, TID: tid, Kind: k, Function: fn})
			}
			for call := range 50 {
				ev(trace.EventEntry, 2)
				ev(trace.EventEntry, 3)
				if call%7 == 0 {
					w.Write(&trace.Switch{Time: now + 1, PID: 7, TID: tid, Out: true, Preempt: call%2 == 0},
						&trace.Switch{Time: now + 3, PID: 7, TID: tid})
				}
				ev(trace.EventExit, 3)
				ev(trace.EventExit, 2)
			}
		}
	}
	w.Close(200_000)

	p, s := modeltest.OpenBoth(t, path)
	if s.Lateness == 0 {
		t.Fatal("the trace is in time order: the test would not exercise the reorder window")
	}
	for _, o := range []Options{{}, {Flow: true}, {Root: "mid"}, {Filter: modeltest.Matcher(t, model.Filter{Thread: "8"})}} {
		want, err := Build(p, o)
		if err != nil {
			t.Fatal(err)
		}
		got, err := BuildStream(s, o)
		if err != nil {
			t.Fatal(err)
		}
		if !sameResult(t, got, want) {
			t.Errorf("%+v: BuildStream gives\n%+v\nBuild\n%+v", o, got, want)
		}
		if o.Filter == nil && want.Events != 40*2*50*4 {
			t.Errorf("%+v: %d events analysed", o, want.Events)
		}
	}
	if _, err := BuildStream(s, Options{Filter: modeltest.Matcher(t, model.Filter{Labels: []string{"k=v"}})}); !errors.Is(err, model.ErrNotStreamable) {
		t.Errorf("a label filter: %v, want ErrNotStreamable", err)
	}
}

// BenchmarkBuildStream analyses a trace file of 1.2M and 6M events read
// with model.Open then Build (every record in memory) and with
// model.OpenStream then BuildStream (none): B/op grows with the events
// for the first and stays flat for the second.
func BenchmarkBuildStream(b *testing.B) {
	for _, mids := range []int{200_000, 1_000_000} {
		path := filepath.Join(b.TempDir(), "calls.trace")
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		if err := modeltest.WriteCalls(f, mids); err != nil {
			b.Fatal(err)
		}
		f.Close()
		events := float64(6*mids + 2)
		b.Run(fmt.Sprintf("load/events=%.0f", events), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p, err := model.Open(path)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := Build(p, Options{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(events*float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
		b.Run(fmt.Sprintf("stream/events=%.0f", events), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s, err := model.OpenStream(path)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := BuildStream(s, Options{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(events*float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
