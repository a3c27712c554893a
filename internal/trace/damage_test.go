package trace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// chunkSpan is where a chunk lies in a file and how many records of the
// test stream it holds (all known, so all returned).
type chunkSpan struct {
	off, end int
	records  int
}

// layout parses a valid file's header length and chunk spans.
func layout(t testing.TB, data []byte) (int, []chunkSpan) {
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

// TestBitFlips flips every bit of a multi-chunk file: the reader skips
// the damaged chunk and returns every record of every other chunk, then
// a *DamageError with the damaged chunk's offset and size.
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
		if i/8 < hdr {
			var fe *FormatError
			if !errors.As(err, &fe) || recs != nil || fe.Offset > int64(hdr) {
				t.Fatalf("bit %d flipped (in the file header): %d records, err %v", i, len(recs), err)
			}
			continue
		}
		n, c := 0, 0
		for spans[c].end <= i/8 {
			n += spans[c].records
			c++
		}
		var de *DamageError
		if !errors.As(err, &de) || de.First.Offset != int64(spans[c].off) || de.Chunks != 1 ||
			de.Bytes != int64(spans[c].end-spans[c].off) || de.End != nil {
			t.Fatalf("bit %d flipped: err = %v, want damage of the chunk at %d (%d bytes)", i, err, spans[c].off, spans[c].end-spans[c].off)
		}
		// Any flip is caught by a checksum, or makes the header say
		// something impossible.
		if !errors.Is(err, ErrChecksum) && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("bit %d flipped: err = %v", i, err)
		}
		want := append(slices.Clone(all[:n]), all[n+spans[c].records:]...)
		if !reflect.DeepEqual(recs, want) {
			t.Fatalf("bit %d flipped: got %d records, want the %d outside the damaged chunk", i, len(recs), len(want))
		}
	}
}

// TestDamagedFirstChunk overwrites the middle of the first chunks, headers
// included (the field test's corrupted byte near offset 5,000 kept 0 of
// 2,615 samples): the reader resynchronises at the first intact chunk
// header after the damage, says where the damage began and how much it
// skipped, then returns every later record, and a truncated end after
// the damage is said too.
func TestDamagedFirstChunk(t *testing.T) {
	data, all := damageFile(t)
	hdr, spans := layout(t, data)
	bad := slices.Clone(data)
	for i := spans[0].off + 10; i < spans[2].off+5; i++ {
		bad[i] = 0x5a
	}
	_, recs, err := readAll(t, bad)
	var de *DamageError
	if !errors.As(err, &de) || de.First.Offset != int64(spans[0].off) || de.Bytes != int64(spans[3].off-spans[0].off) || de.End != nil {
		t.Fatalf("err = %v, want damage from %d, %d bytes skipped", err, hdr, spans[3].off-spans[0].off)
	}
	skipped := spans[0].records + spans[1].records + spans[2].records
	if !reflect.DeepEqual(recs, all[skipped:]) {
		t.Errorf("got %d records, want the %d of the chunks after the damage", len(recs), len(all)-skipped)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("byte offset %d", spans[0].off)) || !strings.Contains(err.Error(), "bytes") {
		t.Errorf("message %q lacks the offset and what was skipped", err)
	}
	// Cut in the last chunk as well: the damage and the truncation.
	_, recs, err = readAll(t, bad[:spans[len(spans)-1].off+3])
	if !errors.As(err, &de) || !errors.Is(err, ErrTruncated) || len(recs) != len(all)-skipped-spans[len(spans)-1].records {
		t.Errorf("cut: %d records, err %v", len(recs), err)
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
