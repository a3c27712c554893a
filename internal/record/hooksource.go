package record

import (
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"trueprof/internal/hook"
	"trueprof/internal/perf"
	"trueprof/internal/trace"
)

// hookSource drains the hook library's shared-memory rings. A thread
// fills its ring in a few milliseconds at full speed and then waits for
// space, so the rings are copied out by a goroutine of their own, which
// does nothing else: it copies the records as they are, 16 bytes each,
// into batches (hook.DrainBatch), and the recording loop decodes them
// (drainInto). Copying keeps up with the hooks where decoding on the
// drainer did not (it cost the target a wait for every event it was
// slower than the hooks). Batches are recycled through a free list: a
// growing slice would stop the drainer for tens of milliseconds to
// reallocate, zero and copy millions of records. Processing may lag
// behind by a bounded spool of batches; when it is full the drainer
// waits for processing to hand one back, and so do the target's threads
// for ring space (each wait an adjust record): memory stays bounded and
// nothing is dropped unless processing stalls for the hook's whole
// MaxWait.
type hookSource struct {
	r      *hook.Region
	mu     sync.Mutex
	full   []*hook.Batch // filled batches, oldest first
	cur    *hook.Batch   // the batch being filled
	since  time.Time     // when cur got its first record
	free   []*hook.Batch
	chunks int // batches allocated, at most hookSpool until finish
	// finishing lets finish allocate past hookSpool: the region is
	// frozen, and what it holds is bounded.
	finishing bool
	freed     chan struct{} // signalled when drain hands batches back
	// ready is signalled when the drainer hands a batch over, so the
	// recording loop's poll wakes for it at once.
	ready  *perf.Wakeup
	stop   chan struct{}
	done   chan struct{}
	closed bool
	// dec decodes the batches on the recording loop's side, into dst
	// (drainInto's, while it runs).
	dec *hook.Decoder
	dst []instrEvent
	// last is the time of the event push appended last, and unordered
	// whether one came before its predecessor in dst: the session sorts
	// only then, rather than reading every event again to find out.
	last      uint64
	unordered bool
}

// hookChunk is the number of records per batch (256 KiB).
const hookChunk = 1 << 14

// hookSpool bounds the batches waiting to be processed (32 MiB, 2M
// events, some 100 ms of the densest load): enough to ride out the
// processing loop's pauses, small enough that the recorder's memory does
// not grow with the target's event rate.
const hookSpool = 128

// hookTake is the number of batches drainInto decodes at a time.
const hookTake = 4

// hookHandOver is how long events may wait in a batch that is not full:
// a slow target's events must reach the trace within the recorder's
// one-second flush, and a snapshot of a live trace must see them.
const hookHandOver = 100 * time.Millisecond

func newHookSource(r *hook.Region) (*hookSource, error) {
	ready, err := perf.NewWakeup()
	if err != nil {
		return nil, err
	}
	h := &hookSource{r: r, ready: ready, freed: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		dec: hook.NewDecoder()}
	go h.run()
	return h, nil
}

// handOver moves the batch being filled to the full ones and wakes the
// recording loop; h.mu is held.
func (h *hookSource) handOver() {
	h.full = append(h.full, h.cur)
	h.cur = nil
	h.ready.Signal()
}

func (h *hookSource) run() {
	defer close(h.done)
	// The drainer must run as soon as it wakes, or threads wait for ring
	// space: on a machine with few CPUs it shares one with the event
	// processing. Its own thread, at a higher priority where permitted,
	// gets the CPU first.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), readerNice)
	// Drain on a period, never in a loop: the hook publishes each record
	// by storing its ring's head, and a reader polling those heads
	// continuously pulls their cache lines away from the writing threads
	// on every event. A ring lasts several milliseconds at full speed.
	// The thread sleeps in nanosleep rather than on a Go timer: a timer
	// fires only when its P reaches a scheduling point, which a P busy
	// processing events may not for a whole preemption quantum (10 ms).
	period := syscall.NsecToTimespec(int64(time.Millisecond))
	for {
		h.fill(false)
		if h.cur != nil && h.cur.Len() > 0 && time.Since(h.since) >= hookHandOver {
			h.mu.Lock()
			h.handOver()
			h.mu.Unlock()
		}
		select {
		case <-h.stop:
			return
		default:
		}
		syscall.Nanosleep(&period, nil)
	}
}

// fill copies what the rings hold into batches; only the drainer (or
// finish, after it stopped) calls it. With the spool full it waits for
// drain to free a batch, and the target's threads wait for their rings
// meanwhile; once stopping it no longer waits (the target is done and
// the rings hold the rest).
func (h *hookSource) fill(final bool) {
	for {
		if (h.cur == nil || h.cur.Full()) && !h.nextChunk() {
			return
		}
		empty := h.cur.Len() == 0
		more := h.r.DrainBatch(h.cur, final)
		if empty && h.cur.Len() > 0 {
			h.since = time.Now()
		}
		if !more {
			return
		}
	}
}

// nextChunk hands the full batch over and takes a free one; it reports
// false, with no batch, when the drainer is told to stop while the spool
// is full: finish copies the rest from the frozen region. (Allocating
// past the spool then, the drainer copied a running target's events as
// fast as it wrote them: peaks of 232 MB to 3 GB at a stop under the
// dense load.)
func (h *hookSource) nextChunk() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cur != nil {
		h.handOver()
	}
	for {
		if n := len(h.free); n > 0 {
			h.cur, h.free = h.free[n-1], h.free[:n-1]
			h.cur.Reset()
			return true
		}
		if h.chunks < hookSpool || h.finishing {
			h.chunks++
			h.cur = hook.NewBatch(hookChunk)
			return true
		}
		if h.stopping() {
			return false
		}
		h.mu.Unlock()
		select {
		case <-h.freed:
		case <-h.stop:
		}
		h.mu.Lock()
	}
}

func (h *hookSource) stopping() bool {
	select {
	case <-h.stop:
		return true
	default:
		return false
	}
}

// push appends one decoded event to h.dst, which drainInto grew to hold
// them all. It writes the event's fields one by one into place: copying
// e and an instrEvent whole, with wide loads of what Decode had just
// stored field by field, stalled on store forwarding (16 ns an event, a
// fifth of the recorder's time on the dense load).
func (h *hookSource) push(e hook.Event) {
	n := len(h.dst)
	h.dst = h.dst[:n+1]
	ev := &h.dst[n]
	ev.time, ev.pid, ev.tid, ev.addr, ev.dropped, ev.module = e.Time, e.PID, e.TID, e.Addr, 0, 0
	switch e.Kind {
	case hook.KindEntry:
		ev.kind = trace.EventEntry
	case hook.KindExit:
		ev.kind = trace.EventExit
	default: // hook.KindAdjust
		// The hook stamps a wait with its start (the event it delayed);
		// an Adjust record is stamped with the end of the pause.
		ev.kind = 0
		ev.time += e.Duration
		ev.addr, ev.dropped = e.Duration, e.Dropped
	}
	if ev.time < h.last {
		h.unordered = true
	}
	h.last = ev.time
}

func (h *hookSource) fds() []int { return []int{h.ready.Fd()} }

// drain passes the events of drainInto one at a time.
func (h *hookSource) drain(fn func(instrEvent)) {
	for more := true; more; {
		var evs []instrEvent
		evs, more, _ = h.drainInto(nil)
		for _, e := range evs {
			fn(e)
		}
	}
}

// drainInto decodes a few of the filled batches straight into dst,
// grown once to hold them all, returns it and gives the batches back to
// the free list: decoding into a buffer of the source's own, from which
// the session copied the events, cost the dense load a copy of 40 bytes
// an event. The batch being filled stays with the drainer until it is
// full or the drainer has stopped. Once stopped, it reports whether
// batches are left for the next call. It also reports whether the
// events it appended are in time order, after dst's last.
func (h *hookSource) drainInto(dst []instrEvent) ([]instrEvent, bool, bool) {
	// Reset the wake-up before taking the chunks: a chunk handed over
	// after this signals again.
	h.ready.Clear()
	h.mu.Lock()
	// A few batches at a time, also once closed (the final drain): the
	// session holds their events until it has processed them, and the
	// whole spool decoded at once would take 40 bytes an event of 16.
	full := h.full
	if len(full) > hookTake {
		full = slices.Clone(full[:hookTake])
		h.full = h.full[hookTake:]
		if !h.closed {
			h.ready.Signal() // the rest on the next round
		}
	} else {
		h.full = nil
		if h.closed && h.cur != nil && h.cur.Len() > 0 {
			full = append(full, h.cur)
			h.cur = nil
		}
	}
	more := h.closed && (len(h.full) > 0 || (h.cur != nil && h.cur.Len() > 0))
	h.mu.Unlock()
	n := 0
	for _, b := range full {
		n += b.Len()
	}
	// Grown once: appending would double the slice again and again, the
	// old copies alive meanwhile. Decode delivers one event per record.
	h.dst = slices.Grow(dst, n)
	h.last, h.unordered = 0, false
	if len(dst) > 0 {
		h.last = dst[len(dst)-1].time
	}
	for _, b := range full {
		h.dec.Decode(b, h.push)
	}
	dst, h.dst = h.dst, nil
	h.mu.Lock()
	h.free = append(h.free, full...)
	h.mu.Unlock()
	if len(full) > 0 {
		select {
		case h.freed <- struct{}{}:
		default:
		}
	}
	return dst, more, !h.unordered
}

// finish stops the drainer once recording stops and collects what the
// rings hold then (Region.Freeze: a target still running would refill
// them as fast as they are copied), including what threads that ended
// without their exit hook (exit, exec, a fatal signal) still owed.
func (h *hookSource) finish() {
	select {
	case <-h.stop:
		return
	default:
	}
	close(h.stop)
	<-h.done
	h.r.Freeze()
	h.mu.Lock()
	h.finishing = true
	h.mu.Unlock()
	h.fill(false)
	h.fill(true)
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
}

func (h *hookSource) lost() uint64 { return 0 }

func (h *hookSource) close() error {
	h.finish()
	h.ready.Close()
	return h.r.Close()
}
