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
	// ModeWrap keeps every record but samples and events, and of those
	// each thread's most recent ones that fit a file of
	// Options.SizeLimit bytes (or half of it, if the other records take
	// more), shared by thread (see wrap.go). Samples and events are held in
	// memory until Close, like a classic in-memory trace buffer;
	// everything else is written as it comes.
	ModeWrap Mode = "wrap"
	// ModeContinuous writes everything, with no limit.
	ModeContinuous Mode = "continuous"
)

// Options configures a Writer. The zero value is a normal-mode writer
// with no size limit, 256 KiB chunks and zstd's fastest level.
type Options struct {
	// Mode is the recording mode; "" means ModeNormal.
	Mode Mode
	// SizeLimit is, in ModeNormal, the file size in bytes at which
	// samples are refused (≤ 0: unlimited), and in ModeWrap the file
	// size within which samples and events are retained (required,
	// > 0).
	// ModeContinuous ignores it.
	SizeLimit int64
	// ChunkSize is the uncompressed size in bytes at which the Writer
	// ends a chunk by itself; 0 means DefaultChunkSize. At most
	// MaxChunkSize/2, so that a chunk plus one record stays within
	// MaxChunkSize.
	ChunkSize int
	// ZstdLevel is the compression level; 0 means zstd.SpeedFastest:
	// its tables are a fifth of SpeedDefault's, and a recording's first
	// touch of them (page faults, each with a TLB shootdown on a
	// multithreaded recorder) took a third of zstd's time in a short
	// hook recording (400,002 events: zstd 6.6-12.7 ms of a run at the
	// default level, 3.0-5.0 ms at the fastest); with runs of events it
	// writes 0.405 bytes an event on the dense load (default 0.352,
	// the bar 0.5).
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
	RawBytes  int64  // uncompressed bytes of the chunks written (wrap mode: and retained)
	Retained  int64  // wrap mode: bytes of sample and event chunks held in memory
}

// Writer writes a trace file. It buffers records into chunks, which a
// goroutine of its own compresses and writes, in order, each with a
// single Write call to the underlying writer, so a recorder killed at
// any moment leaves a file that is readable up to its last complete
// chunk. A Writer is not safe for concurrent use.
type Writer struct {
	opt Options
	p   *pipeline

	main chunkBuilder // every record in normal and continuous mode; the unbounded ones in wrap mode

	// Wrap mode: each thread's open chunk of samples and events, by pid
	// and tid (cur the one written to last), and the next incarnation's
	// number.
	threads     map[[2]uint32]*openChunk
	cur         *openChunk
	gen         uint32
	threadChunk int    // raw size at which a thread's chunk ends
	latest      uint64 // time of the latest sample or event
	ends        []End  // End records, written last at Close

	strings map[string]uint32

	// wrap and limited are opt.Mode == ModeWrap, and ModeNormal with a
	// SizeLimit: looked at for every event.
	wrap, limited bool
	full          bool // normal mode: the size limit was reached
	// room is, in normal mode, the length of the main chunk up to which
	// samples and events fit without a look at the file's size: what
	// makeRoom last found free. The file's bound only shrinks as the
	// pipeline compresses, and the main chunk grows by the records
	// added; flushMain resets it (the next chunk has a header of its
	// own). Looking for every event cost the dense load 3 ns an event.
	room int
	// fast is the length of the main chunk below which WriteEvent adds
	// an event and nothing else: no error seen, not closed, no Observe,
	// not wrap mode, and an event (at most maxEventBytes) neither ends
	// the chunk nor goes past room. The slow path sets it; flushMain
	// and Close clear it. The looks it saves were a third of the
	// writer's time an event (BenchmarkHookPath).
	fast int
	// rejectedEvents counts the events refused in normal mode, which
	// Close reports in one Lost record (the recorder writes one per
	// refused sample itself; events come by the tens of millions).
	rejectedEvents uint64
	lastRejected   uint64 // time of the last of them
	closed         bool
	stats          Stats
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
		opt.ZstdLevel = zstd.SpeedFastest
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
		opt:     opt,
		wrap:    opt.Mode == ModeWrap,
		limited: opt.Mode == ModeNormal && opt.SizeLimit > 0,
		strings: make(map[string]uint32),
	}
	var store *wrapStore
	if opt.Mode == ModeWrap {
		// Several chunks of a thread fit in the budget, so that
		// discarding the oldest one throws away a small part of it.
		wr.threadChunk = int(min(max(opt.SizeLimit/8, 256), int64(opt.ChunkSize)))
		wr.threads = make(map[[2]uint32]*openChunk)
		store = newWrapStore(opt.SizeLimit)
	}
	// A chunk ends at the first record past ChunkSize (a thread's chunk
	// in wrap mode at twice its size at most): room for one more record
	// of the usual size saves a reallocation.
	wr.p = newPipeline(w, enc, opt.ChunkSize+256, store)
	wr.main.raw = wr.p.buffer()
	b := make([]byte, 0, fileHeaderFixed+len(js)+4)
	b = append(b, fileMagic...)
	b = binary.LittleEndian.AppendUint32(b, Version)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(js)))
	b = append(b, js...)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	if wr.p.write(b); wr.p.err() != nil {
		enc.Close()
		return nil, wr.p.err()
	}
	wr.p.start()
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
// underlying writer after a chunk fills up, at Flush and at Close.
//
// Samples and events are the bounded records: in normal mode a *Sample
// or *Event is refused with ErrSizeLimit once the file has (nearly)
// reached Options.SizeLimit, and in wrap mode they go to their thread's
// retained chunks, of which the oldest are discarded (see wrap.go);
// other records (modules, threads, switches, adjustments, ...) are
// always accepted. Close counts refused events in a Lost{Kind:
// LostSize} record; refused samples are the caller's to count. In wrap
// mode, *End records are held back and written after the retained
// samples at Close, so that End stays the last record.
// Write returns ErrInvalidRecord for records it cannot encode and, once
// a write of the underlying writer has failed, that error (the chunks
// are written behind Write's back: the error shows at a later call, at
// the latest at Close).
func (w *Writer) Write(r Record) error {
	if e, ok := r.(*Event); ok && e != nil {
		return w.WriteEvent(e)
	}
	if err := w.check(); err != nil {
		return err
	}
	_, isSample := r.(*Sample)
	switch r := r.(type) {
	case *Sample:
		if w.wrap {
			if r == nil {
				break // main.add refuses it
			}
			return w.writeThread(r, r.PID, r.TID, r.Time, nil)
		}
		if w.limited {
			if err := w.makeRoom(); err != nil {
				return err
			}
		}
	case *Exit:
		if w.wrap && r != nil {
			// The thread's chunk ends with it; a thread that reuses
			// its id is another incarnation.
			if c := w.threads[[2]uint32{r.PID, r.TID}]; c != nil {
				w.endThread(c, r.Time)
			}
		}
	case *End:
		if w.wrap && r != nil {
			w.ends = append(w.ends, *r)
			w.count(false)
			return nil
		}
	}
	if err := w.main.add(r); err != nil {
		return err
	}
	w.added(r, isSample)
	return nil
}

// added hands r, just added to the main chunk, to Options.Observe,
// counts it and ends the chunk once it is full.
func (w *Writer) added(r Record, sample bool) {
	if w.opt.Observe != nil {
		w.opt.Observe(r)
	}
	w.count(sample)
	if len(w.main.raw) >= w.opt.ChunkSize {
		w.flushMain()
	}
}

// WriteEvent is Write for an event, without the dispatch on the
// record's type: the per-event path of instrumented recordings, tens of
// millions a second. e must not be nil.
func (w *Writer) WriteEvent(e *Event) error {
	if len(w.main.raw) < w.fast {
		if err := w.main.addEvent(e); err != nil {
			return err
		}
		w.stats.Records++
		return nil
	}
	if err := w.check(); err != nil {
		return err
	}
	if w.wrap {
		return w.writeThread(e, e.PID, e.TID, e.Time, e)
	}
	if w.limited {
		if err := w.makeRoom(); err != nil {
			w.rejectedEvents++
			w.lastRejected = e.Time
			return err
		}
	}
	if err := w.main.addEvent(e); err != nil {
		return err
	}
	w.added(e, false)
	if w.opt.Observe == nil {
		limit := w.opt.ChunkSize
		if w.limited {
			limit = min(limit, w.room)
		}
		w.fast = limit - maxEventBytes
	}
	return nil
}

// AppendRunEvent writes the event of thread pid/tid at time t, of kind
// and function fn, if it is WriteEvent's commonest case, and reports
// whether it did; the caller writes any other with WriteEvent. That
// case is an event of the same thread as the open run of events, close
// enough in time and of a function small enough to join it in two bytes
// (three in a wide run), with no look at the chunk's
// end or the size limit due (fast): most events of a call load. It
// takes no Event, so that the recorder's per-event loop writes these
// events without going through its own event processing, the
// resolver's FunctionLocation, WriteEvent and addEvent, a call each
// with their frames and spills and the Event's stores and loads
// (BenchmarkHookPath: 25.3 CPU ns an event before, 22.2 after).
func (w *Writer) AppendRunEvent(t uint64, pid, tid uint32, kind EventKind, fn uint32) bool {
	if len(w.main.raw) >= w.fast || w.main.runRoom == 0 || fn > w.main.runMax || !w.main.fitsRun(t, pid, tid, kind, fn) {
		return false
	}
	w.main.appendRunEvent(t, kind, fn)
	w.stats.Records++
	return true
}

// maxEventBytes bounds the bytes addEvent adds: a record's type, minor
// and length, and a body of at most 25 bytes.
const maxEventBytes = 28

// writeThread adds the sample or event r of thread pid/tid at time t to
// the thread's open chunk (wrap mode); e is r if it is an event.
func (w *Writer) writeThread(r Record, pid, tid uint32, t uint64, e *Event) error {
	c := w.cur
	if c == nil || c.key.pid != pid || c.key.tid != tid || c.exit != 0 {
		id := [2]uint32{pid, tid}
		// A thread's events may come after its Exit record, which the
		// kernel delivers sooner than the hooks' rings are drained:
		// only a record later than the exit is another incarnation's.
		if c = w.threads[id]; c == nil || c.exit != 0 && t > c.exit {
			if c != nil {
				w.sealThread(c) // what came after its Exit record
			}
			w.gen++
			c = &openChunk{key: threadKey{pid: pid, tid: tid, gen: w.gen}}
			w.threads[id] = c
		}
		w.cur = c
	}
	if c.b.records == 0 {
		c.first = t
		if c.b.raw == nil {
			c.b.raw = w.p.buffer()
		}
	}
	if err := c.b.add(r); err != nil {
		return err
	}
	w.count(e == nil)
	w.latest = max(w.latest, t)
	if e != nil {
		c.note(e)
	}
	if c.full(w.threadChunk) {
		w.sealThread(c)
	}
	return nil
}

// sealThread hands a thread's open chunk, if it holds any record, to
// the pipeline, which compresses it into the wrap store, and starts the
// thread's next chunk.
func (w *Writer) sealThread(c *openChunk) {
	if c.b.records == 0 {
		return
	}
	w.p.send(job{kind: jobRetain, raw: c.b.raw, records: c.b.records, items: c.b.items, thread: c.key, first: c.first, last: c.b.lastTime})
	c.b.reset()
	c.b.raw = nil // the next record takes a buffer
	c.depth, c.low = 0, 0
}

// endThread seals the chunk of a thread that exited at time t and lets
// its buffer go; the thread's records up to t still go to its next
// chunk, later ones to another incarnation (writeThread).
func (w *Writer) endThread(c *openChunk, t uint64) {
	w.sealThread(c)
	if c.b.raw != nil {
		w.p.recycle(c.b.raw)
		c.b.raw = nil
	}
	c.exit = max(t, 1)
}

// sealThreads seals every open chunk of wrap mode, in the order of their
// keys so that files do not depend on map order.
func (w *Writer) sealThreads() {
	open := make([]*openChunk, 0, len(w.threads))
	for _, c := range w.threads {
		open = append(open, c)
	}
	slices.SortFunc(open, func(a, b *openChunk) int { return a.key.compare(b.key) })
	for _, c := range open {
		w.sealThread(c)
	}
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
	if len(w.main.raw) < w.room {
		return nil
	}
	if w.full {
		w.stats.Rejected++
		return ErrSizeLimit
	}
	// A sample record takes at most 2 + 1 + 5×10 bytes. The pending
	// raw bytes (those of the queued chunks too) bound their compressed
	// size, since a chunk that does not compress is stored as is.
	const maxSample = 64
	limit := w.opt.SizeLimit - sizeLimitSlack
	if free := limit - (w.p.written() + int64(len(w.main.raw)) + chunkHeaderSize + maxSample); free >= 0 {
		w.room = len(w.main.raw) + int(min(free, int64(w.opt.ChunkSize)))
		return nil
	}
	// Compress what is pending and wait for it, to learn its true size.
	w.flushMain()
	w.p.sync()
	if err := w.check(); err != nil {
		return err
	}
	if w.p.size.Load()+chunkHeaderSize+maxSample <= limit {
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

// Flush ends the current chunk and returns once it is written to the
// underlying writer, with the chunks queued before it. The recorder
// calls it every second, so that a killed recorder loses at most the
// last second of records. In wrap mode samples and events stay in
// memory until Close anyway, so only the other records are flushed.
func (w *Writer) Flush() error {
	if err := w.check(); err != nil {
		return err
	}
	w.flushMain()
	w.forgetExited()
	w.p.sync()
	return w.p.err()
}

// exitedGrace is how long after a thread's Exit record its late records
// are still expected (the recorder orders records within a second).
const exitedGrace = 2_000_000_000

// forgetExited drops the open chunks of the threads that exited more
// than exitedGrace before the latest record (sealing what came after
// their Exit): a program that starts threads by the million would
// otherwise keep one for each. A record of such a thread that still
// came would start another incarnation, and lose nothing.
func (w *Writer) forgetExited() {
	for id, c := range w.threads {
		if c.exit != 0 && c.exit+exitedGrace < w.latest {
			w.sealThread(c)
			delete(w.threads, id)
			if w.cur == c {
				w.cur = nil
			}
		}
	}
}

// Close flushes the trace, waits until every chunk is written and
// releases the compressor. In normal mode it writes a Lost{Kind:
// LostSize} record counting the refused events (if any). In wrap mode
// it first writes a Lost{Kind: LostWrap} record counting the discarded
// samples and events (if any), then the retained chunks by the time of
// their first record, then any End records. Close does not close the
// underlying writer. Calling Close again returns ErrClosed.
func (w *Writer) Close() error {
	if w.closed {
		return ErrClosed
	}
	w.closed, w.fast = true, 0
	err := w.close()
	w.p.stop()
	if err == nil {
		err = w.p.err()
	}
	return err
}

func (w *Writer) close() error {
	if err := w.p.err(); err != nil {
		return err
	}
	if n := w.rejectedEvents; n > 0 {
		// Written past the limit like every unbounded record: the loss
		// must show.
		if err := w.main.add(&Lost{Time: w.lastRejected, Kind: LostSize, Count: n}); err != nil {
			return err
		}
		w.stats.Records++
	}
	if w.wrap {
		w.sealThreads()
		w.flushMain()
		w.p.sync()
		st := w.p.store
		st.fit(w.p.outside())
		if d := st.discarded; d > 0 {
			if err := w.main.add(&Lost{Time: st.discardedTime, Kind: LostWrap, Count: d}); err != nil {
				return err
			}
			w.stats.Records++
		}
		w.flushMain()
		for _, c := range st.ordered() {
			w.p.send(job{kind: jobStored, raw: c.data})
		}
		for i := range w.ends {
			if err := w.main.add(&w.ends[i]); err != nil {
				return err
			}
		}
	}
	w.flushMain()
	return nil
}

// Size returns the number of bytes written to the underlying writer so
// far, header included; chunks still being compressed are not counted.
// In wrap mode retained samples and events are not counted until Close
// writes them; Stats().Retained counts them.
func (w *Writer) Size() int64 { return w.p.size.Load() }

// Stats returns counts of what the Writer did so far. It waits for the
// chunks being compressed.
func (w *Writer) Stats() Stats {
	w.p.sync()
	s := w.stats
	s.Chunks, s.RawBytes = w.p.chunks, w.p.rawBytes
	if st := w.p.store; st != nil {
		s.Discarded, s.Retained = st.discarded, st.bytes
		if w.p.stopped {
			s.Retained = 0 // written by Close
		}
	}
	return s
}

func (w *Writer) check() error {
	if w.closed {
		return ErrClosed
	}
	return w.p.err()
}

// flushMain hands the main chunk, if it holds any record, to the
// pipeline.
func (w *Writer) flushMain() {
	if w.main.records == 0 {
		return
	}
	w.p.send(job{kind: jobWrite, raw: w.main.raw, records: w.main.records})
	w.main.reset()
	w.main.raw = w.p.buffer()
	w.room, w.fast = 0, 0
}

// Snapshot writes to dst a complete trace of everything w was given so
// far, while w goes on: the file written through w, read back from src
// (that file, or anything holding its bytes), then in wrap mode the
// retained chunks of samples and events, then one chunk with the Lost
// records Close would write, the records of tail (the recorder's
// closing records, such as an open pause) and end, whose Reason is set
// to reason's string id. The copy therefore reads as a finished
// recording. w's open chunk is flushed first (and in wrap mode the
// threads' open chunks sealed) and Snapshot waits until it is written,
// which changes where w's chunks end but none of its records. Snapshot
// returns the number of bytes written to dst.
func (w *Writer) Snapshot(dst io.Writer, src io.ReaderAt, end End, reason string, tail ...Record) (int64, error) {
	if err := w.check(); err != nil {
		return 0, err
	}
	w.flushMain()
	if w.wrap {
		w.sealThreads()
	}
	// From here to the return the pipeline's goroutine is idle: its
	// file size, store and encoder are this goroutine's.
	w.p.sync()
	if err := w.check(); err != nil {
		return 0, err
	}
	size := w.p.size.Load()
	n, err := io.Copy(dst, io.NewSectionReader(src, 0, size))
	if err != nil {
		return n, fmt.Errorf("trace: snapshot: %w", err)
	}
	if n < size {
		return n, fmt.Errorf("trace: snapshot: %w: %d of %d bytes", io.ErrUnexpectedEOF, n, size)
	}
	var c chunkBuilder
	if st := w.p.store; st != nil {
		for _, rc := range st.ordered() {
			m, err := dst.Write(rc.data)
			n += int64(m)
			if err != nil {
				return n, fmt.Errorf("trace: snapshot: %w", err)
			}
		}
		if d := st.discarded; d > 0 {
			if err := c.add(&Lost{Time: st.discardedTime, Kind: LostWrap, Count: d}); err != nil {
				return n, err
			}
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
	m, err := dst.Write(w.p.encode(nil, c.raw, c.records))
	n += int64(m)
	if err != nil {
		return n, fmt.Errorf("trace: snapshot: %w", err)
	}
	return n, nil
}
