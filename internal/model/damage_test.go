package model_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"trueprof/internal/model"
	"trueprof/internal/trace"
)

// TestDamagedDefinitions damages the first chunk of a trace, which holds
// the strings, locations and stack nodes the samples and events of the
// later chunks refer to: the loader and the stream keep every later
// record, lost definitions standing as placeholders, and warn of the
// damage and what was skipped.
func TestDamagedDefinitions(t *testing.T) {
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, &trace.Header{}, trace.Options{Mode: trace.ModeNormal, ChunkSize: 200})
	if err != nil {
		t.Fatal(err)
	}
	write := func(r trace.Record) {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	intern := func(s string) uint32 {
		id, err := w.Intern(s)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	mod := intern("/usr/bin/app")
	for i, fn := range []string{"main", "work", "leaf", "other"} {
		write(&trace.Location{ID: uint32(i + 1), Module: mod, Offset: uint64(i) * 64, Lines: []trace.Line{{Function: intern(fn)}}})
		write(&trace.StackNode{ID: uint32(i + 1), Parent: uint32(i), Location: uint32(i + 1)})
	}
	const n = 300
	for i := range uint64(n) {
		write(&trace.Sample{Time: 100 + i, PID: 1, TID: 1, Period: 1000, Stack: uint32(1 + i%4)})
		write(&trace.Event{Time: 100 + i, PID: 1, TID: 1, Kind: trace.EventEntry, Function: uint32(1 + i%4)})
	}
	write(&trace.End{Time: 1000, Reason: intern("exited")})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	first := bytes.Index(data, []byte("TPCK"))
	for i := first + 30; i < first+60; i++ {
		data[i] ^= 0xff
	}
	path := filepath.Join(t.TempDir(), "damaged.trace")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}

	p, err := model.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var de *trace.DamageError
	if !errors.As(p.Err, &de) || de.First.Offset != int64(first) || de.Chunks != 1 {
		t.Fatalf("err = %v, want the damage of the chunk at %d", p.Err, first)
	}
	if len(p.Samples) < n/2 || len(p.Events) < n/2 || p.End == nil {
		t.Errorf("kept %d samples, %d events of %d, end %v", len(p.Samples), len(p.Events), n, p.End)
	}
	placeholders := 0
	for _, s := range p.Samples {
		if int(s.Stack) >= len(p.Stacks) {
			t.Fatalf("sample stack %d of %d", s.Stack, len(p.Stacks))
		}
		for id := s.Stack; id != 0; id = p.Stacks[id].Parent {
			if loc := p.Stacks[id].Location; loc == 0 || int(loc) >= len(p.Locations) {
				t.Fatalf("stack node %d: location %d of %d", id, loc, len(p.Locations))
			} else if p.Locations[loc].Frames[0].Function == model.DamagedName {
				placeholders++
			}
		}
	}
	if placeholders == 0 {
		t.Error("no frame stands for the lost definitions")
	}
	warnings := strings.Join(p.Warnings(), "\n")
	if !strings.Contains(warnings, "skipped 1 damaged chunk(s)") {
		t.Errorf("warnings %q", warnings)
	}

	// The stream's second pass gives the same records.
	s, err := model.OpenStream(path)
	if err != nil {
		t.Fatal(err)
	}
	if s.Profile.Inconsistent != p.Inconsistent || len(s.Profile.Stacks) != len(p.Stacks) {
		t.Errorf("stream: %d inconsistent, %d stacks; load %d, %d", s.Profile.Inconsistent, len(s.Profile.Stacks), p.Inconsistent, len(p.Stacks))
	}
	rs, err := s.Records()
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var samples, events int
	for {
		var r model.Record
		err := rs.Next(&r)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch r.Kind {
		case model.RecordSample:
			samples++
		case model.RecordEvent:
			events++
		}
	}
	if samples != len(p.Samples) || events != len(p.Events) {
		t.Errorf("stream: %d samples, %d events; load %d, %d", samples, events, len(p.Samples), len(p.Events))
	}
}
