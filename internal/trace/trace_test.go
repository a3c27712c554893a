package trace

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func testHeader() *Header {
	return &Header{
		Host:      "host",
		Kernel:    "6.8.0",
		Arch:      "amd64",
		Clock:     "CLOCK_MONOTONIC",
		StartTime: time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC),
		StartNS:   123456789,
		Event:     "cpu-clock",
		Freq:      999,
		Callchain: "fp",
		Command:   []string{"/bin/sleep", "1", "ünïcode \x00"},
		PIDs:      []int{1, 2},
	}
}

// edgeRecords returns every record type with edge values: zero and
// maximal fields, timestamps jumping forwards and backwards by the whole
// uint64 range, empty and long strings, many lines per location.
func edgeRecords() []Record {
	long := strings.Repeat("long string ", 20000)
	lines := make([]Line, 1000)
	for i := range lines {
		lines[i] = Line{Function: uint32(i), File: math.MaxUint32 - uint32(i), Line: uint32(i * 7)}
	}
	return []Record{
		&String{ID: 1, Text: "a"},
		&String{ID: 0, Text: ""},
		&String{ID: math.MaxUint32, Text: long},
		&Module{},
		&Module{Time: math.MaxUint64, PID: math.MaxUint32, TID: math.MaxUint32, Start: math.MaxUint64, Len: math.MaxUint64,
			PgOff: math.MaxUint64, Prot: math.MaxUint32, Flags: math.MaxUint32, Path: math.MaxUint32, BuildID: bytes.Repeat([]byte{0xab}, 20)},
		&Comm{Time: 0, PID: 1, TID: 2, Name: 3},
		&Comm{Time: math.MaxUint64, PID: 1, TID: 2, Name: 3, Exec: true},
		&Fork{Time: 1, PID: 2, PPID: 3, TID: 4, PTID: 5},
		&Exit{Time: math.MaxUint64 - 1, PID: math.MaxUint32, PPID: 0, TID: 7, PTID: 8},
		&Location{},
		&Location{ID: 1, Address: math.MaxUint64, Module: 2, Offset: math.MaxUint64, Lines: lines},
		&Location{ID: 2, Address: 0x401000, Module: 2, Offset: 0x1000, Lines: []Line{{}}},
		&Rename{},
		&Rename{ID: 2, Lines: []Line{{Function: math.MaxUint32, File: 1, Line: math.MaxUint32}, {Function: 1}}},
		&StackNode{},
		&StackNode{ID: math.MaxUint32, Parent: math.MaxUint32, Location: math.MaxUint32},
		&Sample{},
		&Sample{Time: math.MaxUint64, PID: math.MaxUint32, TID: math.MaxUint32, CPU: math.MaxUint32, Period: math.MaxUint64, Stack: math.MaxUint32, Flags: SampleTruncated | SampleKernel},
		&Sample{Time: 5, PID: math.MaxUint32, TID: math.MaxUint32, CPU: math.MaxUint32, Period: math.MaxUint64, Stack: 1},
		&Sample{Time: 4, PID: math.MaxUint32, TID: 1, CPU: math.MaxUint32, Period: 0, Stack: 1, Flags: 0x1f},
		&Sample{Time: 1 << 63, PID: 0, TID: 1, CPU: 0, Period: 0, Stack: 0},
		&Lost{Time: 1, Kind: LostKernel, Count: math.MaxUint64},
		&Lost{Time: 0, Kind: LostWrap},
		&Lost{Time: 3, Kind: 255, Count: 1},
		&Throttle{Time: math.MaxUint64},
		&Throttle{Time: 0, Unthrottle: true},
		// Probes with each of the appended flags, none and both.
		&Probe{},
		&Probe{Time: math.MaxUint64, PID: math.MaxUint32, Function: math.MaxUint32, Address: math.MaxUint64, Mech: 255, Stepped: true, CallSite: true},
		&Probe{Time: 2, PID: 1, Function: 1, Address: 0x1000, Mech: ProbeEntry, Stepped: true},
		&Probe{Time: 3, PID: 1, Function: 2, Address: 0x1005, Mech: ProbeCallSite, CallSite: true},
		&End{Time: 12, ExitCode: math.MinInt32, Reason: math.MaxUint32},
		&End{Time: 13, ExitCode: math.MaxInt32},
		&End{ExitCode: -1},
	}
}

// writeTrace writes recs with opt and returns the file.
func writeTrace(t testing.TB, opt Options, recs []Record) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testHeader(), opt)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			t.Fatalf("Write(%#v): %v", r, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if w.Size() != int64(buf.Len()) {
		t.Errorf("Size() = %d, wrote %d bytes", w.Size(), buf.Len())
	}
	return buf.Bytes()
}

// readAll reads every record of data up to the first error.
func readAll(t testing.TB, data []byte) (Header, []Record, error) {
	t.Helper()
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		return Header{}, nil, err
	}
	var recs []Record
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return r.Header(), recs, nil
		}
		if err != nil {
			if again, err2 := r.Next(); again != nil || err2 != err {
				t.Errorf("error not sticky: got %v, %v after %v", again, err2, err)
			}
			return r.Header(), recs, err
		}
		recs = append(recs, rec)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  Options
	}{
		{"default", Options{}},
		{"one record per chunk", Options{ChunkSize: 1}},
		{"small chunks", Options{ChunkSize: 64}},
		{"continuous fastest", Options{Mode: ModeContinuous, ZstdLevel: 1}},
		{"best compression", Options{ZstdLevel: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := edgeRecords()
			data := writeTrace(t, tc.opt, want)
			h, got, err := readAll(t, data)
			if err != nil {
				t.Fatal(err)
			}
			wantH := testHeader()
			wantH.Version = Version
			wantH.Mode = string(ModeNormal)
			if tc.opt.Mode != "" {
				wantH.Mode = string(tc.opt.Mode)
			}
			if !reflect.DeepEqual(h, *wantH) {
				t.Errorf("header:\ngot  %+v\nwant %+v", h, *wantH)
			}
			if len(got) != len(want) {
				t.Fatalf("got %d records, want %d", len(got), len(want))
			}
			for i := range want {
				if !reflect.DeepEqual(got[i], want[i]) {
					t.Errorf("record %d:\ngot  %#v\nwant %#v", i, got[i], want[i])
				}
			}
		})
	}
}

func TestIntern(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testHeader(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint32
	for _, s := range []string{"", "a", "b", "a", "", "c", "b"} {
		id, err := w.Intern(s)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if want := []uint32{0, 1, 2, 1, 0, 3, 2}; !reflect.DeepEqual(ids, want) {
		t.Errorf("ids = %v, want %v", ids, want)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_, recs, err := readAll(t, buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	want := []Record{&String{1, "a"}, &String{2, "b"}, &String{3, "c"}}
	if !reflect.DeepEqual(recs, want) {
		t.Errorf("records = %v, want %v", recs, want)
	}
	if _, err := w.Intern("d"); !errors.Is(err, ErrClosed) {
		t.Errorf("Intern after Close: %v, want ErrClosed", err)
	}
}

func TestWriteInvalid(t *testing.T) {
	w, err := NewWriter(io.Discard, testHeader(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	type other struct{ Record }
	for _, r := range []Record{nil, (*Sample)(nil), (*Location)(nil), &Sample{Flags: 0x20}, &End{Time: 1, Detached: 2}, other{}} {
		if err := w.Write(r); !errors.Is(err, ErrInvalidRecord) {
			t.Errorf("Write(%#v) = %v, want ErrInvalidRecord", r, err)
		}
	}
	if err := w.Write(&String{Text: strings.Repeat("x", maxRecordSize)}); !errors.Is(err, ErrInvalidRecord) {
		t.Errorf("Write(huge string) = %v, want ErrInvalidRecord", err)
	}
	if s := w.Stats(); s.Records != 0 {
		t.Errorf("invalid records counted: %+v", s)
	}
}

func TestNewWriterOptions(t *testing.T) {
	for _, opt := range []Options{
		{Mode: "bogus"},
		{Mode: ModeWrap},
		{ChunkSize: -1},
		{ChunkSize: MaxChunkSize},
	} {
		if _, err := NewWriter(io.Discard, testHeader(), opt); err == nil {
			t.Errorf("NewWriter(%+v) succeeded", opt)
		}
	}
	if _, err := NewWriter(io.Discard, nil, Options{}); err == nil {
		t.Error("NewWriter(nil header) succeeded")
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(b []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("disk full")
	}
	f.n--
	return len(b), nil
}

// TestWriteEventFastPath: the events WriteEvent adds without its checks
// still end each chunk at the first record to reach ChunkSize, a write
// error still shows at a later call (within the next chunk's events),
// and a closed Writer refuses events mid-chunk.
func TestWriteEventFastPath(t *testing.T) {
	var evs []*Event
	var recs []Record
	for _, r := range eventStream(20000) {
		if e, ok := r.(*Event); ok {
			evs, recs = append(evs, e), append(recs, e)
		}
	}
	const size = 4096
	data := writeTrace(t, Options{ChunkSize: size}, recs)
	_, spans := layout(t, data)
	for i, sp := range spans[:len(spans)-1] {
		if raw := int(binary.LittleEndian.Uint32(data[sp.off+12:])); raw < size || raw >= size+maxEventBytes {
			t.Errorf("chunk %d of %d raw bytes, want the first event to reach %d to end it", i, raw, size)
		}
	}

	fw := &failWriter{n: 1} // the header goes through, the first chunk fails
	w, err := NewWriter(fw, testHeader(), Options{ChunkSize: size})
	if err != nil {
		t.Fatal(err)
	}
	var werr error
	for i := 0; i < len(evs) && werr == nil; i++ {
		werr = w.WriteEvent(evs[i])
		if i == size {
			w.p.sync() // the first chunk's write has failed by now
		}
	}
	if werr == nil || !strings.Contains(werr.Error(), "disk full") {
		t.Errorf("WriteEvent after a failed write: %v, want its error", werr)
	}
	if err := w.Close(); err != werr {
		t.Errorf("Close = %v, want %v", err, werr)
	}
	if err := w.WriteEvent(evs[0]); !errors.Is(err, ErrClosed) {
		t.Errorf("WriteEvent after Close: %v, want ErrClosed", err)
	}
}

func TestWriteErrorSticky(t *testing.T) {
	fw := &failWriter{n: 1} // the header goes through, the first chunk fails
	w, err := NewWriter(fw, testHeader(), Options{ChunkSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	// The chunk is written behind Write's back: Flush waits for it and
	// returns its error, which every later call returns.
	err1 := w.Write(&Sample{Time: 1})
	err2 := w.Flush()
	err3 := w.Write(&Sample{Time: 2})
	err4 := w.Close()
	if err1 != nil || err2 == nil || err3 != err2 || err4 != err2 {
		t.Errorf("errors %v, %v, %v, %v: want none, then the write error every time", err1, err2, err3, err4)
	}
	if err := w.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close = %v, want ErrClosed", err)
	}
}

// handChunk builds an uncompressed chunk by hand, following
// docs/trace-format.md rather than the Writer.
func handChunk(raw []byte, count uint32) []byte {
	h := make([]byte, chunkHeaderSize, chunkHeaderSize+len(raw))
	copy(h, "TPCK")
	binary.LittleEndian.PutUint32(h[8:], uint32(len(raw)))
	binary.LittleEndian.PutUint32(h[12:], uint32(len(raw)))
	binary.LittleEndian.PutUint32(h[16:], count)
	binary.LittleEndian.PutUint32(h[20:], crc32.Checksum(raw, crc32.MakeTable(crc32.Castagnoli)))
	binary.LittleEndian.PutUint32(h[24:], crc32.Checksum(h[:24], crc32.MakeTable(crc32.Castagnoli)))
	return append(h, raw...)
}

// headerOnly returns a valid file header with no chunks.
func headerOnly(t testing.TB) []byte {
	var buf bytes.Buffer
	if _, err := NewWriter(&buf, testHeader(), Options{}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestForwardCompatible checks that unknown majors are skipped by their
// length while keeping the time delta chain, and that bytes appended to
// a known record's body are ignored.
func TestForwardCompatible(t *testing.T) {
	raw := []byte{
		0x80 | 8, 0, 6, 20, 1, 2, 3, 4, 5, // Sample: time +10, pid 1, tid 2, cpu 3, period 4, stack 5
	}
	raw = append(raw,
		0x80|100, 7, 3, 4, 0xff, 0xff, // unknown timed major 100: time +2, two opaque bytes
		100, 0, 0, // unknown untimed major, empty body
		0x80|10, 1, 4, 2, 9, 9, 9, // Throttle (unthrottle): time +1, three bytes from the future
		7, 0, 3, 1, 0, 1, // StackNode 1 -> location 1
	)
	data := append(headerOnly(t), handChunk(raw, 5)...)
	_, recs, err := readAll(t, data)
	if err != nil {
		t.Fatal(err)
	}
	want := []Record{
		&Sample{Time: 10, PID: 1, TID: 2, CPU: 3, Period: 4, Stack: 5},
		&Throttle{Time: 13, Unthrottle: true},
		&StackNode{ID: 1, Location: 1},
	}
	if !reflect.DeepEqual(recs, want) {
		t.Errorf("got %v, want %v", recs, want)
	}
}

// TestEventRuns decodes a run of events written by hand after
// docs/trace-format.md, and checks that the Writer puts the common
// events in runs: two bytes an event.
func TestEventRuns(t *testing.T) {
	raw := []byte{
		0x80 | 12, 1, 4, 2, 1, 1, 1, // Event: time +1, pid 1, tid 1, entry of function 1
		26, 0, 6, 5<<1 | 1, 1, 3 << 1, 2, 0<<1 | 1, 2, // run: exit of 1 at +5, entry of 2 at +3, exit of 2 at +0
		0x80 | 10, 0, 1, 2, // Throttle: time +1
	}
	_, recs, err := readAll(t, append(headerOnly(t), handChunk(raw, 3)...))
	if err != nil {
		t.Fatal(err)
	}
	want := []Record{
		&Event{Time: 1, PID: 1, TID: 1, Kind: EventEntry, Function: 1},
		&Event{Time: 6, PID: 1, TID: 1, Kind: EventExit, Function: 1},
		&Event{Time: 9, PID: 1, TID: 1, Kind: EventEntry, Function: 2},
		&Event{Time: 9, PID: 1, TID: 1, Kind: EventExit, Function: 2},
		&Throttle{Time: 10},
	}
	if !reflect.DeepEqual(recs, want) {
		t.Errorf("got %v, want %v", recs, want)
	}
	// The same in a wide run, of functions 0x1234 and 0xff01.
	raw = []byte{
		0x80 | 12, 1, 5, 2, 1, 1, 0xb4, 0x24, // Event: time +1, pid 1, tid 1, entry of 0x1234
		27, 0, 9, 5<<1 | 1, 0x34, 0x12, 3 << 1, 0x01, 0xff, 0<<1 | 1, 0x01, 0xff, // wide run
		0x80 | 10, 0, 1, 2, // Throttle: time +1
	}
	if _, recs, err = readAll(t, append(headerOnly(t), handChunk(raw, 3)...)); err != nil {
		t.Fatal(err)
	}
	want[0].(*Event).Function, want[1].(*Event).Function = 0x1234, 0x1234
	want[2].(*Event).Function, want[3].(*Event).Function = 0xff01, 0xff01
	if !reflect.DeepEqual(recs, want) {
		t.Errorf("wide: got %v, want %v", recs, want)
	}

	// One thread's calls 17-21 ns long, 40-46 ns apart, and an Adjust
	// every 1000: two bytes an event, and a run's header every 63.
	var c chunkBuilder
	for _, r := range eventStream(10000) {
		if err := c.add(r); err != nil {
			t.Fatal(err)
		}
	}
	if limit := 20000*(2+3.0/maxRunEvents) + 200; float64(len(c.raw)) > limit {
		t.Errorf("%d raw bytes for 20,000 events, want at most %.0f", len(c.raw), limit)
	}
	// The same calls of functions over 255: three bytes an event, and
	// a wide run's header every 42.
	c.reset()
	for _, r := range eventStream(10000) {
		if e, ok := r.(*Event); ok {
			e.Function += 1000
		}
		if err := c.add(r); err != nil {
			t.Fatal(err)
		}
	}
	if limit := 20000*(3+3.0/maxWideRunEvents) + 200; float64(len(c.raw)) > limit {
		t.Errorf("%d raw bytes for 20,000 events of wide functions, want at most %.0f", len(c.raw), limit)
	}
	for name, stream := range map[string][]Record{"runStream": runStream(3000), "wideStream": wideStream(3000)} {
		_, got, err := readAll(t, writeTrace(t, Options{}, stream))
		if err != nil || !reflect.DeepEqual(got, stream) {
			t.Errorf("round trip of %s: %v", name, err)
		}
	}
}

// TestCorruptRecords checks record-level errors inside a chunk whose
// checksum is valid, as a buggy or hostile writer would produce.
func TestCorruptRecords(t *testing.T) {
	good := []byte{0x80 | 9, 1, 2, 2, 7} // Lost{Time: 1, Kind: 1, Count: 7}
	for _, tc := range []struct {
		name  string
		raw   []byte
		count uint32
	}{
		{"count too high", good, 2},
		{"count too low", append(append([]byte{}, good...), good...), 1},
		{"length past end", []byte{0x80 | 9, 1, 9, 2, 7}, 1},
		{"cut header", append(append([]byte{}, good...), 9, 0), 2},
		{"major 0", []byte{0, 0, 0}, 1},
		{"timed bit on untimed major", []byte{0x80 | 1, 0, 2, 0, 0}, 1},
		{"missing field", []byte{0x80 | 9, 1, 1, 2}, 1},
		{"u32 overflow", []byte{7, 0, 7, 0x80, 0x80, 0x80, 0x80, 0x10, 0, 0}, 1},
		{"elided fields without previous sample", []byte{0x80 | 8, 0xe0, 2, 2, 1}, 1},
		{"huge line count", []byte{6, 0, 5, 1, 1, 1, 1, 100}, 1},
		{"huge string", []byte{1, 0, 3, 1, 100, 'a'}, 1},
		{"exit code overflow", []byte{0x80 | 11, 0, 7, 0, 0x80, 0x80, 0x80, 0x80, 0x10, 0}, 1},
		{"run of events without a previous event", []byte{26, 0, 2, 4, 1}, 1},
		{"run of events of odd length", []byte{0x80 | 12, 1, 4, 2, 1, 1, 1, 26, 0, 3, 4, 1, 1}, 2},
		{"empty run of events", []byte{0x80 | 12, 1, 4, 2, 1, 1, 1, 26, 0, 0}, 2},
		{"timed run of events", []byte{0x80 | 12, 1, 4, 2, 1, 1, 1, 0x80 | 26, 0, 2, 4, 1}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := headerOnly(t)
			data := append(hdr, handChunk(good, 1)...)
			data = append(data, handChunk(tc.raw, tc.count)...)
			_, recs, err := readAll(t, data)
			var fe *FormatError
			if !errors.As(err, &fe) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want a *FormatError wrapping ErrCorrupt", err)
			}
			if want := int64(len(hdr) + chunkHeaderSize + len(good)); fe.Offset != want {
				t.Errorf("offset %d, want %d", fe.Offset, want)
			}
			if len(recs) < 1 || !reflect.DeepEqual(recs[0], &Lost{Time: 1, Kind: 1, Count: 7}) {
				t.Errorf("records before the bad chunk: %v", recs)
			}
		})
	}
}

func TestBadHeader(t *testing.T) {
	good := headerOnly(t)
	for _, tc := range []struct {
		name string
		edit func([]byte) []byte
		want error
	}{
		{"empty", func(b []byte) []byte { return nil }, ErrTruncated},
		{"cut", func(b []byte) []byte { return b[:len(b)-1] }, ErrTruncated},
		{"magic", func(b []byte) []byte { b[1] = 'X'; return b }, ErrCorrupt},
		{"checksum", func(b []byte) []byte { b[20] ^= 1; return b }, ErrChecksum},
		{"huge length", func(b []byte) []byte { binary.LittleEndian.PutUint32(b[12:], 1<<30); return b }, ErrCorrupt},
		{"version", func(b []byte) []byte { return reseal(b, func(b []byte) { b[8] = Version + 1 }) }, ErrVersion},
		{"json", func(b []byte) []byte { return reseal(b, func(b []byte) { b[16] = '[' }) }, ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewReader(bytes.NewReader(tc.edit(bytes.Clone(good))))
			var fe *FormatError
			if !errors.As(err, &fe) || !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want a *FormatError wrapping %v", err, tc.want)
			}
		})
	}
}

// reseal edits a header-only file and fixes its checksum.
func reseal(b []byte, edit func([]byte)) []byte {
	edit(b)
	n := len(b) - 4
	binary.LittleEndian.PutUint32(b[n:], crc32.Checksum(b[:n], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

func TestFormatErrorMessage(t *testing.T) {
	err := error(&FormatError{Offset: 42, Err: ErrTruncated})
	if got, want := err.Error(), "trace: byte offset 42: truncated file"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, ErrTruncated) {
		t.Error("errors.Is(err, ErrTruncated) = false")
	}
}

// TestIncompressibleChunk checks that a chunk zstd cannot shrink is
// stored uncompressed and reads back.
func TestIncompressibleChunk(t *testing.T) {
	noise := make([]byte, 4000)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range noise {
		noise[i] = byte(rng.Uint32())
	}
	want := []Record{&String{ID: 1, Text: string(noise)}}
	data := writeTrace(t, Options{}, want)
	_, spans := layout(t, data)
	if codec := data[spans[0].off+4]; codec != codecStored {
		t.Errorf("codec %d, want %d (stored)", codec, codecStored)
	}
	_, got, err := readAll(t, data)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("read %v, %v", got, err)
	}
}

// TestRoundTripInstrumentation round-trips the records and header fields
// of instrumented recordings, including thread elision across events.
func TestRoundTripInstrumentation(t *testing.T) {
	want := []Record{
		&Event{Time: 5, PID: 1, TID: 2, Kind: EventEntry, Function: 3},
		&Event{Time: 6, PID: 1, TID: 2, Kind: EventExit, Function: 3},
		&Sample{Time: 6, PID: 1, TID: 7, CPU: 1, Period: 1000, Stack: 1},
		&Event{Time: 4, PID: 1, TID: 9, Kind: EventEntry, Function: math.MaxUint32},
		&Event{Time: math.MaxUint64, PID: math.MaxUint32, TID: math.MaxUint32, Kind: EventExit},
		&Switch{Time: 7, PID: 1, TID: 2, CPU: 1, Out: true, Preempt: true},
		&Switch{Time: 8, PID: 1, TID: 2},
		&Probe{Time: 9, PID: 1, Function: 3, Address: math.MaxUint64, Mech: ProbeRetInsn},
		&Probe{Time: 9, PID: 1, Function: 4, Address: 5, Mech: ProbeEntry, Stepped: true},
		&Probe{Time: 9, PID: 1, Function: 5, Address: 6, Mech: ProbeDynamic, CallSite: true},
		// RetInsn alone, and with the two flags before it.
		&Probe{Time: 9, PID: 1, Function: 6, Address: 7, Mech: ProbeDynamic, RetInsn: true},
		&Probe{Time: 9, PID: 1, Function: 7, Address: 8, Mech: ProbeDynamic, Stepped: true, CallSite: true, RetInsn: true},
		&Adjust{Time: 10, PID: 1, TID: 2, Duration: 1234, Dropped: math.MaxUint64},
		&IRQ{Time: 11, PID: 1, TID: 2, CPU: 1, Kind: IRQSoft, Vector: 7, Duration: 2500},
		&GoID{Time: 12, PID: 1, TID: 2, GoID: math.MaxUint64},
		&Counter{Time: 13, PID: 1, TID: 2, Kind: CounterPageFaults, Value: 12345},
		&Labels{Time: 14, PID: 1, GoID: 17, Pairs: []LabelPair{{Key: 1, Value: 2}, {Key: 3, Value: math.MaxUint32}}},
		&Labels{Time: 15, PID: 1, GoID: math.MaxUint64, Truncated: true, Pairs: []LabelPair{{Key: 1, Value: 0}}},
		&Labels{Time: 16, PID: 1, GoID: 17}, // cleared
		&Pause{Time: 17, Duration: 1_200_000_000, Dropped: 42},
		&Pause{Time: math.MaxUint64, Duration: math.MaxUint64, Dropped: math.MaxUint64},
	}
	h := testHeader()
	h.Instrument = "hook"
	h.Calibration = &Calibration{Mechanism: "hook", Host: "host", Statistic: "min",
		Time: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Overhead: [Transitions]float64{1.5, 2, 3, 4.25}, PerCall: 18, Samples: 1000}
	for _, opt := range []Options{{}, {ChunkSize: 1}} {
		var buf bytes.Buffer
		w, err := NewWriter(&buf, h, opt)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range want {
			if err := w.Write(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		gotH, got, err := readAll(t, buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(gotH.Calibration, h.Calibration) || gotH.Instrument != "hook" {
			t.Errorf("header calibration %+v", gotH.Calibration)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("chunk size %d:\ngot  %v\nwant %v", opt.ChunkSize, got, want)
		}
	}
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, testHeader(), Options{})
	if err := w.Write(&Event{PID: 1, TID: 1}); !errors.Is(err, ErrInvalidRecord) {
		t.Errorf("event without a kind: %v", err)
	}
}

// TestEndDetached round-trips End's appended detach time: absent (0, as
// an older recorder writes it), at the End itself, and long before it.
func TestEndDetached(t *testing.T) {
	recs := []Record{
		&End{Time: 20, ExitCode: -1},
		&End{Time: 20, ExitCode: -1, Detached: 20},
		&End{Time: math.MaxUint64, Detached: 1},
	}
	_, got, err := readAll(t, writeTrace(t, Options{}, recs))
	if err != nil || !reflect.DeepEqual(got, recs) {
		t.Errorf("read %v (%v), want %v", got, err, recs)
	}
}

// TestSampleReason checks that every unwind reason survives the flags
// bits it is stored in, beside the other flags, and has its name.
func TestSampleReason(t *testing.T) {
	names := map[string]bool{}
	for r := UnwindNone; r < NumUnwindReasons; r++ {
		s := Sample{Flags: SampleTruncated | SampleKernel | ReasonFlags(r)}
		if got := s.Reason(); got != r {
			t.Errorf("reason %d: stored as %#x, read back %d", r, s.Flags, got)
		}
		if s.Flags&^sampleFlagMask != 0 {
			t.Errorf("reason %d uses bits beyond the minor code: %#x", r, s.Flags)
		}
		if names[r.String()] {
			t.Errorf("reason %d: duplicate name %q", r, r)
		}
		names[r.String()] = true
	}
	if UnwindStackShort.String() != "stack-short" || UnwindReason(9).String() != "reason-9" {
		t.Errorf("names: %q, %q", UnwindStackShort, UnwindReason(9))
	}
}

// TestTruncations: the reasons with counts, in order, without UnwindNone,
// and a loop may stop early.
func TestTruncations(t *testing.T) {
	var by [NumUnwindReasons]uint64
	by[UnwindNone], by[2], by[NumUnwindReasons-1] = 5, 2, 1
	var got []string
	for r, n := range Truncations(&by) {
		got = append(got, fmt.Sprint(r, " ", n))
	}
	if want := []string{"no-cfi 2", "max-depth 1"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	for r := range Truncations(&by) {
		if r != 2 {
			t.Errorf("first reason %v", r)
		}
		break
	}
}

// TestAppendRunEvent: a trace written with AppendRunEvent first and
// WriteEvent for the events it declines is the same file, byte for
// byte and in its Stats, as one written with Write alone, in every
// mode (and every chunk boundary in between); and AppendRunEvent takes most of a call load's events where
// the writer has no look due.
func TestAppendRunEvent(t *testing.T) {
	stream := append(append(runStream(20000), eventStream(5000)...), wideStream(20000)...)
	for _, tc := range []struct {
		name string
		opt  Options
		// most: AppendRunEvent writes most events.
		most bool
	}{
		{"default", Options{}, true},
		{"small chunks", Options{ChunkSize: 4 << 10}, true},
		// Below the limit: where it is reached depends on how far the
		// compression goroutine got, with Write alone too.
		{"normal, limited", Options{Mode: ModeNormal, SizeLimit: 1 << 20, ChunkSize: 4 << 10}, true},
		{"wrap", Options{Mode: ModeWrap, SizeLimit: 24 << 10}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, wantStats, _ := writeAppending(t, tc.opt, stream, false)
			got, gotStats, appended := writeAppending(t, tc.opt, stream, true)
			if !bytes.Equal(got, want) {
				t.Errorf("AppendRunEvent's file differs from Write's (%d bytes, want %d)", len(got), len(want))
			}
			if gotStats != wantStats {
				t.Errorf("stats %+v, want %+v", gotStats, wantStats)
			}
			if events := 50000; tc.most != (appended > events/2) {
				t.Errorf("AppendRunEvent wrote %d of %d events", appended, events)
			}
		})
	}
}

// writeAppending writes recs with Write or, if appending, each event
// with AppendRunEvent first, and returns the file, the writer's Stats
// and the events AppendRunEvent wrote.
func writeAppending(t *testing.T, opt Options, recs []Record, appending bool) ([]byte, Stats, int) {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, testHeader(), opt)
	if err != nil {
		t.Fatal(err)
	}
	appended := 0
	for _, r := range recs {
		if e, ok := r.(*Event); ok && appending && w.AppendRunEvent(e.Time, e.PID, e.TID, e.Kind, e.Function) {
			appended++
			continue
		}
		if err := w.Write(r); err != nil && !errors.Is(err, ErrSizeLimit) {
			t.Fatalf("Write(%#v): %v", r, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), w.Stats(), appended
}
