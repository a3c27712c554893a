package record

import (
	"errors"
	"math"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"trueprof/internal/hook"
	"trueprof/internal/perf"
	"trueprof/internal/trace"
)

// hookSource drains the hook library's shared-memory rings in three
// stages, each on its own goroutine, so that the recorder uses a core
// the target leaves idle and, once the target has exited, both:
//
//   - the drainer (run) copies the records as they are, 16 bytes each,
//     into batches (hook.DrainBatch) and does nothing else: a thread
//     fills its ring in a few milliseconds at full speed and then waits
//     for space, and copying keeps up with the hooks where decoding on
//     the drainer did not;
//   - the decoder (decode) turns each batch, in the order they were
//     filled, into a slab of instrEvents and hands the batch back:
//     decoding took a third of the recording loop's time on the dense
//     load (its reads of the batches wait for memory);
//   - the recording loop takes the slabs (drainInto), merges, resolves
//     and encodes their events; the trace writer compresses on a
//     goroutine of its own.
//
// Batches and slabs are recycled through free lists: a growing slice
// would stop the drainer for tens of milliseconds to reallocate, zero
// and copy millions of records. Processing may lag behind by a bounded
// spool of batches and hookSlabs slabs; when both are full the drainer
// waits for a batch to be handed back, and so do the target's threads
// for ring space (each wait an adjust record): memory stays bounded and
// nothing is dropped unless processing stalls for the hook's whole
// MaxWait.
type hookSource struct {
	r      *hook.Region
	spool  *hook.Spool // the memory of the spool's batches
	mu     sync.Mutex
	full   []*hook.Batch // filled batches, oldest first
	cur    *hook.Batch   // the batch being filled
	since  time.Time     // when cur got its first record
	free   []*hook.Batch
	chunks int // batches allocated, at most hookSpool until finish
	// finishing lets finish allocate past hookSpool: the region is
	// frozen, and what it holds is bounded.
	finishing bool
	freed     chan struct{} // signalled when the decoder hands batches back
	// filled is signalled when the drainer hands a batch over or has
	// stopped, to wake the decoder.
	filled chan struct{}
	// ready is signalled when the decoder hands a slab over, so the
	// recording loop's poll wakes for it at once.
	ready *perf.Wakeup
	stop  chan struct{}
	// halt is signalled with stop: it ends the drainer's sleep, which
	// finish waits for (up to its period, 1 ms, at the end of every
	// recording before).
	halt   *perf.Wakeup
	done   chan struct{}
	closed bool // the drainer has stopped: full and cur hold the rest

	// The decoder's side: decoded slabs, oldest first, and spare ones;
	// decoding, that it holds a batch; decoded, which drainInto waits
	// on once closed, is signalled for each slab and when the decoder
	// ends.
	slabs     []*hookSlab
	spare     []*hookSlab
	made      int // slabs allocated, at most hookSlabs
	decoding  bool
	ended     bool // the decoder has ended
	decoded   *sync.Cond
	spared    chan struct{} // signalled when drainInto hands slabs back
	quit      chan struct{} // closed by close: the decoder ends at once
	decodeEnd chan struct{} // closed when the decoder has ended

	// dec and the fields below are the decoder goroutine's: it decodes
	// into dst, the slab being filled. last is the time of the event
	// push appended last, and unordered whether one came before its
	// predecessor: the session sorts only then, rather than reading
	// every event again to find out.
	dec       *hook.Decoder
	dst       []instrEvent
	last      uint64
	unordered bool
	first     uint64 // the earliest time pushed
}

// hookSlab is the events decoded from one batch (each thread's in time
// order).
type hookSlab struct {
	evs []instrEvent
	// ordered: the events are in time order; first is the earliest
	// one's time.
	ordered bool
	first   uint64
}

// hookChunk is the number of records per batch (512 KiB). Against
// batches of 256 KiB, the recorder took fewer passes, wakeups and fresh
// pages for the same events: the dense load's 60M events recorded in
// 1.55 s rather than 1.81 (recorder faults 22,000 -> 14,800, context
// switches 53,000 -> 35,000), two threads of a hooked SQLite in 0.80 s
// rather than 0.92, the default load's 400,000 events as fast (medians
// of 9, 4 and 25 interleaved runs). Batches of 1 MiB were faster still
// on the dense load (1.33 s) but cost the default load 4 ms; of 64 KiB,
// slower everywhere (SQLite 1.41 s).
const hookChunk = 1 << 15

// hookSpool bounds the batches waiting to be decoded (32 MiB, 2M
// events, some 100 ms of the densest load): enough to ride out the
// processing loop's pauses, small enough that the recorder's memory does
// not grow with the target's event rate.
const hookSpool = 64

// hookSlabs bounds the decoded slabs (each a batch's events, 32 bytes
// each: 1 MiB), enough to let the decoder run ahead of the recording
// loop by a few passes. Events wait in the spool's batches rather than
// here, in 16 bytes each. A slab of four batches (of 256 KiB) cost the
// loop 2-4 ns more an event: it read them from memory rather than the
// cache.
const hookSlabs = 3

// hookSlabKeep is the largest capacity, in events, of a buffer that
// drainInto swaps into a slab (four times a slab's events): the slabs
// hold at most 12 MiB whatever the session's buffer grew to.
const hookSlabKeep = 4 * hookChunk

// hookHandOver is how long events may wait in a batch that is not full:
// a slow target's events must reach the trace within the recorder's
// one-second flush, and a snapshot of a live trace must see them.
const hookHandOver = 100 * time.Millisecond

func newHookSource(r *hook.Region) (*hookSource, error) {
	h, err := newHookQueue(r)
	if err != nil {
		return nil, err
	}
	go h.run()
	go h.decode()
	return h, nil
}

// newHookQueue returns a hookSource whose goroutines have not started.
func newHookQueue(r *hook.Region) (*hookSource, error) {
	spool, err := hook.NewSpool(hookSpool, hookChunk)
	if err != nil {
		return nil, err
	}
	ready, err := perf.NewWakeup()
	if err != nil {
		spool.Close()
		return nil, err
	}
	halt, err := perf.NewWakeup()
	if err != nil {
		ready.Close()
		spool.Close()
		return nil, err
	}
	h := &hookSource{r: r, spool: spool, ready: ready, halt: halt, freed: make(chan struct{}, 1), filled: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}), spared: make(chan struct{}, 1),
		quit: make(chan struct{}), decodeEnd: make(chan struct{}), dec: hook.NewDecoder()}
	h.decoded = sync.NewCond(&h.mu)
	return h, nil
}

// wakeOne wakes the goroutine waiting on ch, or the next one to wait.
func wakeOne(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// handOver moves the batch being filled to the full ones and wakes the
// decoder; h.mu is held.
func (h *hookSource) handOver() {
	h.full = append(h.full, h.cur)
	h.cur = nil
	wakeOne(h.filled)
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
	// The thread sleeps in the kernel rather than on a Go timer: a timer
	// fires only when its P reaches a scheduling point, which a P busy
	// processing events may not for a whole preemption quantum (10 ms).
	// It sleeps in ppoll on halt, which finish signals.
	period := unix.NsecToTimespec(int64(time.Millisecond))
	wake := []unix.PollFd{{Fd: int32(h.halt.Fd()), Events: unix.POLLIN}}
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
		ts := period // ppoll leaves in it what was left of the timeout
		unix.Ppoll(wake, &ts, nil)
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
			if h.cur = h.spool.Batch(); h.cur == nil {
				h.cur = hook.NewBatch(hookChunk) // finishing, past the spool
			}
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

// decode is the decoder goroutine: it decodes the filled batches, one
// at a time, into slabs for drainInto until the drainer has stopped and
// everything is decoded, or close quits it.
func (h *hookSource) decode() {
	defer close(h.decodeEnd)
	defer func() {
		h.mu.Lock()
		h.decoding, h.ended = false, true
		h.decoded.Broadcast()
		h.mu.Unlock()
	}()
	push := h.pusher()
	for {
		b, slab := h.takeBatch()
		if slab == nil {
			return
		}
		// Grown once: Decode delivers one event per record.
		h.dst = slices.Grow(slab.evs[:0], b.Len())
		h.last, h.unordered, h.first = 0, false, math.MaxUint64
		h.dec.Decode(b, push)
		slab.evs, h.dst = h.dst, nil
		slab.ordered, slab.first = !h.unordered, h.first
		h.mu.Lock()
		h.free = append(h.free, b)
		h.slabs = append(h.slabs, slab)
		h.decoding = false
		h.decoded.Broadcast()
		h.mu.Unlock()
		wakeOne(h.freed)
		h.ready.Signal()
	}
}

// takeBatch waits for a batch to decode and a slab to decode it into,
// and takes the oldest; once the drainer has stopped also the batch it
// was filling. It returns no slab when there is nothing left to decode
// or close quits the decoder.
func (h *hookSource) takeBatch() (*hook.Batch, *hookSlab) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for len(h.full) == 0 {
		if h.closed {
			if h.cur == nil || h.cur.Len() == 0 {
				return nil, nil
			}
			h.full, h.cur = append(h.full, h.cur), nil
			break
		}
		if !h.wait(h.filled) {
			return nil, nil
		}
	}
	var slab *hookSlab
	for slab == nil {
		if n := len(h.spare); n > 0 {
			slab, h.spare = h.spare[n-1], h.spare[:n-1]
		} else if h.made < hookSlabs {
			h.made++
			slab = &hookSlab{}
		} else if !h.wait(h.spared) {
			return nil, nil
		}
	}
	b := h.full[0]
	h.full = slices.Delete(h.full, 0, 1)
	h.decoding = true
	return b, slab
}

// wait releases h.mu until ch is signalled; it reports false, h.mu
// held again, if close quits the decoder meanwhile.
func (h *hookSource) wait(ch chan struct{}) bool {
	h.mu.Unlock()
	defer h.mu.Lock()
	select {
	case <-ch:
		return true
	case <-h.quit:
		return false
	}
}

// pusher returns the function that appends one decoded event to h.dst,
// which decode grew to hold them all: a closure rather than a method
// value, which would call a wrapper that calls the method, twice the
// calls for every event. It writes the event's fields one by one into
// place: copying e and an instrEvent whole, with wide loads of what
// Decode had just stored field by field, stalled on store forwarding
// (16 ns an event, a fifth of the recorder's time on the dense load).
func (h *hookSource) pusher() func(*hook.Event) {
	return func(e *hook.Event) {
		n := len(h.dst)
		h.dst = h.dst[:n+1]
		ev := &h.dst[n]
		ev.time, ev.pid, ev.tid, ev.addr, ev.module = e.Time, e.PID, e.TID, e.Addr, 0
		switch e.Kind {
		case hook.KindEntry:
			ev.kind = trace.EventEntry
		case hook.KindExit:
			ev.kind = trace.EventExit
		default: // hook.KindAdjust
			// The hook stamps a wait with its start (the event it
			// delayed); an Adjust record is stamped with the end of the
			// pause.
			ev.kind, ev.addr = 0, e.Duration
			ev.time += e.Duration
			if e.Dropped != 0 {
				// Decode reports a wait or lost events, never both.
				ev.kind, ev.addr = eventDropped, e.Dropped
			}
		}
		if ev.time < h.last {
			h.unordered = true
			h.first = min(h.first, ev.time)
		}
		if n == 0 {
			h.first = ev.time
		}
		h.last = ev.time
	}
}

func (h *hookSource) fds() []int { return []int{h.ready.Fd()} }

// drain passes the events of drainInto one at a time.
func (h *hookSource) drain(fn func(instrEvent)) {
	for more := true; more; {
		var evs []instrEvent
		evs, more, _, _ = h.drainInto(nil, math.MaxUint64)
		for _, e := range evs {
			fn(e)
		}
	}
}

// drainInto appends the events of the oldest decoded slab to dst and
// returns it, if the slab has events before the time before: a slab the
// session cannot process yet stays here, 16 bytes an event in the
// spool's batches behind it, rather than copied into the session's
// buffer to wait there (a recording of bench/percall's default load
// copied 370,000 events, 15 MB, into fresh memory while the target ran,
// and the target's own loop took 6.3-7.1 ms instead of 6.3 with the
// collector held back, which reuses no memory meanwhile). It takes one
// slab at a time, since the session holds the events until it has
// processed them (a few slabs at once grew its buffer past what it
// keeps between passes, to be allocated anew at every pass). An empty
// dst of at most hookSlabKeep events is swapped for the slab's events
// rather than copied into, and the slab decodes into dst's buffer next.
// Once the drainer has stopped, drainInto waits for the decoder's next
// slab when none is ready and reports whether events are left for the
// next call. It also reports whether the events it appended are in
// time order, after dst's last, and the earliest event of the next slab
// ready (0: none), which the session comes back for once its horizon
// passes it.
func (h *hookSource) drainInto(dst []instrEvent, before uint64) ([]instrEvent, bool, bool, uint64) {
	// Reset the wake-up before taking a slab: a slab handed over after
	// this signals again.
	h.ready.Clear()
	h.mu.Lock()
	if h.closed {
		for len(h.slabs) == 0 && h.pending() {
			h.decoded.Wait()
		}
	}
	var sl *hookSlab
	if slabsDue(h.slabs, before) {
		// The oldest, though a later one may be what is due: a batch can
		// hold a busy thread's recent events and the next one another
		// thread's older ones (the session sorts what it takes).
		sl = h.slabs[0]
		h.slabs = slices.Delete(h.slabs, 0, 1)
	}
	var next uint64
	for _, o := range h.slabs {
		if next == 0 || o.first < next {
			next = o.first
		}
	}
	if slabsDue(h.slabs, before) && !h.closed {
		h.ready.Signal() // the rest on the next round
	}
	more := h.closed && h.pending()
	h.mu.Unlock()
	if sl == nil {
		return dst, more, true, next
	}
	ordered := sl.ordered && (len(dst) == 0 || len(sl.evs) == 0 || sl.first >= dst[len(dst)-1].time)
	// A buffer the session grew in a burst is not kept in a slab, where
	// its memory would stay.
	if len(dst) == 0 && cap(dst) <= hookSlabKeep {
		dst, sl.evs = sl.evs, dst[:0]
	} else {
		if n := len(dst) + len(sl.evs); n > cap(dst) {
			// Doubled, not by append's quarter: growing by quarters
			// copied the events and touched fresh memory for five times
			// their size.
			dst = append(make([]instrEvent, 0, 2*n), dst...)
		}
		dst = append(dst, sl.evs...)
	}
	h.mu.Lock()
	h.spare = append(h.spare, sl)
	h.mu.Unlock()
	wakeOne(h.spared)
	return dst, more, ordered, next
}

// slabsDue reports whether one of slabs has events before the time
// before (math.MaxUint64: every slab is), or events more than
// hookAhead after it: a time that far ahead is a record the target
// overwrote (its rings are its memory), and waiting for it would hold
// the slab, and every later one, for good.
func slabsDue(slabs []*hookSlab, before uint64) bool {
	for _, sl := range slabs {
		if sl.first < before || before == math.MaxUint64 || sl.first-before > uint64(hookAhead) {
			return true
		}
	}
	return false
}

// hookAhead is how far ahead of the horizon an event's time is taken
// for garbage: the horizon is reorderSlack behind the present.
const hookAhead = time.Second

// pending reports whether events are still to be decoded or handed
// over; h.mu is held.
func (h *hookSource) pending() bool {
	if len(h.slabs) > 0 {
		return true
	}
	return !h.ended && (len(h.full) > 0 || h.decoding || (h.cur != nil && h.cur.Len() > 0))
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
	h.halt.Signal()
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
	wakeOne(h.filled)
}

func (h *hookSource) lost() uint64 { return 0 }

func (h *hookSource) close() error {
	h.finish()
	close(h.quit)
	<-h.decodeEnd
	h.ready.Close()
	h.halt.Close()
	// The drainer and the decoder have ended: no batch is read again.
	return errors.Join(h.spool.Close(), h.r.Close())
}
