package hook

import (
	"errors"
	"os"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Batch is records copied out of a region's rings as the hooks wrote
// them (Region.DrainBatch), to be decoded into events later, possibly on
// another goroutine (Decoder.Decode). Its zero value holds nothing; use
// NewBatch.
type Batch struct {
	recs  []rec
	spans []slotRun
	// clock converts the records' TSC values: the region's pairs when
	// the batch was filled (nil: records carry CLOCK_MONOTONIC ns).
	clock *clock
}

// slotRun is consecutive records of one slot in a Batch.
type slotRun struct {
	slot     uint32 // noSlot: drops of threads without a slot
	pid, tid uint32
	n        uint32 // records
	// reset: the slot was freed after these records (its next owner's
	// times start afresh); atLast: the record is timed at the slot's
	// last event (a count of records lost to a corrupted head); mono:
	// the record's time is already CLOCK_MONOTONIC ns.
	reset, atLast, mono bool
}

// NewBatch returns an empty batch with room for n records (16 bytes
// each).
func NewBatch(n int) *Batch { return &Batch{recs: make([]rec, 0, max(n, 1))} }

// Spool is the memory of a bounded number of batches, mapped at once
// and asked for transparent huge pages, handed out as the batches are
// first needed: a recording's batches are first touched as the drainer
// copies into them, and with 4 KiB pages every page cost a fault (a
// short hook recording's 23 batches, 6 MiB: 1,472 faults, where a huge
// page takes one for 2 MiB). Batches of a Spool must not be used after
// Close.
type Spool struct {
	mem  []byte
	recs []rec
	per  int // records a batch
	made int // batches handed out
}

// NewSpool maps the memory of n batches of per records each; nothing
// is touched (nor, but for the mapping, allocated) until used.
func NewSpool(n, per int) (*Spool, error) {
	if n <= 0 || per <= 0 {
		return nil, errors.New("hook: empty spool")
	}
	mem, err := unix.Mmap(-1, 0, n*per*recSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, os.NewSyscallError("mmap", err)
	}
	// Best effort: without huge pages the batches work as well, only
	// first touched at more cost.
	unix.Madvise(mem, unix.MADV_HUGEPAGE)
	return &Spool{mem: mem, recs: unsafe.Slice((*rec)(unsafe.Pointer(&mem[0])), n*per), per: per}, nil
}

// Batch returns an empty batch of the spool's memory, or nil once all
// of them are handed out.
func (s *Spool) Batch() *Batch {
	i := s.made * s.per
	if i >= len(s.recs) {
		return nil
	}
	s.made++
	return &Batch{recs: s.recs[i : i : i+s.per]}
}

// Close unmaps the spool's memory. Calling it again does nothing.
func (s *Spool) Close() error {
	if s.mem == nil {
		return nil
	}
	err := unix.Munmap(s.mem)
	s.mem, s.recs = nil, nil
	return err
}

// Len is the number of records in b.
func (b *Batch) Len() int { return len(b.recs) }

// Full reports whether b has no room left.
func (b *Batch) Full() bool { return len(b.recs) == cap(b.recs) }

// Reset empties b for reuse.
func (b *Batch) Reset() {
	b.recs, b.spans, b.clock = b.recs[:0], b.spans[:0], nil
}

// Decoder turns batches into events, keeping what outlasts a batch: each
// thread's last time, so that its times never go backwards (TSC values
// converted across two clock segments could). Decode the batches of one
// region with one Decoder, in the order DrainBatch filled them.
type Decoder struct {
	last []uint64 // per slot
	ev   Event    // the event Decode passes on
}

// NewDecoder returns a Decoder for a new region.
func NewDecoder() *Decoder { return &Decoder{} }

// Decode calls fn for each record of b, oldest first per thread, and
// returns how many events it delivered. A record of unknown kind (a
// corrupted ring) is passed on as an adjust with one event dropped. fn
// must not keep the event, which Decode reuses: passing it by pointer
// rather than by value cost the dense load 3 ns an event.
func (d *Decoder) Decode(b *Batch, fn func(*Event)) int {
	c := b.clock
	// clock.mono, inlined by hand: its cached segment in registers.
	var lo, span, base uint64
	var slope float64
	if c != nil {
		lo, span, base, slope = c.lo, c.span, c.base, c.slope
	}
	recs := b.recs
	n := 0
	ev := &d.ev
	for _, ru := range b.spans {
		*ev = Event{PID: ru.pid, TID: ru.tid}
		if ru.slot == noSlot {
			for _, rc := range recs[:ru.n] {
				ev.Time, ev.Kind, ev.Dropped = rc.Time, KindAdjust, rc.W&payloadMask
				fn(ev)
			}
			recs = recs[ru.n:]
			n += int(ru.n)
			continue
		}
		if int(ru.slot) >= len(d.last) {
			d.last = slices.Grow(d.last, int(ru.slot)+1-len(d.last))[:ru.slot+1]
		}
		last := d.last[ru.slot]
		for i := range recs[:ru.n] {
			rc := &recs[i]
			t, kind, payload := rc.Time, rc.W>>payloadBits, rc.W&payloadMask
			switch {
			case ru.atLast:
				t = last
			case c != nil:
				if dt := t - lo; dt < span {
					// Through int64: a float64 to uint64 conversion
					// takes a compare and two paths (the offset fits).
					t = base + uint64(int64(float64(int64(dt))*slope))
				} else {
					t = c.monoSeg(t)
					lo, span, base, slope = c.lo, c.span, c.base, c.slope
				}
			}
			t = max(t, last)
			last = t
			ev.Time = t
			switch kind {
			case recEntry, recExit:
				ev.Kind, ev.Addr, ev.Duration, ev.Dropped = uint8(kind), payload, 0, 0
			case recWait:
				ev.Kind, ev.Addr, ev.Duration, ev.Dropped = KindAdjust, 0, c.duration(rc.Time, payload), 0
				if ru.atLast {
					ev.Duration = 0
				}
			case recDrop:
				ev.Kind, ev.Addr, ev.Duration, ev.Dropped = KindAdjust, 0, 0, payload
			default:
				// Corrupted record: counted as a drop, never passed on.
				ev.Kind, ev.Addr, ev.Duration, ev.Dropped = KindAdjust, 0, 0, 1
			}
			fn(ev)
		}
		n += int(ru.n)
		recs = recs[ru.n:]
		if ru.reset {
			last = 0
		}
		d.last[ru.slot] = last
	}
	return n
}

// duration converts d clock units starting at t to ns; a nil clock's
// units are ns.
func (c *clock) duration(t, d uint64) uint64 {
	if c == nil || d == 0 {
		return d
	}
	return c.mono(t+d) - c.mono(t)
}
