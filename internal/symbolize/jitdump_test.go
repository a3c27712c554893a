package symbolize

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/sample.jitdump")

// jitWriter produces jitdump files per the Linux tree's
// tools/perf/Documentation/jitdump-specification.txt.
type jitWriter struct {
	order binary.ByteOrder
	buf   bytes.Buffer
}

func newJitWriter(order binary.ByteOrder) *jitWriter {
	w := &jitWriter{order: order}
	w.put(uint32(jitMagic), uint32(1), uint32(jitHeaderSize), uint32(62), uint32(0), uint32(4242), uint64(1), uint64(0))
	return w
}

func (w *jitWriter) put(vals ...any) {
	for _, v := range vals {
		switch v := v.(type) {
		case string:
			w.buf.WriteString(v)
			w.buf.WriteByte(0)
		case []byte:
			w.buf.Write(v)
		default:
			binary.Write(&w.buf, w.order, v)
		}
	}
}

// record writes a record with the given body fields.
func (w *jitWriter) record(id uint32, ts uint64, body ...any) {
	var b jitWriter
	b.order = w.order
	b.put(body...)
	w.put(id, uint32(jitRecordHeader+b.buf.Len()), ts)
	w.buf.Write(b.buf.Bytes())
}

func (w *jitWriter) load(ts, addr, size, index uint64, name string) {
	w.record(jitCodeLoad, ts, uint32(4242), uint32(4243), addr, addr, size, index, name, make([]byte, size))
}

func (w *jitWriter) move(ts, oldAddr, newAddr, size, index uint64) {
	w.record(jitCodeMove, ts, uint32(4242), uint32(4243), oldAddr, oldAddr, newAddr, size, index)
}

type jitLineEntry struct {
	addr uint64
	line int32
	file string // "\xff" repeats the previous name
}

func (w *jitWriter) debugInfo(ts, addr uint64, lines []jitLineEntry) {
	body := []any{addr, uint64(len(lines))}
	for _, l := range lines {
		body = append(body, l.addr, l.line, int32(0))
		if l.file == "\xff" {
			body = append(body, []byte{0xff, 0})
		} else {
			body = append(body, l.file)
		}
	}
	w.record(jitCodeDebugInfo, ts, body...)
}

// sampleJitDump is the scenario of TestJitDump:
//
//	t=100 load foo at 0x1000 (0x100 bytes, index 1)
//	t=150 load bar at 0x2000 (0x40 bytes, index 2), moved at t=300 to 0x3000
//	t=200 load baz at 0x1000 (0x80 bytes, index 3), reusing foo's address
//	t=250 debug info, then load qux at 0x5000 (0x30 bytes, index 4)
//	t=400 close, then an unwinding-info record
func sampleJitDump(order binary.ByteOrder) []byte {
	w := newJitWriter(order)
	w.load(100, 0x1000, 0x100, 1, "foo")
	w.load(150, 0x2000, 0x40, 2, "bar")
	w.load(200, 0x1000, 0x80, 3, "baz")
	w.debugInfo(250, 0x5000, []jitLineEntry{{0x5000, 10, "qux.js"}, {0x5010, 12, "\xff"}, {0x5020, 3, "lib.js"}})
	w.load(250, 0x5000, 0x30, 4, "qux")
	w.move(300, 0x2000, 0x3000, 0x40, 2)
	w.record(jitCodeClose, 400)
	w.record(jitCodeUnwinding, 400, uint64(8), uint64(0), uint64(8), make([]byte, 8))
	return w.buf.Bytes()
}

func writeJitDump(t *testing.T, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "jit-4242.dump")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestJitDump(t *testing.T) {
	data := sampleJitDump(binary.LittleEndian)
	if *update {
		if err := os.WriteFile(filepath.Join("testdata", "sample.jitdump"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, order := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		t.Run(order.String(), func(t *testing.T) {
			j, err := OpenJitDump(writeJitDump(t, sampleJitDump(order)), os.Getuid())
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			if j.PID() != 4242 || j.ArchTimestamps() {
				t.Errorf("PID() = %d, ArchTimestamps() = %v", j.PID(), j.ArchTimestamps())
			}
			tests := []struct {
				name  string
				addr  uint64
				time  uint64
				want  string
				start uint64
				ok    bool
			}{
				{"before any load", 0x1010, 50, "", 0, false},
				{"first code", 0x1010, 150, "foo", 0x1000, true},
				{"reused address after reload", 0x1010, 250, "baz", 0x1000, true},
				{"newest", 0x1010, ^uint64(0), "baz", 0x1000, true},
				{"old code beyond new code's end", 0x10f0, 250, "foo", 0x1000, true},
				{"before move", 0x2010, 299, "bar", 0x2000, true},
				{"old address after move", 0x2010, 300, "", 0, false},
				{"new address after move", 0x3010, 300, "bar", 0x3000, true},
				{"new address before move", 0x3010, 299, "", 0, false},
				{"end is exclusive", 0x3040, 500, "", 0, false},
			}
			for _, tt := range tests {
				name, start, ok := j.Resolve(tt.addr, tt.time)
				if name != tt.want || start != tt.start || ok != tt.ok {
					t.Errorf("%s: Resolve(%#x, %d) = %q, %#x, %v; want %q, %#x, %v",
						tt.name, tt.addr, tt.time, name, start, ok, tt.want, tt.start, tt.ok)
				}
			}
			frames := []struct {
				addr uint64
				want Frame
			}{
				{0x5004, Frame{"qux", "qux.js", 10}},
				{0x5018, Frame{"qux", "qux.js", 12}},
				{0x502f, Frame{"qux", "lib.js", 3}},
				{0x1004, Frame{"baz", "", 0}},
			}
			for _, tt := range frames {
				fr, _, ok := j.Frame(tt.addr, 1000)
				if !ok || fr != tt.want {
					t.Errorf("Frame(%#x) = %+v, %v; want %+v", tt.addr, fr, ok, tt.want)
				}
			}
		})
	}
}

// TestJitDumpIncremental writes a jitdump a few bytes at a time, as a
// JIT does, and checks that partial records are retried, not errors.
func TestJitDumpIncremental(t *testing.T) {
	data := sampleJitDump(binary.LittleEndian)
	path := writeJitDump(t, data[:jitHeaderSize])
	j, err := OpenJitDump(path, os.Getuid())
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for off := jitHeaderSize; off < len(data); off += 13 {
		if _, err := f.Write(data[off:min(off+13, len(data))]); err != nil {
			t.Fatal(err)
		}
		if err := j.Update(); err != nil {
			t.Fatalf("Update after %d bytes: %v", off+13, err)
		}
	}
	if name, _, ok := j.Resolve(0x3010, 1000); !ok || name != "bar" {
		t.Errorf("after incremental read: Resolve = %q, %v; want bar", name, ok)
	}
}

func TestJitDumpErrors(t *testing.T) {
	good := sampleJitDump(binary.LittleEndian)
	corrupt := func(off int, b ...byte) []byte {
		d := bytes.Clone(good)
		copy(d[off:], b)
		return d
	}
	tests := []struct {
		name     string
		data     []byte
		openErr  bool
		errAtOff int64 // DecodeError offset from Update, -1 for none
	}{
		{"short header", good[:20], true, -1},
		{"bad magic", corrupt(0, 'x'), true, -1},
		{"bad version", corrupt(4, 2), true, -1},
		{"record size too small", corrupt(jitHeaderSize+4, 3, 0, 0, 0), false, jitHeaderSize},
		{"record size too large", corrupt(jitHeaderSize+4, 0, 0, 0, 0x7f), false, jitHeaderSize},
		{"code size beyond record", corrupt(jitHeaderSize+16+24, 0xff, 0xff), false, jitHeaderSize + 16},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j, err := OpenJitDump(writeJitDump(t, tt.data), os.Getuid())
			if tt.openErr {
				var de *DecodeError
				if j != nil || !errors.As(err, &de) {
					t.Errorf("OpenJitDump = %v, %v; want nil and a *DecodeError", j, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("OpenJitDump failed: %v", err)
			}
			defer j.Close()
			err = j.Update()
			var de *DecodeError
			if !errors.As(err, &de) || de.Offset != tt.errAtOff || !errors.Is(err, ErrFormat) {
				t.Errorf("err = %v, want a DecodeError at %#x", err, tt.errAtOff)
			}
			if err2 := j.Update(); err2 != err {
				t.Errorf("second Update() = %v, want the same error", err2)
			}
		})
	}
}

// FuzzJitDump checks that no input makes the jitdump reader panic. Seeds:
// testdata/sample.jitdump (written by TestJitDump -update) and both byte
// orders of the sample.
func FuzzJitDump(f *testing.F) {
	if data, err := os.ReadFile(filepath.Join("testdata", "sample.jitdump")); err == nil {
		f.Add(data)
	}
	f.Add(sampleJitDump(binary.BigEndian))
	f.Fuzz(func(t *testing.T, data []byte) {
		j, err := newJitDump(bytes.NewReader(data))
		if err != nil {
			return
		}
		j.update(bytes.NewReader(data), int64(len(data)))
		for _, addr := range []uint64{0, 0x1000, 0x1010, 0x3010, 0x5004, ^uint64(0)} {
			j.Resolve(addr, 150)
			j.Frame(addr, ^uint64(0))
		}
	})
}
