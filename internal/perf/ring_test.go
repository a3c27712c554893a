package perf

import (
	"encoding/binary"
	"os"
	"testing"
)

// putRecord writes a record of the given size and type at tail of a ring
// over data, wrapping around its end like the kernel does.
func putRecord(data []byte, tail uint64, typ uint32, size uint16, fill byte) {
	rec := make([]byte, size)
	binary.LittleEndian.PutUint32(rec, typ)
	binary.LittleEndian.PutUint16(rec[6:], size)
	for i := headerSize; i < int(size); i++ {
		rec[i] = fill
	}
	mask := uint64(len(data) - 1)
	for i, b := range rec {
		data[(tail+uint64(i))&mask] = b
	}
}

func TestReadRing(t *testing.T) {
	tests := []struct {
		name  string
		start uint64 // tail position of the first record
		sizes []uint16
	}{
		{"empty", 0, nil},
		{"one", 0, []uint16{16}},
		{"fills exactly", 0, []uint16{32, 32}},
		{"wraps in header", 60, []uint16{16, 8}},
		{"wraps in body", 56, []uint16{24, 16}},
		{"positions beyond 2^32", 1<<32 + 40, []uint16{40, 24}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := make([]byte, 64)
			head := tt.start
			for i, s := range tt.sizes {
				putRecord(data, head, uint32(i+1), s, byte(i+1))
				head += uint64(s)
			}
			var got []uint16
			tail, n, _ := readRing(data, head, tt.start, nil, func(rec []byte) {
				typ := binary.LittleEndian.Uint32(rec)
				for _, b := range rec[headerSize:] {
					if b != byte(typ) {
						t.Errorf("record %d: body byte %d, want %d", typ, b, typ)
						break
					}
				}
				got = append(got, uint16(len(rec)))
			})
			if tail != head || n != len(tt.sizes) {
				t.Fatalf("tail %d n %d, want %d %d", tail, n, head, len(tt.sizes))
			}
			for i := range got {
				if got[i] != tt.sizes[i] {
					t.Errorf("record %d: size %d, want %d", i, got[i], tt.sizes[i])
				}
			}
		})
	}
}

func TestReadRingMalformed(t *testing.T) {
	data := make([]byte, 64)
	putRecord(data, 0, 1, 16, 1)
	binary.LittleEndian.PutUint16(data[6:], 4) // smaller than a header
	tail, n, _ := readRing(data, 16, 0, nil, func([]byte) { t.Error("callback on malformed record") })
	if tail != 16 || n != 0 {
		t.Errorf("tail %d n %d: a malformed record must be skipped to head", tail, n)
	}
}

func TestParseCPUList(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int
		ok   bool
	}{{"0", 1, true}, {"0-3,6", 5, true}, {"0-1,4-5", 4, true}, {"x", 0, false}, {"3-1", 0, false}} {
		got, err := parseCPUList(tt.in)
		if (err == nil) != tt.ok || len(got) != tt.want {
			t.Errorf("parseCPUList(%q) = %v, %v", tt.in, got, err)
		}
	}
}

func TestRingPagesFor(t *testing.T) {
	page := int64(os.Getpagesize())
	for _, c := range []struct {
		bytes int64
		want  int
	}{
		{0, 1},
		{1, 1},
		{page, 1},
		{page + 1, 2},
		{3 * page, 4},
		{2 << 20, int(2 << 20 / page)},
		{2<<20 + 1, int(4 << 20 / page)},
	} {
		if got := RingPagesFor(c.bytes); got != c.want {
			t.Errorf("RingPagesFor(%d) = %d, want %d", c.bytes, got, c.want)
		}
	}
}
