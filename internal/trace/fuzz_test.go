package trace

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the files in testdata")

// fixtures are the trace files in testdata, each named by how it was
// built. "go test -run TestTestdata -update" rewrites them, except those
// of an earlier format version (written by version 1: small-chunks,
// wrap and truncated), which stay as they are; they are committed so
// that readers keep reading files written by earlier versions of the
// Writer.
var fixtures = []struct {
	name  string
	build func(t *testing.T) []byte
}{
	// Every record type with edge values and 200 samples, 256-byte chunks
	// (so both zstd and stored chunks occur).
	{"small-chunks.trace", func(t *testing.T) []byte {
		data, _ := damageFile(t)
		return data
	}},
	// A recorder stream of 2000 samples in wrap mode with a 4 KiB limit,
	// which its other records exceed by themselves (the samples keep half
	// of it): ends with a Lost{LostWrap} record, the kept samples (in
	// chunks per thread), End.
	{"wrap.trace", func(t *testing.T) []byte {
		return writeTrace(t, Options{Mode: ModeWrap, SizeLimit: 4 << 10}, recorderStream(2000))
	}},
	// small-chunks.trace cut in the middle of its fourth chunk.
	{"truncated.trace", func(t *testing.T) []byte {
		data, _ := damageFile(t)
		_, spans := layout(t, data)
		return data[:spans[3].off+20]
	}},
	// Version 2: events in runs and out of them (runStream), 4 KiB
	// chunks, so that runs end at chunk boundaries too.
	{"event-runs.trace", func(t *testing.T) []byte {
		return writeTrace(t, Options{ChunkSize: 4 << 10}, runStream(3000))
	}},
	// Version 3: wide runs too (wideStream), 4 KiB chunks.
	{"wide-runs.trace", func(t *testing.T) []byte {
		return writeTrace(t, Options{ChunkSize: 4 << 10}, wideStream(3000))
	}},
}

// wideStream returns n events of functions from 1 to 2,000, in turns of
// 30 under 256 and 70 over (runs narrow, then wide), a function over
// 65,535 every 113 events and a gap of over 127 ns every 97 (whole
// records in a run's place), two threads taking turns every 150.
func wideStream(n int) []Record {
	recs := []Record{&String{ID: 1, Text: "f"}}
	t := uint64(5000)
	for i := range n {
		fn := uint32(1 + i*37%255)
		if i%100 >= 30 {
			fn = 256 + uint32(i*61%1745)
		}
		if i%113 == 112 {
			fn = 1<<16 + uint32(i)
		}
		t += uint64(2 + i%50)
		if i%97 == 96 {
			t += 500
		}
		recs = append(recs, &Event{Time: t, PID: 10, TID: uint32(10 + i/150%2), Kind: EventEntry + EventKind(i%2), Function: fn})
	}
	return recs
}

// runStream returns n events that a Writer puts in runs and out of
// them: two threads taking turns every 50 events (the first event of a
// turn is a whole record), a gap of over 127 ns every 97 events and a
// function beyond 255 every 89 (whole records in a run's place).
func runStream(n int) []Record {
	recs := []Record{&String{ID: 1, Text: "f"}}
	for id := uint32(1); id <= 300; id++ {
		recs = append(recs, &Location{ID: id, Address: 0x1000 + uint64(id), Module: 1, Offset: 0x1000 + uint64(id)})
	}
	t := uint64(5000)
	for i := range n {
		tid := uint32(10 + i/50%2)
		fn := uint32(1 + i%7)
		if i%89 == 88 {
			fn = 300
		}
		t += uint64(3 + i%40)
		if i%97 == 96 {
			t += 1000
		}
		recs = append(recs, &Event{Time: t, PID: 10, TID: tid, Kind: EventEntry + EventKind(i%2), Function: fn})
	}
	return recs
}

// TestTestdata checks that the committed fixtures read back the same
// records as files built now.
func TestTestdata(t *testing.T) {
	for _, f := range fixtures {
		t.Run(f.name, func(t *testing.T) {
			path := filepath.Join("testdata", f.name)
			fresh := f.build(t)
			old, err := os.ReadFile(path)
			if *update && (err != nil || len(old) < 12 || binary.LittleEndian.Uint32(old[8:]) == Version) {
				if err := os.WriteFile(path, fresh, 0o644); err != nil {
					t.Fatal(err)
				}
				old, err = fresh, nil
			}
			if err != nil {
				t.Fatal(err)
			}
			h1, r1, err1 := readAll(t, old)
			h2, r2, err2 := readAll(t, fresh)
			if h1.Version > h2.Version {
				t.Errorf("%s of version %d, newer than the Writer's %d", path, h1.Version, h2.Version)
			}
			h1.Version = h2.Version // an older file reads the same records
			if !reflect.DeepEqual(h1, h2) || !reflect.DeepEqual(r1, r2) || (err1 == nil) != (err2 == nil) {
				t.Errorf("%s reads %d records (err %v), a fresh file %d (err %v)", path, len(r1), err1, len(r2), err2)
			}
		})
	}
}

// FuzzReader reads arbitrary bytes: it must never panic nor allocate
// beyond the format's bounds, and must fail only with a *FormatError.
func FuzzReader(f *testing.F) {
	for _, fx := range fixtures {
		data, err := os.ReadFile(filepath.Join("testdata", fx.name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		if fx.name == "small-chunks.trace" {
			// Its first chunk overwritten from its header on: the
			// reader resynchronises at the second.
			bad := bytes.Clone(data)
			_, spans := layout(f, bad)
			copy(bad[spans[0].off+5:spans[1].off-1], bytes.Repeat([]byte("TPCK"), spans[1].off))
			f.Add(bad)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("NewReader: %v is not a *FormatError", err)
			}
			return
		}
		for n := 0; ; n++ {
			rec, err := r.Next()
			if err == io.EOF {
				return
			}
			if err != nil {
				var fe *FormatError
				if !errors.As(err, &fe) || fe.Offset < 0 || fe.Offset > int64(len(data)) {
					t.Fatalf("Next: %v is not a *FormatError within the file", err)
				}
				var de *DamageError
				if errors.As(err, &de) && (de.Chunks < 1 || de.Bytes < 1 || de.First.Offset+de.Bytes > int64(len(data))) {
					t.Fatalf("Next: damage %v beyond the file's %d bytes", err, len(data))
				}
				return
			}
			if rec == nil {
				t.Fatal("Next returned a nil record and no error")
			}
			if n > len(data) {
				t.Fatalf("%d records from %d bytes", n, len(data))
			}
		}
	})
}

// FuzzRecords fuzzes the record decoder behind the checksums, which
// FuzzReader's mutations rarely get through: the input is the raw
// content of one chunk, given a valid header and CRC. Whatever decodes
// must survive a write/read round trip unchanged.
func FuzzRecords(f *testing.F) {
	for _, fx := range fixtures {
		data, err := os.ReadFile(filepath.Join("testdata", fx.name))
		if err != nil {
			f.Fatal(err)
		}
		for _, raw := range rawChunks(f, data) {
			f.Add(raw)
		}
	}
	hdr := headerOnly(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 1<<16 {
			return
		}
		// The record count the chunk header must announce.
		var d chunkDecoder
		d.reset(raw)
		var derr error
		for {
			r, err := d.next()
			if err != nil || r == nil {
				derr = err
				break
			}
		}
		_, recs, err := readAll(t, append(bytes.Clone(hdr), handChunk(raw, d.records)...))
		if derr != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("err = %v", err)
		}
		if len(recs) > len(raw)/2 { // events of a run take two bytes
			t.Fatalf("%d records from %d bytes", len(recs), len(raw))
		}
		// A wrong count is corrupt.
		if _, _, err := readAll(t, append(bytes.Clone(hdr), handChunk(raw, d.records+1)...)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("count %d+1: err = %v, want ErrCorrupt", d.records, err)
		}
		if len(recs) == 0 {
			return
		}
		again := writeTrace(t, Options{}, recs)
		_, got, err := readAll(t, again)
		if err != nil || !sameRecords(got, recs) {
			t.Fatalf("round trip: %v\ngot  %v\nwant %v", err, got, recs)
		}
	})
}

// sameRecords reports whether a and b hold the same records. A float
// field may be NaN (TreeMark's PrunedNS from arbitrary bytes, which
// round-trips bit for bit), which reflect.DeepEqual never finds equal to
// itself: such records compare by their printed fields.
func sameRecords(a, b []Record) bool {
	if reflect.DeepEqual(a, b) {
		return true
	}
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !reflect.DeepEqual(a[i], b[i]) && fmt.Sprintf("%+v", a[i]) != fmt.Sprintf("%+v", b[i]) {
			return false
		}
	}
	return true
}

// rawChunks returns the decompressed contents of the complete chunks of
// a trace file.
func rawChunks(t testing.TB, data []byte) [][]byte {
	hdr := fileHeaderFixed + int(binary.LittleEndian.Uint32(data[12:])) + 4
	var raws [][]byte
	for off := hdr; off+chunkHeaderSize <= len(data); {
		end := off + chunkHeaderSize + int(binary.LittleEndian.Uint32(data[off+8:]))
		if end > len(data) {
			break
		}
		payload := data[off+chunkHeaderSize : end]
		if data[off+4] == codecZstd {
			dec, err := decoder()
			if err != nil {
				t.Fatal(err)
			}
			if payload, err = dec.DecodeAll(payload, make([]byte, 0, MaxChunkSize)); err != nil {
				t.Fatal(err)
			}
		}
		raws = append(raws, payload)
		off = end
	}
	return raws
}
