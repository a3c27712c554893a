package trace

import (
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

// Header returns the file header.
func (r *Reader) Header() Header { return r.header }

// Next returns the next record: a pointer to one of the record types of
// this package, freshly allocated, so callers may keep it. Records of
// unknown major codes (written by a newer version) are skipped.
//
// Next returns io.EOF when the file ends cleanly at a chunk boundary.
// Otherwise, at the first truncated or damaged chunk it returns a
// *FormatError with the chunk's offset, wrapping ErrTruncated,
// ErrChecksum or ErrCorrupt; every record before that chunk has been
// returned. A file cut exactly at a chunk boundary cannot be told from a
// complete one here: a complete trace ends with an End record.
func (r *Reader) Next() (Record, error) {
	if r.err != nil {
		return nil, r.err
	}
	for {
		r.chunk.shared = r.shared
		rec, err := r.chunk.next()
		if err != nil {
			r.err = &FormatError{r.chunkOff, err}
			return nil, r.err
		}
		if rec != nil {
			return rec, nil
		}
		if r.chunk.records != r.want {
			r.err = &FormatError{r.chunkOff, fmt.Errorf("%w: chunk holds %d records, header says %d", ErrCorrupt, r.chunk.records, r.want)}
			return nil, r.err
		}
		if err := r.readChunk(); err != nil {
			r.err = err
			return nil, err
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

// Offset returns the file offset of the chunk holding the record last
// returned by Next.
func (r *Reader) Offset() int64 { return r.chunkOff }

// readChunk reads, checks and decompresses the next chunk.
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
		return &FormatError{off, fmt.Errorf("%w: bad chunk magic %q", ErrCorrupt, h[:4])}
	}
	if crc32.Checksum(h[:24], castagnoli) != binary.LittleEndian.Uint32(h[24:]) {
		return &FormatError{off, fmt.Errorf("%w: chunk header", ErrChecksum)}
	}
	codec := h[4]
	storedLen := binary.LittleEndian.Uint32(h[8:])
	rawLen := binary.LittleEndian.Uint32(h[12:])
	count := binary.LittleEndian.Uint32(h[16:])
	sum := binary.LittleEndian.Uint32(h[20:])
	switch {
	case codec != codecStored && codec != codecZstd:
		return &FormatError{off, fmt.Errorf("%w: unknown chunk codec %d", ErrCorrupt, codec)}
	case rawLen > MaxChunkSize || storedLen > maxStoredSize:
		return &FormatError{off, fmt.Errorf("%w: chunk sizes %d/%d exceed the limit", ErrCorrupt, storedLen, rawLen)}
	case codec == codecStored && storedLen != rawLen:
		return &FormatError{off, fmt.Errorf("%w: stored chunk of %d bytes claims %d", ErrCorrupt, storedLen, rawLen)}
	case uint64(count)*3 > uint64(rawLen):
		// Every record takes at least three bytes.
		return &FormatError{off, fmt.Errorf("%w: %d records cannot fit %d bytes", ErrCorrupt, count, rawLen)}
	}
	r.stored, err = readN(r.r, r.stored[:0], int(storedLen))
	if err != nil {
		return r.readError(off, err)
	}
	r.off = off + chunkHeaderSize + int64(storedLen)
	if crc32.Checksum(r.stored, castagnoli) != sum {
		return &FormatError{off, fmt.Errorf("%w: chunk payload", ErrChecksum)}
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
			return &FormatError{off, fmt.Errorf("%w: decompressing: %v", ErrCorrupt, err)}
		}
	}
	if len(data) != int(rawLen) {
		return &FormatError{off, fmt.Errorf("%w: chunk decompressed to %d bytes, header says %d", ErrCorrupt, len(data), rawLen)}
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
