package record

import (
	"fmt"
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"trueprof/internal/perf"
)

// ringReader empties the sampling rings on a goroutine of its own, so
// that they never wait for the loop: the loop, busy processing, opens
// each new module's symbols and CFI inline (250-350 ms for libLLVM, 2 to
// 3.5 s for node on a loaded machine), and a ring of 16 MiB holds only
// half a second of 32 KiB stack copies at 999 Hz. The reader only moves
// the records into recorder memory: it decodes the samples with a stack
// copy, which keep the part of it the kernel filled, often far less than
// the copy's size, and copies the other records as they are, for take to
// decode on the loop's goroutine (readLocked).
// At every pass the loop has the reader read the rings once more and
// waits for it (take), so that what it processes is as complete in time
// as when it read them itself; it never reads them under the lock
// itself while the reader runs: on a loaded machine the loop, at the
// target's priority, was preempted holding the lock, and the reader,
// which runs above it (readerNice), waited 100-550 ms for it while the
// rings overflowed (load 30-50, two threads switching 200,000 times a
// second). Nor does the loop copy the queue under the lock: take hands
// its chunks over and the loop gives them back emptied at the next take
// (double buffering), since copying 16,000-49,000 records of 272 bytes
// held the lock for 20-162 ms.
//
// The memory is bounded by queueLimit bytes, counting the queue and the
// records the loop took but has not processed yet (their stack buffers
// come back through take): beyond it the reader leaves the rings to fill,
// and the kernel counts what it then drops (LOST records, which the loop
// writes as lost samples).
type ringReader struct {
	mu    sync.Mutex
	rings []*perf.Ring
	// sampleType is the sampling events' PERF_SAMPLE_* set.
	sampleType uint64
	// stackBytes is the size of a stack copy buffer.
	stackBytes int
	// queue is the samples with a stack copy read, decoded in place, in
	// chunks of chunkRecords (the other records wait in raw): a queue
	// that grew by copying into fresh memory cost the reader 700 ns a
	// record (the copies, page faults, and the collector's assists it
	// was charged), against 42 in memory used before.
	queue [][]perf.Record
	// queued is the bytes of queue's stack copies and call chains and of
	// raw's records, which queueLimit bounds.
	queued int64
	// queuedStacks is the capacity of queue's stack buffers, which
	// become held when take hands the queue over.
	queuedStacks int64
	// held is the bytes of the stack buffers the loop took and has not
	// given back: they are still the recorder's memory.
	held int64
	// raw is the records read but not decoded (copied), in buffers of
	// rawBufferBytes, for take to decode on the loop's goroutine.
	raw [][]byte
	// stacks are free buffers for the user stack copies, chunks for the
	// queue and rawFree for raw.
	stacks  [][]byte
	chunks  [][]perf.Record
	rawFree [][]byte
	// unparsed counts malformed records, and err is the first of them.
	unparsed uint64
	err      error
	// full counts the passes the reader skipped with a full queue.
	full uint64

	wake *perf.Wakeup // signalled when the reader queued records
	poll *ringPoll    // the reader, once started
	// ask wakes the reader for a pass take waits for: asked counts the
	// passes asked, answered the last one a pass began after; answer
	// (on mu) tells take of each pass. reading is true while the
	// reader runs.
	ask             *perf.Wakeup
	asked, answered uint64
	answer          *sync.Cond
	reading         bool
}

// queueLimit bounds the records the reader and the loop hold: 256 MiB is
// 4,096 samples with the default 64 KiB stack buffers (counted at their
// full capacity, which is what they take), two seconds of 999 Hz on two
// busy CPUs, about the longest module opening seen, and 32,768 samples
// with 8 KiB copies.
const queueLimit = 256 << 20

// maxFreeStacks bounds the free list: after a long stall the queue's
// buffers go back to the collector rather than stay with the session.
const maxFreeStacks = 1024

// start starts the reader's goroutine over the rings whose events are
// fds. Without it (an error) the loop's own reads go on alone.
func (rr *ringReader) start(fds []int) error {
	var err error
	if rr.ask, err = perf.NewWakeup(); err != nil {
		return err
	}
	if rr.wake, err = perf.NewWakeup(); err != nil {
		rr.ask.Close()
		return err
	}
	rr.answer = sync.NewCond(&rr.mu)
	rr.reading = true
	// The watermark wakes the reader when a ring is a quarter full; the
	// timeout reads what a quiet ring holds; take asks for a pass.
	rr.poll, err = startRingPoll(append(slices.Clip(fds), rr.ask.Fd()), func() {
		rr.ask.Clear()
		rr.mu.Lock()
		asked := rr.asked
		n := rr.readLocked()
		rr.answered = asked
		rr.answer.Broadcast()
		rr.mu.Unlock()
		if n > 0 {
			rr.wake.Signal()
		}
	})
	if err != nil {
		rr.reading = false
		rr.ask.Close()
		rr.wake.Close()
		rr.ask, rr.wake = nil, nil // the loop reads alone and waits on no wake-up
		return err
	}
	return nil
}

// stopReading stops the goroutine, so that the loop reads the rings a
// last time alone and may unmap them.
func (rr *ringReader) stopReading() {
	if rr.poll == nil || !rr.poll.end() {
		return
	}
	rr.mu.Lock()
	rr.reading = false
	rr.answer.Broadcast()
	rr.mu.Unlock()
	rr.wake.Close()
	rr.ask.Close()
}

// readLocked moves the rings' records to the queue unless it is full,
// and returns how many it moved. rr.mu is held.
//
// Only samples with a user stack copy are decoded here, which keeps of
// the copy only what the kernel filled; every other record is copied as
// it is into raw (a switch record is 32 bytes; decoded, 272), and
// take decodes it on the loop's goroutine. The reader then allocates
// next to nothing: decoding 1.2 million switch records a second into
// fresh chunks, which the collector charged assists for (1.4-7.8 ms a
// chunk during a mark phase), made its passes take up to 50 ms, as long
// as a 1 MiB ring lasts at that rate; copying them takes 1-5 ms.
func (rr *ringReader) readLocked() int {
	if rr.queued+rr.held >= queueLimit {
		rr.full++
		return 0
	}
	n := 0
	for _, ring := range rr.rings {
		ring.Read(func(rec []byte) {
			if rr.addLocked(rec) {
				n++
			}
		})
	}
	return n
}

// addLocked queues the record rec, which is valid only during the call,
// and reports whether it did (false: a sample that is malformed, and
// counted; a malformed record copied raw is counted by take).
// rr.mu is held.
func (rr *ringReader) addLocked(rec []byte) bool {
	if typ, _, ok := perf.RecordHeader(rec); rr.sampleType&unix.PERF_SAMPLE_STACK_USER == 0 || !ok || typ != perf.RecordSample {
		rr.copyRaw(rec)
		return true
	}
	// Decoded in place: a record is 272 bytes, which a copy into the
	// queue would move once more.
	last := len(rr.queue) - 1
	if last < 0 || len(rr.queue[last]) == cap(rr.queue[last]) {
		rr.queue = append(rr.queue, rr.chunk())
		last++
	}
	c := &rr.queue[last]
	*c = append(*c, perf.Record{})
	r := &(*c)[len(*c)-1]
	buf := rr.stackBuffer()
	if err := perf.DecodeStack(rec, rr.sampleType, r, buf); err != nil {
		if rr.err == nil {
			rr.err = err
		}
		rr.unparsed++
		rr.freeLocked(buf)
		*r = perf.Record{}
		*c = (*c)[:len(*c)-1]
		return false
	}
	if r.UserStack == nil {
		rr.freeLocked(buf)
	}
	rr.queued += recordBytes(r)
	rr.queuedStacks += int64(cap(r.UserStack))
	return true
}

// copyRaw appends rec to the last raw buffer, or to a new one when it
// does not fit. rr.mu is held.
func (rr *ringReader) copyRaw(rec []byte) {
	last := len(rr.raw) - 1
	if last < 0 || len(rr.raw[last])+len(rec) > cap(rr.raw[last]) {
		var b []byte
		if n := len(rr.rawFree); n > 0 {
			b = rr.rawFree[n-1]
			rr.rawFree = rr.rawFree[:n-1]
		} else {
			// A record is at most 64 KiB (its size is a u16).
			b = make([]byte, 0, rawBufferBytes)
		}
		rr.raw = append(rr.raw, b)
		last++
	}
	rr.raw[last] = append(rr.raw[last], rec...)
	rr.queued += int64(len(rec))
}

// pass has the rings read once more, by the reader while it runs (take
// waits on rr.answer, releasing the lock, until a pass that began after
// the ask ends), else by the caller. rr.mu is held.
func (rr *ringReader) pass() {
	if rr.reading {
		rr.asked++
		want := rr.asked
		rr.ask.Signal()
		for rr.reading && rr.answered < want {
			rr.answer.Wait()
		}
		if rr.answered >= want {
			return
		}
	}
	rr.readLocked()
}

// recordBytes is the memory a queued record holds beyond its struct.
func recordBytes(r *perf.Record) int64 {
	return int64(cap(r.UserStack) + 8*len(r.Callchain))
}

// take reads the rings, then returns everything queued, with the
// malformed records counted since the last take and the first of their
// errors. The caller gives the chunks of the previous take back in
// spare, emptied and cleared, once it copied them, so that the hand-off
// under the lock is a swap of the queue, whatever its length. take gives
// the buffers of freed (samples the loop processed) back to the free
// list.
//
// The records the reader copied undecoded are decoded here, on the
// caller's goroutine and outside the lock, into the chunks of spare
// first; their buffers then go back to the reader. They come after the
// pass's samples with a stack copy, which keep their own order: the
// caller sorts by time, and of records of the very same time a sample
// comes first (with a nanosecond clock, practically never).
func (rr *ringReader) take(spare [][]perf.Record, freed [][]byte) ([][]perf.Record, uint64, error) {
	rr.mu.Lock()
	for _, b := range freed {
		rr.held -= int64(cap(b))
		rr.freeLocked(b)
	}
	rr.pass()
	raw := rr.raw
	rr.raw = nil
	if len(raw) == 0 {
		// Nothing to decode: the reader gets the spare chunks now.
		rr.keepChunks(spare)
		spare = nil
	}
	q := rr.queue
	rr.queue = nil
	rr.held += rr.queuedStacks
	rr.queued, rr.queuedStacks = 0, 0
	unparsed, err := rr.unparsed, rr.err
	rr.unparsed, rr.err = 0, nil
	rr.mu.Unlock()
	if len(raw) == 0 {
		return q, unparsed, err
	}
	q, spare, n, derr := decodeRaw(q, raw, spare, rr.sampleType)
	unparsed += n
	if err == nil {
		err = derr
	}
	rr.mu.Lock()
	rr.keepChunks(spare)
	for _, b := range raw {
		if len(rr.rawFree) < maxFreeRaw {
			rr.rawFree = append(rr.rawFree, b[:0])
		}
	}
	rr.mu.Unlock()
	return q, unparsed, err
}

// decodeRaw decodes the records of the buffers raw, whole records one
// after the other, into chunks appended to q, taken from spare while it
// has some; it returns q, the chunks of spare left, and the malformed
// records counted with the first of their errors.
func decodeRaw(q [][]perf.Record, raw [][]byte, spare [][]perf.Record, sampleType uint64) ([][]perf.Record, [][]perf.Record, uint64, error) {
	var (
		chunk    []perf.Record
		unparsed uint64
		err      error
	)
	for _, b := range raw {
		for len(b) > 0 {
			_, size, ok := perf.RecordHeader(b)
			if !ok || size < 8 || size > len(b) {
				// The reader copies whole records: the rest of the
				// buffer cannot be read.
				unparsed++
				if err == nil {
					err = fmt.Errorf("%w: record of %d bytes in %d left of a copy", perf.ErrMalformed, size, len(b))
				}
				break
			}
			if len(chunk) == cap(chunk) {
				if chunk != nil {
					q = append(q, chunk)
				}
				if n := len(spare); n > 0 {
					chunk, spare = spare[n-1][:0], spare[:n-1]
				} else {
					chunk = make([]perf.Record, 0, chunkRecords)
				}
			}
			chunk = append(chunk, perf.Record{})
			if derr := perf.Decode(b[:size], sampleType, &chunk[len(chunk)-1]); derr != nil {
				chunk = chunk[:len(chunk)-1]
				unparsed++
				if err == nil {
					err = derr
				}
			}
			b = b[size:]
		}
	}
	if len(chunk) > 0 {
		q = append(q, chunk)
	}
	return q, spare, unparsed, err
}

// keepChunks puts the emptied chunks the loop gave back on the free
// list. rr.mu is held.
func (rr *ringReader) keepChunks(spare [][]perf.Record) {
	for _, c := range spare {
		if len(rr.chunks) < maxFreeChunks {
			rr.chunks = append(rr.chunks, c[:0])
		}
	}
}

// fullPasses returns how many times the reader found its queue full since
// the last call.
func (rr *ringReader) fullPasses() uint64 {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	n := rr.full
	rr.full = 0
	return n
}

// stackBuffer returns a buffer for a sample's user stack copy, from the
// free list when it has one. rr.mu is held.
func (rr *ringReader) stackBuffer() []byte {
	if n := len(rr.stacks); n > 0 {
		b := rr.stacks[n-1]
		rr.stacks = rr.stacks[:n-1]
		return b
	}
	return make([]byte, 0, rr.stackBytes)
}

// chunk returns an empty chunk for the queue, from the free list when
// it has one. rr.mu is held.
func (rr *ringReader) chunk() []perf.Record {
	if n := len(rr.chunks); n > 0 {
		c := rr.chunks[n-1]
		rr.chunks = rr.chunks[:n-1]
		return c
	}
	return make([]perf.Record, 0, chunkRecords)
}

// freeLocked puts a stack buffer back on the free list. rr.mu is held.
func (rr *ringReader) freeLocked(b []byte) {
	if cap(b) >= rr.stackBytes && len(rr.stacks) < maxFreeStacks {
		rr.stacks = append(rr.stacks, b[:0])
	}
}

// warnFull says once that the reader's queue filled: the loop fell
// behind by queueLimit bytes, and the kernel dropped records meanwhile.
func (s *session) warnFull() {
	if n := s.reader.fullPasses(); n > 0 && !s.warnedFull {
		s.warnedFull = true
		fmt.Fprintf(s.log, "trueprof: the recorder fell %d MiB of records behind; the kernel dropped records until it caught up (counted as lost)\n", queueLimit>>20)
	}
}

// chunkRecords is the records of a queue chunk (1.1 MiB), and
// maxFreeChunks the free chunks kept (35 MiB): 131,000 records, more
// than the loop takes at once at 850,000 switch records a second.
const (
	chunkRecords  = 4096
	maxFreeChunks = 32
)

// rawBufferBytes is the size of a buffer of undecoded records, and
// maxFreeRaw the free ones kept (16 MiB): 524,000 switch records of 32
// bytes, 400-520 ms of the fastest switching seen on both CPUs.
const (
	rawBufferBytes = 256 << 10
	maxFreeRaw     = 64
)
