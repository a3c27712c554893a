package trace

import (
	"bytes"
	"reflect"
	"testing"
)

// TestSnapshot takes snapshots of a trace being written, in every mode:
// each reads as a finished trace holding the records written so far
// (wrap mode: the newest samples of each thread), the tail and an End with the reason;
// the trace itself goes on and closes with every record.
func TestSnapshot(t *testing.T) {
	stream := recorderStream(20000)
	stream = stream[:len(stream)-1] // the stream's own End
	for _, opt := range []Options{{Mode: ModeNormal}, {Mode: ModeContinuous}, {Mode: ModeWrap, SizeLimit: 16 << 10}} {
		t.Run(string(opt.Mode), func(t *testing.T) {
			var buf bytes.Buffer
			w, err := NewWriter(&buf, testHeader(), opt)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Intern("exited"); err != nil {
				t.Fatal(err)
			}
			half := len(stream) / 2
			for i, r := range stream {
				if err := w.Write(r); err != nil {
					t.Fatal(err)
				}
				if i != half && i != len(stream)-1 {
					continue
				}
				var snap bytes.Buffer
				pause := &Pause{Time: 1 << 40, Duration: 5, Dropped: 2}
				n, err := w.Snapshot(&snap, liveBuffer{&buf}, End{Time: 1 << 41, ExitCode: -1}, "snapshot", pause)
				if err != nil {
					t.Fatal(err)
				}
				if n != int64(snap.Len()) {
					t.Errorf("Snapshot returned %d, wrote %d bytes", n, snap.Len())
				}
				_, got, err := readAll(t, snap.Bytes())
				if err != nil {
					t.Fatalf("snapshot after %d records: %v", i+1, err)
				}
				gotSamples, gotOther := samplesOf(got)
				wantSamples, wantOther := samplesOf(append([]Record{&String{ID: 1, Text: "exited"}}, stream[:i+1]...))
				if len(gotOther) < 3 {
					t.Fatalf("snapshot has %d records besides samples", len(gotOther))
				}
				end, ok := gotOther[len(gotOther)-1].(*End)
				if !ok {
					t.Fatalf("snapshot ends with %T, want *End", gotOther[len(gotOther)-1])
				}
				reason, ok := gotOther[len(gotOther)-2].(*String)
				if !ok || reason.Text != "snapshot" || end.Reason != reason.ID || end.Time != 1<<41 {
					t.Errorf("snapshot's end %+v after %+v, want the reason \"snapshot\"", end, gotOther[len(gotOther)-2])
				}
				if !reflect.DeepEqual(gotOther[len(gotOther)-3], pause) {
					t.Errorf("snapshot's tail %+v, want %+v", gotOther[len(gotOther)-3], pause)
				}
				rest := gotOther[:len(gotOther)-3]
				if opt.Mode == ModeWrap && w.Stats().Discarded > 0 {
					if l, ok := rest[len(rest)-1].(*Lost); !ok || l.Kind != LostWrap || l.Count != w.Stats().Discarded {
						t.Errorf("wrap snapshot: %+v before the tail, want Lost{wrap, %d}", rest[len(rest)-1], w.Stats().Discarded)
					}
					rest = rest[:len(rest)-1]
				}
				if !reflect.DeepEqual(rest, wantOther) {
					t.Errorf("snapshot after %d records: %d other records, want %d", i+1, len(rest), len(wantOther))
				}
				if opt.Mode == ModeWrap {
					checkThreadSuffixes(t, gotSamples, wantSamples)
				} else if !reflect.DeepEqual(gotSamples, wantSamples) {
					t.Errorf("snapshot after %d records: %d samples, want the %d written", i+1, len(gotSamples), len(wantSamples))
				}
			}
			if err := w.Write(&End{Time: 1 << 42, ExitCode: 0, Reason: 1}); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			_, got, err := readAll(t, buf.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			gotSamples, _ := samplesOf(got)
			wantSamples, _ := samplesOf(stream)
			if opt.Mode != ModeWrap && len(gotSamples) != len(wantSamples) {
				t.Errorf("final trace: %d samples, want %d", len(gotSamples), len(wantSamples))
			}
			for _, r := range got {
				if s, ok := r.(*String); ok && s.Text == "snapshot" {
					t.Error("the snapshot's reason leaked into the trace")
				}
			}
		})
	}
}

// liveBuffer reads a bytes.Buffer as it is at the time of each read, as
// the recorder reads its trace file back.
type liveBuffer struct{ b *bytes.Buffer }

func (l liveBuffer) ReadAt(p []byte, off int64) (int, error) {
	return bytes.NewReader(l.b.Bytes()).ReadAt(p, off)
}
