package trace

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"slices"

	"github.com/klauspost/compress/zstd"
)

// Mode is how a Writer treats the size limit: the normal, wrap-around
// and continuous modes of a trace buffer (docs/architecture.md, wrap mode).
type Mode string

// Recording modes.
const (
	// ModeNormal stops accepting samples and events once the file has
	// reached Options.SizeLimit (no limit if SizeLimit ≤ 0). Other
	// records are still written, so the recorder can log what it lost
	// and end the trace properly.
	ModeNormal Mode = "normal"
	// ModeWrap keeps the most recent Options.SizeLimit bytes of
	// (compressed) samples and events, and every other record. Samples
	// and events are held in memory until Close, like a classic in-memory
	// trace buffer; everything else is written as it comes.
	ModeWrap Mode = "wrap"
	// ModeContinuous writes everything, with no limit.
	ModeContinuous Mode = "continuous"
)

// Options configures a Writer. The zero value is a normal-mode writer
// with no size limit, 1 MiB chunks and zstd's default level.
type Options struct {
	// Mode is the recording mode; "" means ModeNormal.
	Mode Mode
	// SizeLimit is, in ModeNormal, the file size in bytes at which
	// samples are refused (≤ 0: unlimited), and in ModeWrap the number
	// of bytes of sample chunks retained (required, > 0). ModeContinuous
	// ignores it.
	SizeLimit int64
	// ChunkSize is the uncompressed size in bytes at which the Writer
	// ends a chunk by itself; 0 means DefaultChunkSize. At most
	// MaxChunkSize/2, so that a chunk plus one record stays within
	// MaxChunkSize.
	ChunkSize int
	// ZstdLevel is the compression level; 0 means zstd.SpeedDefault,
	// which compresses samples about 3× at well over 100 MB/s.
	ZstdLevel zstd.EncoderLevel
	// Observe, when not nil, is handed every record Write accepts into
	// the main chunk, after it is encoded (an aggregating recorder builds
	// its tables from them); in wrap mode the samples and events it holds
	// back are not. It must not keep the record, which callers reuse.
	Observe func(Record)
}

// Stats counts what a Writer did.
type Stats struct {
	Records   uint64 // records accepted by Write and Intern, samples included
	Samples   uint64 // samples accepted (in wrap mode, some may be discarded later)
	Rejected  uint64 // normal mode: samples and events refused with ErrSizeLimit
	Discarded uint64 // wrap mode: accepted samples and events discarded to stay within SizeLimit
	Chunks    uint64 // chunks written to the file
	RawBytes  int64  // uncompressed bytes of the chunks written
	Retained  int64  // wrap mode: bytes of sample chunks held in memory
}

// Writer writes a trace file. It buffers records into chunks and writes
// each chunk with a single Write call to the underlying writer, so a
// recorder killed at any moment leaves a file that is readable up to its
// last complete chunk. A Writer is not safe for concurrent use.
type Writer struct {
	w   io.Writer
	opt Options
	enc *zstd.Encoder

	main    chunkBuilder // every record in normal and continuous mode; the unbounded ones in wrap mode
	samples chunkBuilder // wrap mode: the open chunk of samples and events (bounded records)

	sampleChunkSize int           // wrap mode: raw size at which a sample chunk ends
	ring            []storedChunk // wrap mode: retained sample chunks, oldest first
	ringBytes       int64
	discardedTime   uint64 // wrap mode: time of the newest discarded sample
	ends            []End  // wrap mode: End records, written last at Close

	strings map[string]uint32

	size int64
	full bool // normal mode: the size limit was reached
	// rejectedEvents counts the events refused in normal mode, which
	// Close reports in one Lost record (the recorder writes one per
	// refused sample itself; events come by the tens of millions).
	rejectedEvents uint64
	lastRejected   uint64 // time of the last of them
	err            error  // first write error; every later call returns it
	closed         bool
	stats          Stats
	out            []byte // scratch: the chunk being written
}

// storedChunk is a complete chunk (header and payload) held in memory.
type storedChunk struct {
	data     []byte
	records  uint32 // samples and events
	lastTime uint64
}

// sizeLimitSlack is how close to Options.SizeLimit a normal-mode file
// gets before samples are refused. Compressed sizes are only known after
// a chunk is compressed, so the Writer compresses early near the limit;
// stopping a little short avoids a run of tiny chunks.
const sizeLimitSlack = 4 << 10

// NewWriter writes the file header for h to w and returns a Writer for
// the records. It sets h.Version to Version, and h.Mode and h.SizeLimit
// from opt, so that the header describes the file. It does not take
// ownership of w: Close does not close it.
func NewWriter(w io.Writer, h *Header, opt Options) (*Writer, error) {
	if h == nil {
		return nil, errors.New("trace: nil header")
	}
	if opt.Mode == "" {
		opt.Mode = ModeNormal
	}
	switch opt.Mode {
	case ModeNormal, ModeContinuous:
	case ModeWrap:
		if opt.SizeLimit <= 0 {
			return nil, errors.New("trace: wrap mode needs a positive SizeLimit")
		}
	default:
		return nil, fmt.Errorf("trace: unknown mode %q", opt.Mode)
	}
	if opt.ChunkSize == 0 {
		opt.ChunkSize = DefaultChunkSize
	}
	if opt.ChunkSize < 0 || opt.ChunkSize > maxOptionChunkSize {
		return nil, fmt.Errorf("trace: chunk size %d not in [1, %d]", opt.ChunkSize, maxOptionChunkSize)
	}
	if opt.ZstdLevel == 0 {
		opt.ZstdLevel = zstd.SpeedDefault
	}
	enc, err := zstd.NewWriter(nil,
		zstd.WithEncoderLevel(opt.ZstdLevel),
		zstd.WithEncoderConcurrency(1),
		// The chunk CRC already covers the payload.
		zstd.WithEncoderCRC(false),
		// Chunks are at most MaxChunkSize; a window beyond the
		// chunk's own size would only cost memory.
		zstd.WithWindowSize(min(zstd.MaxWindowSize, nextPow2(opt.ChunkSize*2))),
	)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}

	h.Version = Version
	h.Mode = string(opt.Mode)
	h.SizeLimit = opt.SizeLimit
	if opt.Mode == ModeContinuous {
		h.SizeLimit = 0
	}
	js, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("trace: encoding header: %w", err)
	}
	if len(js) > maxHeaderJSON {
		return nil, fmt.Errorf("trace: header of %d bytes exceeds %d", len(js), maxHeaderJSON)
	}
	wr := &Writer{
		w:       w,
		opt:     opt,
		enc:     enc,
		strings: make(map[string]uint32),
	}
	if opt.Mode == ModeWrap {
		// Several chunks fit in the ring, so that discarding the
		// oldest one throws away a small part of the samples.
		wr.sampleChunkSize = int(min(max(opt.SizeLimit/8, 256), int64(opt.ChunkSize)))
	}
	b := make([]byte, 0, fileHeaderFixed+len(js)+4)
	b = append(b, fileMagic...)
	b = binary.LittleEndian.AppendUint32(b, Version)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(js)))
	b = append(b, js...)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	if err := wr.write(b); err != nil {
		return nil, err
	}
	return wr, nil
}

func nextPow2(n int) int {
	p := 1 << 10
	for p < n {
		p <<= 1
	}
	return p
}

// Write adds r to the trace. Records are buffered; they reach the
// underlying writer when a chunk fills up, at Flush and at Close.
//
// Samples and events are the bounded records: in normal mode a *Sample
// or *Event is refused with ErrSizeLimit once the file has (nearly)
// reached Options.SizeLimit, and in wrap mode they go to the retained
// chunks of which the oldest are discarded; other records (modules,
// threads, switches, adjustments, ...) are always accepted. Close
// counts refused events in a Lost{Kind: LostSize} record; refused
// samples are the caller's to count. In wrap mode, *End records are held
// back and written after the retained samples at Close, so that End
// stays the last record.
// Write returns ErrInvalidRecord for records it cannot encode and the
// first error of the underlying writer after one occurred.
func (w *Writer) Write(r Record) error {
	if err := w.check(); err != nil {
		return err
	}
	_, isSample := r.(*Sample)
	switch r := r.(type) {
	case *Sample, *Event:
		switch {
		case w.opt.Mode == ModeWrap:
			if err := w.samples.add(r); err != nil {
				return err
			}
			w.count(isSample)
			if len(w.samples.raw) >= w.sampleChunkSize {
				w.sealSamples()
			}
			return nil
		case w.opt.Mode == ModeNormal && w.opt.SizeLimit > 0:
			if err := w.makeRoom(); err != nil {
				if e, ok := r.(*Event); ok {
					w.rejectedEvents++
					w.lastRejected = e.Time
				}
				return err
			}
		}
	case *End:
		if w.opt.Mode == ModeWrap && r != nil {
			w.ends = append(w.ends, *r)
			w.count(false)
			return nil
		}
	}
	if err := w.main.add(r); err != nil {
		return err
	}
	if w.opt.Observe != nil {
		w.opt.Observe(r)
	}
	w.count(isSample)
	if len(w.main.raw) >= w.opt.ChunkSize {
		return w.flushMain()
	}
	return nil
}

func (w *Writer) count(sample bool) {
	w.stats.Records++
	if sample {
		w.stats.Samples++
	}
}

// makeRoom decides whether one more sample or event fits a normal-mode
// file.
func (w *Writer) makeRoom() error {
	if w.full {
		w.stats.Rejected++
		return ErrSizeLimit
	}
	// A sample record takes at most 2 + 1 + 5×10 bytes. The pending
	// raw bytes bound their compressed size, since a chunk that does
	// not compress is stored as is.
	const maxSample = 64
	limit := w.opt.SizeLimit - sizeLimitSlack
	if w.size+int64(len(w.main.raw))+chunkHeaderSize+maxSample <= limit {
		return nil
	}
	// Compress what is pending to learn its true size.
	if err := w.flushMain(); err != nil {
		return err
	}
	if w.size+chunkHeaderSize+maxSample <= limit {
		return nil
	}
	w.full = true
	w.stats.Rejected++
	return ErrSizeLimit
}

// Intern returns the id of the string s, writing a String record the
// first time s is seen. The empty string is always 0 and never written.
// Ids are assigned from 1 in order of first use; do not mix Intern with
// writing *String records directly.
func (w *Writer) Intern(s string) (uint32, error) {
	if s == "" {
		return 0, nil
	}
	if id, ok := w.strings[s]; ok {
		return id, nil
	}
	if len(w.strings) >= math.MaxUint32-1 {
		return 0, errors.New("trace: too many strings")
	}
	id := uint32(len(w.strings) + 1)
	if err := w.Write(&String{ID: id, Text: s}); err != nil {
		return 0, err
	}
	w.strings[s] = id
	return id, nil
}

// Flush ends the current chunk and writes it to the underlying writer.
// The recorder calls it every second, so that a killed recorder loses at
// most the last second of records. In wrap mode samples stay in memory
// until Close anyway, so only the other records are flushed.
func (w *Writer) Flush() error {
	if err := w.check(); err != nil {
		return err
	}
	return w.flushMain()
}

// Close flushes the trace and releases the compressor. In normal mode
// it writes a Lost{Kind: LostSize} record counting the refused events
// (if any). In wrap mode it first writes a Lost{Kind: LostWrap} record
// counting the discarded samples and events (if any), then the retained
// chunks, then any End records. Close does not close the underlying writer. Calling Close
// again returns ErrClosed.
func (w *Writer) Close() error {
	if w.closed {
		return ErrClosed
	}
	defer func() {
		w.closed = true
		w.enc.Close()
		w.ring = nil
	}()
	if w.err != nil {
		return w.err
	}
	if n := w.rejectedEvents; n > 0 {
		// Written past the limit like every unbounded record: the loss
		// must show.
		if err := w.main.add(&Lost{Time: w.lastRejected, Kind: LostSize, Count: n}); err != nil {
			return err
		}
		w.stats.Records++
	}
	if w.opt.Mode == ModeWrap {
		w.sealSamples()
		if d := w.stats.Discarded; d > 0 {
			if err := w.main.add(&Lost{Time: w.discardedTime, Kind: LostWrap, Count: d}); err != nil {
				return err
			}
			w.stats.Records++
		}
		if err := w.flushMain(); err != nil {
			return err
		}
		for _, c := range w.ring {
			if err := w.write(c.data); err != nil {
				return err
			}
			w.stats.Chunks++
			w.ringBytes -= int64(len(c.data))
		}
		w.ring = nil
		w.stats.Retained = 0
		for i := range w.ends {
			if err := w.main.add(&w.ends[i]); err != nil {
				return err
			}
		}
	}
	return w.flushMain()
}

// Size returns the number of bytes written to the underlying writer so
// far, header included. In wrap mode retained samples are not counted
// until Close writes them; Stats().Retained counts them.
func (w *Writer) Size() int64 { return w.size }

// Stats returns counts of what the Writer did so far.
func (w *Writer) Stats() Stats {
	s := w.stats
	s.Retained = w.ringBytes
	return s
}

func (w *Writer) check() error {
	if w.closed {
		return ErrClosed
	}
	return w.err
}

// write writes b with one call, keeping the first error.
func (w *Writer) write(b []byte) error {
	if w.err != nil {
		return w.err
	}
	n, err := w.w.Write(b)
	w.size += int64(n)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		w.err = fmt.Errorf("trace: writing: %w", err)
	}
	return w.err
}

// flushMain writes the main chunk, if it holds any record.
func (w *Writer) flushMain() error {
	if w.main.records == 0 {
		return nil
	}
	w.out = w.encodeChunk(w.out[:0], &w.main)
	w.stats.RawBytes += int64(len(w.main.raw))
	w.main.reset()
	if err := w.write(w.out); err != nil {
		return err
	}
	w.stats.Chunks++
	return nil
}

// sealSamples moves the open chunk of samples and events into the ring,
// discarding the oldest chunks beyond SizeLimit.
func (w *Writer) sealSamples() {
	if w.samples.records == 0 {
		return
	}
	c := storedChunk{
		data:     slices.Clone(w.encodeChunk(w.out[:0], &w.samples)),
		records:  w.samples.records,
		lastTime: w.samples.lastTime,
	}
	w.stats.RawBytes += int64(len(w.samples.raw))
	w.samples.reset()
	w.ring = append(w.ring, c)
	w.ringBytes += int64(len(c.data))
	drop := 0
	for w.ringBytes > w.opt.SizeLimit && drop < len(w.ring) {
		old := w.ring[drop]
		w.ringBytes -= int64(len(old.data))
		w.stats.Discarded += uint64(old.records)
		w.discardedTime = old.lastTime
		drop++
	}
	if drop > 0 {
		// Shift rather than reslice, so the backing array does not
		// keep dropped chunks alive or grow without bound.
		n := copy(w.ring, w.ring[drop:])
		clear(w.ring[n:])
		w.ring = w.ring[:n]
	}
}

// encodeChunk appends the chunk header and compressed payload of c to
// dst. A chunk that zstd cannot shrink is stored uncompressed.
func (w *Writer) encodeChunk(dst []byte, c *chunkBuilder) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, chunkHeaderSize)...)
	dst = w.enc.EncodeAll(c.raw, dst)
	codec := byte(codecZstd)
	if len(dst)-start-chunkHeaderSize >= len(c.raw) {
		dst = append(dst[:start+chunkHeaderSize], c.raw...)
		codec = codecStored
	}
	payload := dst[start+chunkHeaderSize:]
	h := dst[start : start+chunkHeaderSize]
	copy(h, chunkMagic)
	h[4] = codec
	h[5], h[6], h[7] = 0, 0, 0
	binary.LittleEndian.PutUint32(h[8:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(h[12:], uint32(len(c.raw)))
	binary.LittleEndian.PutUint32(h[16:], c.records)
	binary.LittleEndian.PutUint32(h[20:], crc32.Checksum(payload, castagnoli))
	binary.LittleEndian.PutUint32(h[24:], crc32.Checksum(h[:24], castagnoli))
	return dst
}

// Snapshot writes to dst a complete trace of everything w was given so
// far, while w goes on: the file written through w, read back from src
// (that file, or anything holding its bytes), then in wrap mode the
// retained sample chunks, then one chunk with the Lost records Close
// would write, the records of tail (the recorder's closing records, such
// as an open pause) and end, whose Reason is set to reason's string id.
// The copy therefore reads as a finished recording. w's open chunk is
// flushed first (and in wrap mode its open sample chunk sealed), which
// changes where w's chunks end but none of its records. Snapshot returns
// the number of bytes written to dst.
func (w *Writer) Snapshot(dst io.Writer, src io.ReaderAt, end End, reason string, tail ...Record) (int64, error) {
	if err := w.Flush(); err != nil {
		return 0, err
	}
	n, err := io.Copy(dst, io.NewSectionReader(src, 0, w.size))
	if err != nil {
		return n, fmt.Errorf("trace: snapshot: %w", err)
	}
	if n < w.size {
		return n, fmt.Errorf("trace: snapshot: %w: %d of %d bytes", io.ErrUnexpectedEOF, n, w.size)
	}
	if w.opt.Mode == ModeWrap {
		w.sealSamples()
		for _, c := range w.ring {
			m, err := dst.Write(c.data)
			n += int64(m)
			if err != nil {
				return n, fmt.Errorf("trace: snapshot: %w", err)
			}
		}
	}
	var c chunkBuilder
	if d := w.stats.Discarded; d > 0 {
		if err := c.add(&Lost{Time: w.discardedTime, Kind: LostWrap, Count: d}); err != nil {
			return n, err
		}
	}
	if r := w.rejectedEvents; r > 0 {
		if err := c.add(&Lost{Time: w.lastRejected, Kind: LostSize, Count: r}); err != nil {
			return n, err
		}
	}
	for _, r := range tail {
		if err := c.add(r); err != nil {
			return n, err
		}
	}
	// The reason is interned in the copy only: the id after w's last
	// one, which w will give another string later, but not in the copy.
	id, ok := w.strings[reason]
	if !ok && reason != "" {
		id = uint32(len(w.strings) + 1)
		if err := c.add(&String{ID: id, Text: reason}); err != nil {
			return n, err
		}
	}
	end.Reason = id
	if err := c.add(&end); err != nil {
		return n, err
	}
	m, err := dst.Write(w.encodeChunk(nil, &c))
	n += int64(m)
	if err != nil {
		return n, fmt.Errorf("trace: snapshot: %w", err)
	}
	return n, nil
}
