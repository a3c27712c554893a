package hook

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Environment variables the hook library reads in the target.
const (
	EnvFD = "TRUEPROF_HOOK_FD" // decimal descriptor of the region in the target
	EnvID = "TRUEPROF_HOOK_ID" // hexadecimal id the region's header must carry
)

// Layout constants shared with hook.c.
const (
	magic      = 0x314b4f4f48505254 // "TRPHOOK1"
	version    = 2
	headerSize = int(unsafe.Sizeof(header{}))
	slotSize   = int(unsafe.Sizeof(slot{}))
	recSize    = int(unsafe.Sizeof(rec{}))
	pageSize   = 4096
)

// Clocks a region's records can be timed with (header.Clock).
const (
	clockMonotonic = 0 // clock_gettime(CLOCK_MONOTONIC) nanoseconds
	clockTSC       = 1 // rdtsc ticks, converted by the recorder
)

// Slot states (slot.State). A thread moves a slot from free to owned; the
// thread's exit marks it dead; the recorder frees a dead slot, or an owned
// one whose thread no longer exists, once it has drained it.
const (
	stateFree  = 0
	stateOwned = 1
	stateDead  = 2
)

// Event.Kind values.
const (
	KindEntry  uint8 = 1 // a function was entered
	KindExit   uint8 = 2 // a function returned
	KindAdjust uint8 = 3 // the thread waited for ring space, or dropped events
)

// Record kinds in the rings (the top byte of rec.W, over a payload of
// payloadBits): an entry or exit carries the function, a wait the clock
// units waited, a drop the number of events dropped. An adjust is a wait
// record, a drop record or both, each decoded into an adjust Event.
const (
	recEntry    = uint64(KindEntry)
	recExit     = uint64(KindExit)
	recWait     = 3
	recDrop     = 4
	payloadBits = 56
	payloadMask = 1<<payloadBits - 1
)

// word makes a record's second word from its kind and payload.
func word(kind, payload uint64) uint64 { return kind<<payloadBits | payload&payloadMask }

// header mirrors struct tp_header in hook.c: the region's first bytes,
// written by the recorder before the target starts, except NoSlotDropped.
type header struct {
	Magic         uint64
	Version       uint32
	Clock         uint32
	ID            uint64
	Slots         uint32
	Events        uint32 // records per ring, a power of two
	SlotOff       uint64
	RingOff       uint64
	Size          uint64
	MaxWait       uint64 // clock units a thread waits for space before dropping
	NoSlotDropped uint64 // events dropped by threads that found no slot (atomic)
}

// slot mirrors struct tp_slot in hook.c: one thread's ring state. Head is
// written only by the thread, Tail only by the recorder; they sit on
// separate cache lines.
type slot struct {
	State, PID, TID, _ uint32
	PendDropped        uint64 // dropped events not yet reported in the ring
	PendWait           uint64 // clock units waited before those drops
	PendSince          uint64 // clock value of the first of them
	Nested             uint64 // events dropped because they interrupted a hook (atomic)
	_                  [2]uint64
	Head               uint64
	_                  [7]uint64
	Tail               uint64
	_                  [7]uint64
}

// rec mirrors struct tp_rec in hook.c: one ring record, 16 bytes: the
// time and word(kind, payload). Half of the 32 bytes the records took
// with the call site and a whole word for the kind: the hooks, the
// drainer's copy and the decoder move half as much memory, and the
// spool holds twice the events.
type rec struct {
	Time, W uint64
}

// Event is one record drained from a region.
type Event struct {
	Time     uint64 // CLOCK_MONOTONIC ns
	PID, TID uint32 // 0, 0 for drops of threads that found no free slot
	Kind     uint8  // KindEntry, KindExit or KindAdjust
	Addr     uint64 // entry, exit: the function's address in the process (this_fn)
	Duration uint64 // adjust: ns the thread waited for ring space
	Dropped  uint64 // adjust: events dropped
}

// defaultEvents is the records per ring of Options' zero value: 2 MiB,
// 131,072 records, which a thread making calls at the hooks' full speed
// (15 ns an event) fills in 2 ms if nobody drains it, twice the
// drainer's period. A larger ring costs its threads more than it saves
// them: each page of a ring is first mapped by its thread's hook (an
// adjust, as for a wait) at about 1.3 µs a page, so a thread writing its
// first 8 MiB paid 2-9 ms for it (bench/percall's default load, 400,000
// events: 25 populating adjusts, its calls 7.2 ms on its own clock
// against 5.9 ms with 2 MiB, which its hooks wrap around after the
// first 2 MiB; the whole command is no faster: 35.0 against 34.9 ms,
// medians of 21 interleaved runs, as the recorder's processing, not the
// target, ends it). The dense load of 10M calls lost nothing with either
// size, and three threads of 2.4 million events each took 62 MB of
// the recorder's memory instead of 87 (docs/recording.md, "Compiled-in
// hooks").
const defaultEvents = 1 << 17

// Options sizes a region. The zero value selects the defaults.
type Options struct {
	// Threads is the number of thread rings (default 128): threads alive
	// (or exited but not yet drained) at once, across all processes of
	// the target. Further threads wait, then drop and count.
	Threads int
	// Events is the number of records per ring, rounded up to a power of
	// two (default defaultEvents). A call is two records. A ring that has
	// been filled once stays resident (shared memory), so the region
	// uses up to Threads × Events × 16 bytes of memory.
	Events int
	// MaxWait bounds how long a thread waits for ring space before it
	// drops events (default 1s).
	MaxWait time.Duration
	// Monotonic times records with clock_gettime(CLOCK_MONOTONIC) even
	// where the TSC is usable (slower; for tests and comparisons).
	Monotonic bool
}

// Region is the shared memory between the hook library in the target
// (and its children) and the recorder. Its methods must not be called
// concurrently.
type Region struct {
	f     *os.File
	mem   []byte
	hdr   *header
	slots []slot
	rings []rec
	mask  uint64
	lib   string
	clock *clock // nil: records carry CLOCK_MONOTONIC ns

	idle      []uint64 // per slot: Head at the last liveness check
	noSlot    uint64   // NoSlotDropped already reported
	lastCheck time.Time
	// view is the clock's latest snapshot, taken when it had added
	// viewPairs pairs, for the batches.
	view      *clock
	viewPairs uint64
	own       *Batch   // Drain's
	dec       *Decoder // Drain's
	// frozen, after Freeze, is each slot's head then: the drains copy
	// no further.
	frozen []uint64
}

// liveEvery is how often Drain looks for owned slots of threads that
// ended without their exit hook (exit, exec, signals).
const liveEvery = 100 * time.Millisecond

// NewRegion creates the shared memory for a recording: a sealed memfd
// holding opts.Threads rings. It builds the hook library (Library) if
// needed, so it fails when there is no C compiler.
func NewRegion(opts Options) (*Region, error) {
	lib, err := Library()
	if err != nil {
		return nil, err
	}
	if strings.ContainsAny(lib, ": ") {
		return nil, fmt.Errorf("hook library path %q contains a space or colon, which LD_PRELOAD cannot express; set XDG_CACHE_HOME", lib)
	}
	threads, events, maxWait := opts.Threads, opts.Events, opts.MaxWait
	if threads <= 0 {
		threads = 128
	}
	if events <= 0 {
		events = defaultEvents
	}
	if maxWait <= 0 {
		maxWait = time.Second
	}
	if threads > 1<<16 || events > 1<<28 {
		return nil, fmt.Errorf("hook region too large: %d threads of %d events", threads, events)
	}
	n := 4
	for n < events {
		n <<= 1
	}
	events = n
	slotOff := pageSize
	ringOff := roundUp(slotOff+threads*slotSize, pageSize)
	size := ringOff + threads*events*recSize

	fd, err := unix.MemfdCreate("trueprof-hook", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, os.NewSyscallError("memfd_create", err)
	}
	f := os.NewFile(uintptr(fd), "trueprof-hook")
	fail := func(err error) (*Region, error) {
		f.Close()
		return nil, err
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return fail(os.NewSyscallError("ftruncate", err))
	}
	// The target cannot shrink the file under the recorder's mapping
	// (which would fault it) or grow it.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return fail(os.NewSyscallError("fcntl F_ADD_SEALS", err))
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail(os.NewSyscallError("mmap", err))
	}
	r := newRegion(f, mem, lib)
	var id [8]byte
	rand.Read(id[:])
	*r.hdr = header{
		Magic:   magic,
		Version: version,
		ID:      binary.LittleEndian.Uint64(id[:]) | 1,
		Slots:   uint32(threads),
		Events:  uint32(events),
		SlotOff: uint64(slotOff),
		RingOff: uint64(ringOff),
		Size:    uint64(size),
		MaxWait: uint64(maxWait),
	}
	if !opts.Monotonic && tscUsable() {
		c, err := newClock()
		if err == nil {
			r.clock = c
			r.hdr.Clock = clockTSC
			r.hdr.MaxWait = c.ticks(maxWait)
		}
	}
	if err := r.layout(); err != nil {
		unix.Munmap(mem)
		return fail(err)
	}
	return r, nil
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }

// newRegion wraps mapped memory whose header is (or will be) filled in.
func newRegion(f *os.File, mem []byte, lib string) *Region {
	return &Region{f: f, mem: mem, hdr: (*header)(unsafe.Pointer(&mem[0])), lib: lib, lastCheck: time.Now()}
}

// layout checks the header against the mapping and sets up the slot and
// ring views.
func (r *Region) layout() error {
	h := r.hdr
	n, ev := uint64(h.Slots), uint64(h.Events)
	switch {
	case h.Magic != magic || h.Version != version:
		return errors.New("hook region: bad magic or version")
	case n == 0 || ev < 4 || ev&(ev-1) != 0:
		return errors.New("hook region: bad ring geometry")
	case h.SlotOff < uint64(headerSize) || h.SlotOff%64 != 0 || h.SlotOff+n*uint64(slotSize) > h.RingOff ||
		h.RingOff%uint64(recSize) != 0 || h.RingOff+n*ev*uint64(recSize) > h.Size || h.Size > uint64(len(r.mem)):
		return errors.New("hook region: layout does not fit")
	}
	r.slots = unsafe.Slice((*slot)(unsafe.Pointer(&r.mem[h.SlotOff])), n)
	r.rings = unsafe.Slice((*rec)(unsafe.Pointer(&r.mem[h.RingOff])), n*ev)
	r.mask = ev - 1
	r.idle = make([]uint64, n)
	return nil
}

// File returns the region's memfd, to pass to the target (in
// exec.Cmd.ExtraFiles; exec.Cmd clears close-on-exec on the copy it
// passes down). It stays owned by the Region.
func (r *Region) File() *os.File { return r.f }

// Library returns the path of the hook library the region's Env preloads.
func (r *Region) Library() string { return r.lib }

// Env returns the environment entries that make a target record into r:
// LD_PRELOAD with the hook library (after this process's own LD_PRELOAD,
// if any), and the descriptor number fd that File has in the target
// (3+i for ExtraFiles[i]) with the region's id. Append them to the
// target's environment; exec.Cmd keeps the last of duplicate keys.
func (r *Region) Env(fd int) []string {
	preload := r.lib
	if old := os.Getenv("LD_PRELOAD"); old != "" {
		preload = old + ":" + r.lib
	}
	return []string{
		"LD_PRELOAD=" + preload,
		EnvFD + "=" + strconv.Itoa(fd),
		EnvID + "=" + strconv.FormatUint(r.hdr.ID, 16),
	}
}

// Drain calls fn for every record available in every ring, oldest first
// per thread, and returns how many it delivered. Call it often (every few
// milliseconds) from the recorder's loop: a thread whose ring is full
// waits, and after Options.MaxWait drops events. fn must not retain the
// region, nor the event, which Drain reuses. It also frees the rings of threads that have ended. Drain
// copies the records out (DrainBatch) and decodes them at once; a
// recorder that decodes on another goroutine uses DrainBatch itself.
func (r *Region) Drain(fn func(*Event)) int {
	return r.drainDecode(fn, time.Since(r.lastCheck) >= liveEvery, false)
}

// Flush is the final Drain, after the target and its children have
// exited: it also reports the drops and waits of threads that ended
// without writing them to their ring (by exit, exec or a signal).
func (r *Region) Flush(fn func(*Event)) int {
	return r.drainDecode(fn, true, true)
}

func (r *Region) drainDecode(fn func(*Event), check, final bool) int {
	if r.own == nil {
		r.own = NewBatch(1 << 14)
		r.dec = NewDecoder()
	}
	n := 0
	for {
		more := r.drainBatch(r.own, check, final)
		n += r.dec.Decode(r.own, fn)
		r.own.Reset()
		if !more {
			return n
		}
		// One liveness check a Drain; a Flush checks in every batch, or
		// a slot whose records filled the first would never be freed
		// and its thread's pending drops never reported.
		check = final
	}
}

// Freeze ends what the drains deliver at what the rings hold now: the
// records a thread publishes later stay in its ring (it waits for space,
// then drops them). A recorder that stops while the target runs on
// freezes the region before its last drains, which would otherwise copy
// for as long as the target writes, as fast as they copy, into ever more
// batches.
func (r *Region) Freeze() {
	r.frozen = make([]uint64, len(r.slots))
	for i := range r.slots {
		r.frozen[i] = atomic.LoadUint64(&r.slots[i].Head)
	}
}

// DrainBatch copies the records available in the rings into b, as they
// are, and hands their space back to the threads at once: copying 16
// bytes a record keeps up with threads writing one every few ns, where
// decoding them would not. It stops when b is full (its capacity, set by
// NewBatch) and then reports true: call it again with another batch.
// Like Drain it frees the rings of threads that have ended, every 100
// ms; final (after the target has exited) also reports what ended
// threads still owed, as Flush. A Decoder turns the batches into events,
// in the order they were filled, on any one goroutine.
func (r *Region) DrainBatch(b *Batch, final bool) (more bool) {
	return r.drainBatch(b, final || time.Since(r.lastCheck) >= liveEvery, final)
}

func (r *Region) drainBatch(b *Batch, check, final bool) (more bool) {
	if r.mem == nil {
		return false
	}
	if check {
		r.lastCheck = time.Now()
	}
	if r.clock != nil {
		r.clock.update()
		if r.view == nil || r.viewPairs != r.clock.added {
			// Batches may be decoded while the drainer adds pairs: each
			// takes an immutable copy, shared until the next pair.
			r.view, r.viewPairs = r.clock.snapshot(), r.clock.added
		}
		b.clock = r.view
	}
	for i := range r.slots {
		s := &r.slots[i]
		st := atomic.LoadUint32(&s.State)
		if st == stateFree {
			continue
		}
		if r.copySlot(i, b) {
			return true
		}
		if st == stateOwned {
			// Between checks, only threads idle since the last Drain are
			// worth a system call; the final check looks at all.
			head := atomic.LoadUint64(&s.Head)
			busy := head != r.idle[i]
			r.idle[i] = head
			if !check || (busy && !final) {
				continue
			}
			if alive(atomic.LoadUint32(&s.PID), atomic.LoadUint32(&s.TID)) {
				continue
			}
			// Gone: whatever it wrote before it ended is there now.
			if r.copySlot(i, b) {
				return true
			}
		}
		if cap(b.recs)-len(b.recs) < 2 {
			return true // no room for the slot's last records: next batch
		}
		r.free(i, b)
	}
	if d := atomic.LoadUint64(&r.hdr.NoSlotDropped); d != r.noSlot && len(b.recs) < cap(b.recs) {
		b.recs = append(b.recs, rec{Time: r.now(), W: word(recDrop, d-r.noSlot)})
		b.spans = append(b.spans, slotRun{slot: noSlot, n: 1, mono: true})
		r.noSlot = d
	}
	return false
}

// noSlot is the run slot of drops by threads that found no slot.
const noSlot = ^uint32(0)

// copySlot copies slot i's published records into b, as many as fit,
// and hands their space back to the thread; it reports whether b filled
// up before the slot was empty.
func (r *Region) copySlot(i int, b *Batch) (full bool) {
	s := &r.slots[i]
	head := atomic.LoadUint64(&s.Head)
	if r.frozen != nil && head-r.frozen[i] < 1<<63 { // later than the freeze (heads only grow)
		head = r.frozen[i]
	}
	tail := s.Tail
	if head == tail {
		return false
	}
	size := r.mask + 1
	ru := slotRun{slot: uint32(i), pid: atomic.LoadUint32(&s.PID), tid: atomic.LoadUint32(&s.TID)}
	if head-tail > size {
		// Not something the library writes: a corrupted head. Count
		// what cannot be read rather than read it.
		if len(b.recs) == cap(b.recs) {
			return true
		}
		b.recs = append(b.recs, rec{W: word(recDrop, head-tail-size)})
		b.spans = append(b.spans, slotRun{slot: ru.slot, pid: ru.pid, tid: ru.tid, n: 1, atLast: true})
		tail = head - size
	}
	n := min(head-tail, uint64(cap(b.recs)-len(b.recs)))
	if n == 0 {
		return true
	}
	ring := r.rings[uint64(i)*size : uint64(i+1)*size]
	from, to := tail&r.mask, (tail+n)&r.mask
	if from < to || to == 0 {
		b.recs = append(b.recs, ring[from:from+n]...)
	} else {
		b.recs = append(b.recs, ring[from:]...)
		b.recs = append(b.recs, ring[:to]...)
	}
	ru.n = uint32(n)
	b.spans = append(b.spans, ru)
	atomic.StoreUint64(&s.Tail, tail+n)
	return tail+n != head
}

// free passes on what slot i's ended thread still owed (its pending
// drops and waits) and makes the slot available to new threads; b has
// room for two records.
func (r *Region) free(i int, b *Batch) {
	s := &r.slots[i]
	dropped := s.PendDropped + atomic.LoadUint64(&s.Nested)
	ru := slotRun{slot: uint32(i), pid: s.PID, tid: s.TID, reset: true}
	// The drop first, as the library writes them: a wait is stamped with
	// its end.
	if dropped != 0 {
		b.recs = append(b.recs, rec{Time: s.PendSince, W: word(recDrop, dropped)})
		ru.n++
	}
	if s.PendWait != 0 {
		b.recs = append(b.recs, rec{Time: s.PendSince, W: word(recWait, s.PendWait)})
		ru.n++
	}
	b.spans = append(b.spans, ru)
	s.PendDropped, s.PendWait, s.PendSince = 0, 0, 0
	atomic.StoreUint64(&s.Nested, 0)
	atomic.StoreUint32(&s.PID, 0)
	atomic.StoreUint32(&s.TID, 0)
	r.idle[i] = 0
	atomic.StoreUint32(&s.State, stateFree)
}

// alive reports whether thread tid of process pid may still exist. A
// slot without ids is being claimed right now.
func alive(pid, tid uint32) bool {
	if pid == 0 || tid == 0 {
		return true
	}
	return unix.Tgkill(int(pid), int(tid), 0) != unix.ESRCH
}

// now is the current CLOCK_MONOTONIC time.
func (r *Region) now() uint64 { return uint64(nanotime()) }

// Close unmaps the region and closes its memfd. Drain and Flush deliver
// nothing afterwards.
func (r *Region) Close() error {
	if r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	r.mem, r.slots, r.rings = nil, nil, nil
	if cerr := r.f.Close(); err == nil {
		err = cerr
	}
	return err
}
