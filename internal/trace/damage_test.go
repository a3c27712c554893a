package trace

import (
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"testing"
)

// chunkSpan is where a chunk lies in a file and how many records of the
// test stream it holds (all known, so all returned).
type chunkSpan struct {
	off, end int
	records  int
}

// layout parses a valid file's header length and chunk spans.
func layout(t *testing.T, data []byte) (int, []chunkSpan) {
	t.Helper()
	hdr := fileHeaderFixed + int(binary.LittleEndian.Uint32(data[12:])) + 4
	var spans []chunkSpan
	for off := hdr; off < len(data); {
		end := off + chunkHeaderSize + int(binary.LittleEndian.Uint32(data[off+8:]))
		spans = append(spans, chunkSpan{off, end, int(binary.LittleEndian.Uint32(data[off+16:]))})
		off = end
	}
	return hdr, spans
}

// damageFile is a multi-chunk trace with every record type.
func damageFile(t *testing.T) ([]byte, []Record) {
	recs := smallRecords()
	return writeTrace(t, Options{ChunkSize: 256}, recs), recs
}

// smallRecords is every record type with edge values and a couple of
// hundred samples, in about 3 kB.
func smallRecords() []Record {
	var recs []Record
	for _, r := range edgeRecords() {
		if s, ok := r.(*String); ok && len(s.Text) > 100 {
			continue // the big string would make one big chunk
		}
		if l, ok := r.(*Location); ok && len(l.Lines) > 100 {
			continue
		}
		recs = append(recs, r)
	}
	for _, r := range recorderStream(200) {
		switch r.(type) {
		case *Location, *StackNode, *String:
			// Few are enough; the samples refer to none in particular.
		default:
			recs = append(recs, r)
		}
	}
	return recs
}

// TestTruncation cuts a multi-chunk file at every byte offset: the reader
// returns the records of every complete chunk, then ErrTruncated at the
// offset of the cut chunk, or io.EOF for a cut at a chunk boundary.
func TestTruncation(t *testing.T) {
	data, all := damageFile(t)
	hdr, spans := layout(t, data)
	if len(spans) < 10 {
		t.Fatalf("only %d chunks", len(spans))
	}
	t.Logf("%d bytes, %d chunks", len(data), len(spans))
	for cut := 0; cut < len(data); cut++ {
		_, recs, err := readAll(t, data[:cut])
		if cut < hdr {
			var fe *FormatError
			if !errors.As(err, &fe) || !errors.Is(err, ErrTruncated) || fe.Offset != 0 {
				t.Fatalf("cut at %d (in the file header): err = %v", cut, err)
			}
			continue
		}
		// Complete chunks before the cut, and the chunk the cut is in.
		n, whole, boundary := 0, 0, cut == hdr
		for _, s := range spans {
			if s.end > cut {
				break
			}
			n += s.records
			whole++
			boundary = s.end == cut
		}
		switch {
		case boundary && err != nil:
			t.Fatalf("cut at chunk boundary %d: err = %v, want io.EOF", cut, err)
		case !boundary:
			var fe *FormatError
			if !errors.As(err, &fe) || !errors.Is(err, ErrTruncated) || fe.Offset != int64(spans[whole].off) {
				t.Fatalf("cut at %d: err = %v, want ErrTruncated at %d", cut, err, spans[whole].off)
			}
		}
		if !reflect.DeepEqual(recs, all[:n:n]) && !(n == 0 && len(recs) == 0) {
			t.Fatalf("cut at %d: got %d records, want the %d of complete chunks", cut, len(recs), n)
		}
	}
}

// TestBitFlips flips every bit of a multi-chunk file: the reader reports
// the damaged chunk's offset, after returning every record before it.
func TestBitFlips(t *testing.T) {
	data, all := damageFile(t)
	hdr, spans := layout(t, data)
	chunkHeader := func(off int) bool {
		for _, s := range spans {
			if off >= s.off && off < s.off+chunkHeaderSize {
				return true
			}
		}
		return false
	}
	for i := range len(data) * 8 {
		// Every bit of the headers, one bit of each payload byte.
		if off := i / 8; off >= hdr && !chunkHeader(off) && i%8 != off*3%8 {
			continue
		}
		data[i/8] ^= 1 << (i % 8)
		_, recs, err := readAll(t, data)
		data[i/8] ^= 1 << (i % 8)
		var fe *FormatError
		if !errors.As(err, &fe) {
			t.Fatalf("bit %d flipped: err = %v, want a *FormatError", i, err)
		}
		if i/8 < hdr {
			if recs != nil || fe.Offset > int64(hdr) {
				t.Fatalf("bit %d flipped (in the file header): %d records, err %v", i, len(recs), err)
			}
			continue
		}
		n, c := 0, 0
		for spans[c].end <= i/8 {
			n += spans[c].records
			c++
		}
		if fe.Offset != int64(spans[c].off) {
			t.Fatalf("bit %d flipped: err = %v, want offset %d", i, err, spans[c].off)
		}
		// A flip in a length field may look like a truncated file; any
		// other flip is caught by a checksum.
		if !errors.Is(err, ErrChecksum) && !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("bit %d flipped: err = %v", i, err)
		}
		if !reflect.DeepEqual(recs, all[:n:n]) && !(n == 0 && len(recs) == 0) {
			t.Fatalf("bit %d flipped: got %d records, want %d", i, len(recs), n)
		}
	}
}

// errReader fails after its data, as a disk with a bad sector would.
type errReader struct {
	data []byte
	err  error
}

func (r *errReader) Read(b []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(b, r.data)
	r.data = r.data[n:]
	return n, nil
}

func TestReadError(t *testing.T) {
	data, _ := damageFile(t)
	_, spans := layout(t, data)
	ioErr := errors.New("input/output error")
	r, err := NewReader(&errReader{data[:spans[1].off+5], ioErr})
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = r.Next()
	}
	var fe *FormatError
	if !errors.Is(err, ioErr) || !errors.As(err, &fe) || fe.Offset != int64(spans[1].off) {
		t.Errorf("err = %v, want the I/O error at offset %d", err, spans[1].off)
	}
	if _, err2 := r.Next(); err2 != err {
		t.Errorf("error not sticky: %v", err2)
	}
	if err == io.EOF {
		t.Error("I/O error reported as io.EOF")
	}
}
