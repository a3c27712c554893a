package trace

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// decoder is shared by all Readers: DecodeAll is safe for concurrent use
// and a Decoder is expensive to create. Its memory limit rejects a
// payload that would expand beyond MaxChunkSize.
var decoder = sync.OnceValues(func() (*zstd.Decoder, error) {
	return zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(0),
		zstd.WithDecoderMaxMemory(MaxChunkSize),
		zstd.WithDecodeAllCapLimit(true),
	)
})

// Reader reads a trace file record by record. After an error other than
// io.EOF, every later call to Next returns the same error.
type Reader struct {
	r      io.Reader
	header Header
	off    int64 // file offset of the next unread byte

	chunkOff int64 // file offset of the current chunk
	chunk    chunkDecoder
	want     uint32 // record count announced by the chunk header

	shared bool // Scan: the decoder reuses its time-ordered records

	stored []byte // payload as read from the file, reused
	raw    []byte // decompressed payload, reused
	err    error  // sticky

	damage DamageError // the damaged chunks skipped so far
}

// DamageError is the error Next returns at the end of a trace in which it
// skipped damaged chunks: every intact chunk before and after them has
// been returned. First is the first damage (its chunk's offset and
// cause, wrapping ErrChecksum or ErrCorrupt), so errors.Is and errors.As
// see it; End is the error that ended the file after it (a truncated last
// chunk), nil at a clean end.
type DamageError struct {
	First  *FormatError
	Chunks int   // damaged chunks skipped: a damaged run with no chunk header left in it counts as one
	Bytes  int64 // file bytes skipped
	End    error
}

// Error says where the damage began and how much was skipped.
func (e *DamageError) Error() string {
	s := fmt.Sprintf("%v; skipped %d damaged chunk(s), %d bytes, and read on", e.First, e.Chunks, e.Bytes)
	if e.End != nil {
		s += "; then " + e.End.Error()
	}
	return s
}

// Unwrap returns First and End.
func (e *DamageError) Unwrap() []error { return []error{e.First, e.End} }

// chunkDamage is a damaged chunk readChunk found: rescan holds the bytes
// it read after the chunk's first one when the chunk header cannot be
// trusted (the next chunk may begin in them); nil when the header was
// intact and the whole chunk has been read past.
type chunkDamage struct {
	*FormatError
	rescan []byte
}

// NewReader reads and checks the file header of r. Errors about the file
// are *FormatError values.
func NewReader(r io.Reader) (*Reader, error) {
	rd := &Reader{r: r}
	var fixed [fileHeaderFixed]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return nil, rd.readError(0, err)
	}
	if string(fixed[:len(fileMagic)]) != fileMagic {
		return nil, &FormatError{0, fmt.Errorf("%w: not a trueprof trace (bad magic %q)", ErrCorrupt, fixed[:len(fileMagic)])}
	}
	version := binary.LittleEndian.Uint32(fixed[8:])
	n := binary.LittleEndian.Uint32(fixed[12:])
	if n > maxHeaderJSON {
		return nil, &FormatError{12, fmt.Errorf("%w: header length %d exceeds %d", ErrCorrupt, n, maxHeaderJSON)}
	}
	rest := make([]byte, int(n)+4)
	if _, err := io.ReadFull(r, rest); err != nil {
		return nil, rd.readError(0, err)
	}
	js, sum := rest[:n], binary.LittleEndian.Uint32(rest[n:])
	crc := crc32.Update(crc32.Checksum(fixed[:], castagnoli), castagnoli, js)
	if crc != sum {
		return nil, &FormatError{0, fmt.Errorf("%w: file header", ErrChecksum)}
	}
	// The version is checked after the checksum, so that a flipped bit
	// is reported as such rather than as a file from the future.
	if version == 0 || version > Version {
		return nil, &FormatError{8, fmt.Errorf("%w: version %d, this reader supports up to %d", ErrVersion, version, Version)}
	}
	if err := json.Unmarshal(js, &rd.header); err != nil {
		return nil, &FormatError{int64(fileHeaderFixed), fmt.Errorf("%w: header: %v", ErrCorrupt, err)}
	}
	rd.header.Version = int(version)
	rd.off = int64(fileHeaderFixed) + int64(n) + 4
	return rd, nil
}

// Damaged tells whether Next has skipped a damaged chunk: records after
// it may refer to strings, locations or stack nodes that were in it.
func (r *Reader) Damaged() bool { return r.damage.First != nil }

// Header returns the file header.
func (r *Reader) Header() Header { return r.header }

// Next returns the next record: a pointer to one of the record types of
// this package, freshly allocated, so callers may keep it. Records of
// unknown major codes (written by a newer version) are skipped.
//
// Next returns io.EOF when the file ends cleanly at a chunk boundary. A
// damaged chunk (ErrChecksum, ErrCorrupt) is skipped and reading goes on
// with the next intact one; at the end Next then returns a *DamageError
// that sums up what was skipped. Without damage, a truncated last chunk
// gives a *FormatError with the chunk's offset, wrapping ErrTruncated;
// every record before that chunk has been returned. A file cut exactly
// at a chunk boundary cannot be told from a complete one here: a
// complete trace ends with an End record.
func (r *Reader) Next() (Record, error) {
	if r.err != nil {
		return nil, r.err
	}
	for {
		r.chunk.shared = r.shared
		rec, err := r.chunk.next()
		if err == nil && rec != nil {
			return rec, nil
		}
		if err == nil && r.chunk.records != r.want {
			err = fmt.Errorf("%w: chunk holds %d records, header says %d", ErrCorrupt, r.chunk.records, r.want)
		}
		if err != nil {
			// The payload passed its checksum: the next chunk starts
			// where this one's header says it ends.
			r.skipped(&FormatError{r.chunkOff, err}, r.off-r.chunkOff)
		}
		if err := r.nextChunk(); err != nil {
			r.err = err
			return nil, err
		}
	}
}

// skipped counts a damaged chunk of n bytes at fe.Offset.
func (r *Reader) skipped(fe *FormatError, n int64) {
	if r.damage.First == nil {
		r.damage.First = fe
	}
	r.damage.Chunks++
	r.damage.Bytes += n
	r.chunk.reset(nil)
	r.want = 0
}

// nextChunk reads the next intact chunk, skipping damaged ones: a chunk
// whose header is intact is skipped whole, otherwise the reader looks for
// the next chunk header (magic and CRC) after the damaged one's first
// byte. At the end of the file it returns io.EOF, or the *DamageError
// that sums up what it skipped.
func (r *Reader) nextChunk() error {
	for {
		err := r.readChunk()
		var d *chunkDamage
		if !errors.As(err, &d) {
			if err != nil && r.damage.First != nil {
				d := r.damage
				if err != io.EOF {
					d.End = err
				}
				return &d
			}
			return err
		}
		if d.rescan == nil {
			r.skipped(d.FormatError, r.off-d.Offset)
			continue
		}
		next, err := r.resync(d.Offset+1, d.rescan)
		r.skipped(d.FormatError, next-d.Offset)
		if err != nil {
			d := r.damage
			if err != io.EOF {
				d.End = err
			}
			return &d
		}
	}
}

// resync finds the next chunk header at or after file offset off, buf
// holding the bytes from off already read, and makes it the next thing
// read. It returns the header's offset, or the end of the file and
// io.EOF (or the read error) when there is none.
func (r *Reader) resync(off int64, buf []byte) (int64, error) {
	buf = bytes.Clone(buf)
	more := make([]byte, 64<<10)
	for {
		i := bytes.Index(buf, []byte(chunkMagic))
		switch {
		case i < 0:
			keep := min(len(buf), len(chunkMagic)-1) // a magic cut at the end of buf
			off += int64(len(buf) - keep)
			buf = append(buf[:0], buf[len(buf)-keep:]...)
		case len(buf)-i < chunkHeaderSize:
			off += int64(i)
			buf = append(buf[:0], buf[i:]...)
		case crc32.Checksum(buf[i:i+24], castagnoli) == binary.LittleEndian.Uint32(buf[i+24:]):
			off += int64(i)
			r.r = io.MultiReader(bytes.NewReader(buf[i:]), r.r)
			r.off = off
			return off, nil
		default:
			off += int64(i + 1)
			buf = append(buf[:0], buf[i+1:]...)
			continue
		}
		n, err := r.r.Read(more)
		buf = append(buf, more[:n]...)
		if err != nil && n == 0 {
			if err == io.EOF {
				return off + int64(len(buf)), io.EOF
			}
			return off + int64(len(buf)), r.readError(off, err)
		}
	}
}

// Scan is Next without allocating for the records a trace holds one of
// per sample or event (Sample, Event, Switch, Adjust, IRQ, GoID): it
// returns the same one of each kind every time, overwritten by the next
// call to Scan or Next, so a caller copies what it keeps. The other
// records are Next's. A reader that converts every record (model's
// loader and stream) reads a trace this way at no allocation per event:
// BenchmarkScan.
func (r *Reader) Scan() (Record, error) {
	if r.err == nil {
		if e := r.chunk.scanEvent(); e != nil {
			return e, nil
		}
	}
	r.shared = true
	rec, err := r.Next()
	r.shared = false
	return rec, err
}

// SkimEvents consumes the events that follow in the chunk at hand as
// Scan would return them, as long as each is of the thread of the last
// event decoded (call it right after Scan returned an Event), of a
// function in [1, maxFunc) and at most until in time; it folds their
// times into span and returns how many it consumed (0 when the next
// record is another). A reader that only counts events and checks them
// (model's first pass of a stream) skims runs of them in a third of the
// instructions that Scan and its own work on each event took.
func (r *Reader) SkimEvents(maxFunc uint32, until uint64, span *TimeSpan) int {
	if r.err != nil {
		return 0
	}
	return r.chunk.skimEvents(maxFunc, until, span)
}

// TimeSpan sums up the times of records in file order.
type TimeSpan struct {
	// First and Last are the earliest and latest times; 0 with none.
	First, Last uint64
	// Lateness is the most a record came after a later one.
	Lateness uint64
	Any      bool // whether a time was added
	// Mins are the earliest times of each SpanBlock times added in
	// turn, the last block's so far: a reader putting the records back
	// in time order knows from them which times are still to come.
	Mins []uint64
	n    int // times added
}

// SpanBlock is the number of times of each of TimeSpan.Mins.
const SpanBlock = 4096

// Add folds t, the time of the next record, into s.
func (s *TimeSpan) Add(t uint64) {
	if !s.Any || t < s.First {
		s.First, s.Any = t, true
	}
	if t < s.Last {
		s.Lateness = max(s.Lateness, s.Last-t)
	}
	s.Last = max(s.Last, t)
	if s.n%SpanBlock == 0 {
		s.Mins = append(s.Mins, t)
	} else if m := &s.Mins[len(s.Mins)-1]; t < *m {
		*m = t
	}
	s.n++
}

// Offset returns the file offset of the chunk holding the record last
// returned by Next.
func (r *Reader) Offset() int64 { return r.chunkOff }

// readChunk reads, checks and decompresses the next chunk. A damaged
// chunk is a *chunkDamage; the end of the file io.EOF, a truncated chunk
// or a read error a *FormatError.
func (r *Reader) readChunk() error {
	off := r.off
	r.chunkOff = off
	r.chunk.reset(nil)
	r.want = 0
	var h [chunkHeaderSize]byte
	n, err := io.ReadFull(r.r, h[:])
	if err == io.EOF && n == 0 {
		return io.EOF
	}
	if err != nil {
		return r.readError(off, err)
	}
	if string(h[:4]) != chunkMagic {
		return &chunkDamage{&FormatError{off, fmt.Errorf("%w: bad chunk magic %q", ErrCorrupt, h[:4])}, h[1:]}
	}
	if crc32.Checksum(h[:24], castagnoli) != binary.LittleEndian.Uint32(h[24:]) {
		return &chunkDamage{&FormatError{off, fmt.Errorf("%w: chunk header", ErrChecksum)}, h[1:]}
	}
	codec := h[4]
	storedLen := binary.LittleEndian.Uint32(h[8:])
	rawLen := binary.LittleEndian.Uint32(h[12:])
	count := binary.LittleEndian.Uint32(h[16:])
	sum := binary.LittleEndian.Uint32(h[20:])
	switch {
	case codec != codecStored && codec != codecZstd:
		return &chunkDamage{&FormatError{off, fmt.Errorf("%w: unknown chunk codec %d", ErrCorrupt, codec)}, h[1:]}
	case rawLen > MaxChunkSize || storedLen > maxStoredSize:
		return &chunkDamage{&FormatError{off, fmt.Errorf("%w: chunk sizes %d/%d exceed the limit", ErrCorrupt, storedLen, rawLen)}, h[1:]}
	case codec == codecStored && storedLen != rawLen:
		return &chunkDamage{&FormatError{off, fmt.Errorf("%w: stored chunk of %d bytes claims %d", ErrCorrupt, storedLen, rawLen)}, h[1:]}
	case uint64(count)*3 > uint64(rawLen):
		// Every record takes at least three bytes.
		return &chunkDamage{&FormatError{off, fmt.Errorf("%w: %d records cannot fit %d bytes", ErrCorrupt, count, rawLen)}, h[1:]}
	}
	r.stored, err = readN(r.r, r.stored[:0], int(storedLen))
	if err != nil {
		return r.readError(off, err)
	}
	r.off = off + chunkHeaderSize + int64(storedLen)
	if crc32.Checksum(r.stored, castagnoli) != sum {
		return &chunkDamage{FormatError: &FormatError{off, fmt.Errorf("%w: chunk payload", ErrChecksum)}}
	}
	data := r.stored
	if codec == codecZstd {
		dec, err := decoder()
		if err != nil {
			return &FormatError{off, fmt.Errorf("trace: zstd: %w", err)}
		}
		if cap(r.raw) < int(rawLen) {
			// rawLen is checksummed and bounded by MaxChunkSize.
			r.raw = make([]byte, 0, rawLen)
		}
		data, err = dec.DecodeAll(r.stored, r.raw[:0:rawLen])
		if err != nil {
			return &chunkDamage{FormatError: &FormatError{off, fmt.Errorf("%w: decompressing: %v", ErrCorrupt, err)}}
		}
	}
	if len(data) != int(rawLen) {
		return &chunkDamage{FormatError: &FormatError{off, fmt.Errorf("%w: chunk decompressed to %d bytes, header says %d", ErrCorrupt, len(data), rawLen)}}
	}
	r.chunk.reset(data)
	r.want = count
	return nil
}

// readN reads exactly n bytes into buf, growing it as data arrives
// rather than all at once: n comes from the file, and a truncated file
// should not cost a MaxChunkSize allocation.
func readN(r io.Reader, buf []byte, n int) ([]byte, error) {
	const step = 1 << 20
	for len(buf) < n {
		if len(buf) == cap(buf) {
			buf = append(buf, make([]byte, min(n-len(buf), max(step, len(buf))))...)[:len(buf)]
		}
		m, err := io.ReadFull(r, buf[len(buf):min(cap(buf), n)])
		buf = buf[:len(buf)+m]
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return buf, err
		}
	}
	return buf, nil
}

// readError turns an error reading the header or chunk at off into a
// *FormatError: an early end of file is ErrTruncated, anything else is
// the underlying reader's error.
func (r *Reader) readError(off int64, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return &FormatError{off, ErrTruncated}
	}
	return &FormatError{off, err}
}
