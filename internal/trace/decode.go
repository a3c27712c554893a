package trace

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
)

// chunkDecoder decodes the records of one raw (decompressed) chunk. Its
// state mirrors chunkBuilder's and starts afresh with every chunk.
type chunkDecoder struct {
	data     []byte
	off      int
	records  uint32 // records decoded so far, known or not
	prevTime uint64
	prev     Sample
	hasPrev  bool
	// eventPID and eventTID are the previous event's thread, for thread
	// elision (only they: copying the whole event cost a third of the
	// decoding).
	eventPID, eventTID uint32
	hasEvent           bool
	// run is what is left of the run of events being handed out: their
	// (delta and kind, function) byte pairs, or triples if runWide
	// (majorEventRunWide: two bytes of function).
	run     []byte
	runWide bool

	// slab hands out Samples allocated in blocks, which halves the cost
	// of reading samples. A caller keeping one *Sample keeps its block
	// (a few KiB) alive; Samples hold no pointers, so the GC never scans
	// blocks.
	slab []Sample

	// shared: Reader.Scan, which hands out scratch's records again and
	// again instead of allocating.
	shared  bool
	scratch struct {
		sample Sample
		event  Event
		sw     Switch
		adjust Adjust
		irq    IRQ
		goid   GoID
	}
}

const slabSize = 128

func (d *chunkDecoder) reset(data []byte) {
	*d = chunkDecoder{data: data, slab: d.slab}
}

func (d *chunkDecoder) newSample() *Sample {
	if d.shared {
		return &d.scratch.sample
	}
	if len(d.slab) == 0 {
		d.slab = make([]Sample, slabSize)
	}
	s := &d.slab[0]
	d.slab = d.slab[1:]
	return s
}

// fresh returns the record to decode into: scratch when the decoder
// reuses its records (Reader.Scan), else a new one.
func fresh[T any](d *chunkDecoder, scratch *T) *T {
	if d.shared {
		return scratch
	}
	return new(T)
}

// body is a cursor over one record body. Like debug/dwarf's buf it
// remembers that a read failed instead of returning an error from every
// read, so decoders read all fields and check once.
type body struct {
	b   []byte
	i   int
	bad bool
}

func (p *body) uvarint() uint64 {
	// The common one- and two-byte cases, inlined.
	if p.i+1 < len(p.b) {
		b0, b1 := p.b[p.i], p.b[p.i+1]
		if b0 < 0x80 {
			p.i++
			return uint64(b0)
		}
		if b1 < 0x80 {
			p.i += 2
			return uint64(b0&0x7f) | uint64(b1)<<7
		}
	} else if p.i < len(p.b) && p.b[p.i] < 0x80 {
		p.i++
		return uint64(p.b[p.i-1])
	}
	if p.i >= len(p.b) {
		p.bad = true
		return 0
	}
	v, n := binary.Uvarint(p.b[p.i:])
	if n <= 0 {
		p.bad = true
		p.i = len(p.b)
		return 0
	}
	p.i += n
	return v
}

func (p *body) varint() int64 {
	x := p.uvarint()
	return int64(x>>1) ^ -int64(x&1) // zig-zag, as binary.AppendVarint writes
}

// list decodes a count and that many items of at least minBytes bytes
// each, which item decodes; the count is checked against what is left
// of the body before the slice is allocated, so that a damaged count
// cannot ask for more memory than the body could fill.
func list[T any](p *body, minBytes int, item func() T) []T {
	n := p.uvarint()
	if n > uint64(len(p.b)-p.i)/uint64(minBytes) {
		p.bad = true
		return nil
	}
	if n == 0 {
		return nil
	}
	out := make([]T, n)
	for i := range out {
		out[i] = item()
	}
	return out
}

// lines decodes the frames of a Location or Rename; each takes at least
// three bytes.
func (p *body) lines() []Line {
	return list(p, 3, func() Line { return Line{Function: p.u32(), File: p.u32(), Line: p.u32()} })
}

func (p *body) u32() uint32 {
	v := p.uvarint()
	if v > math.MaxUint32 {
		p.bad = true
	}
	return uint32(v)
}

// f64 reads appendF64's 8 bytes. A NaN or an infinity is corrupt: the
// writer stores metrics, which are finite, and one would spread through
// every sum a report makes of it.
func (p *body) f64() float64 {
	if len(p.b)-p.i < 8 {
		p.bad = true
		p.i = len(p.b)
		return 0
	}
	v := math.Float64frombits(binary.LittleEndian.Uint64(p.b[p.i:]))
	p.i += 8
	if math.IsNaN(v) || math.IsInf(v, 0) {
		p.bad = true
		return 0
	}
	return v
}

// bytes reads a uvarint length and that many bytes. The length is checked
// against what is left of the body before anything is allocated.
func (p *body) bytes() []byte {
	n := p.uvarint()
	if p.bad || n > uint64(len(p.b)-p.i) {
		p.bad = true
		return nil
	}
	s := p.b[p.i : p.i+int(n)]
	p.i += int(n)
	return s
}

// next decodes and returns the next record of a known major code,
// skipping unknown ones. It returns nil, nil at the end of the chunk.
// Errors wrap ErrCorrupt and say where in the chunk the fault is; the
// caller adds the chunk's file offset.
func (d *chunkDecoder) next() (Record, error) {
	if len(d.run) > 0 {
		e := fresh(d, &d.scratch.event)
		d.runEvent(e)
		return e, nil
	}
	for d.off < len(d.data) {
		start := d.off
		if len(d.data)-start < 3 {
			return nil, d.errorf(start, "record header cut short")
		}
		first, minor := d.data[start], d.data[start+1]
		n, w := binary.Uvarint(d.data[start+2:])
		if w <= 0 || n > uint64(len(d.data)-start-2-w) {
			return nil, d.errorf(start, "bad record length")
		}
		bodyStart := start + 2 + w
		d.off = bodyStart + int(n)
		d.records++
		p := body{b: d.data[bodyStart:d.off]}
		major := Major(first &^ timedBit)
		timed := first&timedBit != 0
		if major == majorEventRun || major == majorEventRunWide {
			wide := major == majorEventRunWide
			if timed || !d.hasEvent || n == 0 || n%uint64(runStride(wide)) != 0 {
				return nil, d.errorf(start, "malformed run of events")
			}
			d.run, d.runWide = p.b, wide
			e := fresh(d, &d.scratch.event)
			d.runEvent(e)
			return e, nil
		}
		var t uint64
		if timed {
			t = d.prevTime + uint64(p.varint())
			d.prevTime = t
		}
		r := d.decode(major, minor, timed, t, &p)
		if p.bad {
			return nil, d.errorf(start, "malformed %v record", major)
		}
		if r != nil {
			return r, nil
		}
		if major == 0 {
			return nil, d.errorf(start, "major code 0")
		}
		// Unknown major: skipped by its length (forward compatibility).
	}
	return nil, nil
}

// scanEvent decodes, into the scratch event (Reader.Scan), the record at
// d.off when it is the common event: of the previous event's thread,
// its time delta and function one or two bytes each, nothing after
// them. That is nearly every record of an instrumented trace, and this
// path takes a third of the instructions of next's general one. It
// returns nil, having consumed nothing, for any other record, and for a
// malformed one, whose error the general path reports.
func (d *chunkDecoder) scanEvent() *Event {
	e := &d.scratch.event
	if len(d.run) > 0 {
		d.runEvent(e)
		return e
	}
	b := d.data[d.off:]
	if run, wide, ok := runAt(b); ok && d.hasEvent {
		d.off += 3 + len(run)
		d.records++
		d.run, d.runWide = run, wide
		d.runEvent(e)
		return e
	}
	if len(b) < 5 || b[0] != byte(MajorEvent)|timedBit || b[1]&eventSameThread == 0 || b[1]&eventKindMask == 0 || !d.hasEvent {
		return nil
	}
	n := int(b[2])
	body := b[3:]
	if n > len(body) { // also a length of two bytes or more
		return nil
	}
	body = body[:n]
	dt, i, ok := shortUvarint(body, 0)
	if !ok {
		return nil
	}
	fn, i, ok := shortUvarint(body, i)
	if !ok || i != n {
		return nil
	}
	d.off += 3 + n
	d.records++
	d.prevTime += uint64(int64(dt>>1) ^ -int64(dt&1)) // zig-zag, as body.varint
	e.Time, e.PID, e.TID, e.Kind, e.Function = d.prevTime, d.eventPID, d.eventTID, EventKind(b[1]&eventKindMask), uint32(fn)
	return e
}

// skimEvents consumes the events scanEvent would return next, as long
// as they are of a function in [1, maxFunc) and at most until in time,
// and folds their times into span; it returns how many it consumed. It
// is scanEvent's loop without handing each event out: the first pass of
// a stream needs only their number, times and functions' validity.
func (d *chunkDecoder) skimEvents(maxFunc uint32, until uint64, span *TimeSpan) int {
	if !d.hasEvent {
		return 0
	}
	k, records := 0, uint32(0)
	data, off, t, run, wide := d.data, d.off, d.prevTime, d.run, d.runWide
	for {
		if len(run) > 0 {
			fn, stride := runFunction(run, wide)
			next := t + uint64(run[0]>>1)
			if fn == 0 || fn >= maxFunc || next > until {
				break
			}
			t = next
			span.Add(t)
			run = run[stride:]
			k++
			continue
		}
		b := data[off:]
		if r, w, ok := runAt(b); ok {
			off += 3 + len(r)
			records++
			run, wide = r, w
			continue
		}
		if len(b) < 5 || b[0] != byte(MajorEvent)|timedBit || b[1]&eventSameThread == 0 || b[1]&eventKindMask == 0 {
			break
		}
		n := int(b[2])
		body := b[3:]
		if n > len(body) {
			break
		}
		body = body[:n]
		dt, i, ok := shortUvarint(body, 0)
		if !ok {
			break
		}
		fn, i, ok := shortUvarint(body, i)
		if !ok || i != n || fn == 0 || fn >= uint64(maxFunc) {
			break
		}
		next := t + uint64(int64(dt>>1)^-int64(dt&1)) // zig-zag, as body.varint
		if next > until {
			break
		}
		t = next
		span.Add(t)
		off += 3 + n
		k++
		records++
	}
	d.off, d.prevTime, d.run, d.runWide = off, t, run, wide
	d.records += records
	return k
}

// runAt returns the events of the run at the start of b, and whether it
// is wide, if a well-formed one is there whose length takes one byte
// (the Writer's runs all; next reads any).
func runAt(b []byte) (run []byte, wide, ok bool) {
	if len(b) < 5 || (b[0] != byte(majorEventRun) && b[0] != byte(majorEventRunWide)) {
		return nil, false, false
	}
	wide = b[0] == byte(majorEventRunWide)
	n := int(b[2])
	if n < 2 || n >= 0x80 || n%runStride(wide) != 0 || n > len(b)-3 {
		return nil, false, false
	}
	return b[3 : 3+n], wide, true
}

// runStride is the bytes of an event in a run, wide or not.
func runStride(wide bool) int {
	if wide {
		return 3
	}
	return 2
}

// runFunction returns the function of the run event at the start of
// run, a byte or, in a wide run, two (little-endian), and the event's
// bytes.
func runFunction(run []byte, wide bool) (uint32, int) {
	if wide {
		return uint32(run[1]) | uint32(run[2])<<8, 3
	}
	return uint32(run[1]), 2
}

// runEvent hands out, into e, the next event of the run at hand: of the
// previous event's thread, its first byte the time delta (bits 1-7) and
// the kind (bit 0: 0 entry, 1 exit), then the function, a byte or, in a
// wide run, two (little-endian).
func (d *chunkDecoder) runEvent(e *Event) {
	b0 := d.run[0]
	fn, stride := runFunction(d.run, d.runWide)
	d.run = d.run[stride:]
	d.prevTime += uint64(b0 >> 1)
	e.Time, e.PID, e.TID, e.Kind, e.Function = d.prevTime, d.eventPID, d.eventTID, EventEntry+EventKind(b0&1), fn
}

// shortUvarint decodes the uvarint of one or two bytes at b[i:] and
// returns it with the index after it; ok is false for any other.
func shortUvarint(b []byte, i int) (v uint64, next int, ok bool) {
	if i < len(b) && b[i] < 0x80 {
		return uint64(b[i]), i + 1, true
	}
	if i+1 < len(b) && b[i+1] < 0x80 {
		return uint64(b[i]&0x7f) | uint64(b[i+1])<<7, i + 2, true
	}
	return 0, i, false
}

// decode decodes a record body. It returns nil for an unknown major code,
// or for a known one with the wrong timed bit, which p.bad then reports.
// Bytes after the known fields are ignored: later versions may append
// fields to a record without changing its major code.
func (d *chunkDecoder) decode(major Major, minor uint8, timed bool, t uint64, p *body) Record {
	if wantTimed, known := majorTimed(major); !known {
		return nil
	} else if wantTimed != timed {
		p.bad = true
		return nil
	}
	switch major {
	case MajorSample:
		s := d.newSample()
		s.Time, s.Flags = t, minor&sampleFlagMask
		if minor&sampleSameThread != 0 {
			s.PID, s.TID = d.prev.PID, d.prev.TID
		} else {
			s.PID = p.u32()
			s.TID = p.u32()
		}
		if minor&sampleSameCPU != 0 {
			s.CPU = d.prev.CPU
		} else {
			s.CPU = p.u32()
		}
		if minor&sampleSamePeriod != 0 {
			s.Period = d.prev.Period
		} else {
			s.Period = p.uvarint()
		}
		s.Stack = p.u32()
		if minor&^sampleFlagMask != 0 && !d.hasPrev {
			p.bad = true // elided fields with no previous sample
		}
		d.prev, d.hasPrev = *s, true
		return s
	case MajorString:
		id := p.u32()
		return &String{ID: id, Text: string(p.bytes())}
	case MajorModule:
		m := &Module{Time: t}
		m.PID = p.u32()
		m.TID = p.u32()
		m.Start = p.uvarint()
		m.Len = p.uvarint()
		m.PgOff = p.uvarint()
		m.Prot = p.u32()
		m.Flags = p.u32()
		m.Path = p.u32()
		if id := p.bytes(); len(id) > 0 {
			m.BuildID = append([]byte(nil), id...)
		}
		return m
	case MajorComm:
		c := &Comm{Time: t, Exec: minor&1 != 0}
		c.PID = p.u32()
		c.TID = p.u32()
		c.Name = p.u32()
		return c
	case MajorFork:
		f := &Fork{Time: t}
		f.PID = p.u32()
		f.PPID = p.u32()
		f.TID = p.u32()
		f.PTID = p.u32()
		return f
	case MajorExit:
		e := &Exit{Time: t}
		e.PID = p.u32()
		e.PPID = p.u32()
		e.TID = p.u32()
		e.PTID = p.u32()
		return e
	case MajorLocation:
		l := &Location{}
		l.ID = p.u32()
		l.Address = p.uvarint()
		l.Module = p.u32()
		l.Offset = p.uvarint()
		l.Lines = p.lines()
		return l
	case MajorRename:
		rn := &Rename{ID: p.u32()}
		rn.Lines = p.lines()
		return rn
	case MajorCalibration:
		c := &Calibration{}
		if err := json.Unmarshal(p.bytes(), c); err != nil {
			p.bad = true
			return nil
		}
		return &CalibrationRecord{Calibration: c}
	case MajorStack:
		s := &StackNode{}
		s.ID = p.u32()
		s.Parent = p.u32()
		s.Location = p.u32()
		return s
	case MajorLost:
		return &Lost{Time: t, Kind: LostKind(minor), Count: p.uvarint()}
	case MajorThrottle:
		return &Throttle{Time: t, Unthrottle: minor&1 != 0}
	case MajorEnd:
		e := &End{Time: t}
		code := p.varint()
		if code < math.MinInt32 || code > math.MaxInt32 {
			p.bad = true
		}
		e.ExitCode = int32(code)
		e.Reason = p.u32()
		if p.i < len(p.b) {
			if before := p.uvarint(); before <= t {
				e.Detached = t - before
			} else {
				p.bad = true
			}
		}
		return e
	case MajorEvent:
		e := fresh(d, &d.scratch.event)
		e.Time, e.Kind = t, EventKind(minor&eventKindMask)
		if minor&eventSameThread != 0 {
			if !d.hasEvent {
				p.bad = true // elided thread with no previous event
			}
			e.PID, e.TID = d.eventPID, d.eventTID
		} else {
			e.PID = p.u32()
			e.TID = p.u32()
			d.eventPID, d.eventTID, d.hasEvent = e.PID, e.TID, true
		}
		e.Function = p.u32()
		if e.Kind == 0 {
			p.bad = true
		}
		return e
	case MajorSwitch:
		s := fresh(d, &d.scratch.sw)
		*s = Switch{Time: t, Out: minor&1 != 0, Preempt: minor&2 != 0}
		s.PID = p.u32()
		s.TID = p.u32()
		s.CPU = p.u32()
		return s
	case MajorProbe:
		pr := &Probe{Time: t, Mech: ProbeMech(minor)}
		pr.PID = p.u32()
		pr.Function = p.u32()
		pr.Address = p.uvarint()
		if p.i < len(p.b) {
			pr.Stepped = p.uvarint() != 0
		}
		if p.i < len(p.b) {
			pr.CallSite = p.uvarint() != 0
		}
		if p.i < len(p.b) {
			pr.RetInsn = p.uvarint() != 0
		}
		return pr
	case MajorAdjust:
		a := fresh(d, &d.scratch.adjust)
		*a = Adjust{Time: t}
		a.PID = p.u32()
		a.TID = p.u32()
		a.Duration = p.uvarint()
		a.Dropped = p.uvarint()
		return a
	case MajorPause:
		return &Pause{Time: t, Duration: p.uvarint(), Dropped: p.uvarint()}
	case MajorTreeThread, MajorTreeNode, MajorTreeMark:
		return decodeTree(major, minor, t, p)
	case MajorIRQ:
		q := fresh(d, &d.scratch.irq)
		*q = IRQ{Time: t, Kind: IRQKind(minor)}
		q.PID = p.u32()
		q.TID = p.u32()
		q.CPU = p.u32()
		q.Vector = p.u32()
		q.Duration = p.uvarint()
		return q
	case MajorGoID:
		g := fresh(d, &d.scratch.goid)
		*g = GoID{Time: t}
		g.PID = p.u32()
		g.TID = p.u32()
		g.GoID = p.uvarint()
		return g
	case MajorCounter:
		c := &Counter{Time: t, Kind: CounterKind(minor)}
		c.PID = p.u32()
		c.TID = p.u32()
		c.Value = p.uvarint()
		return c
	case MajorLabels:
		l := &Labels{Time: t, Truncated: minor&labelsTruncated != 0}
		l.PID = p.u32()
		l.GoID = p.uvarint()
		// Each pair takes at least two bytes.
		l.Pairs = list(p, 2, func() LabelPair { return LabelPair{Key: p.u32(), Value: p.u32()} })
		return l
	}
	return nil
}

// majorTimed reports whether records of major code m carry a timestamp,
// and whether m is known at all.
func majorTimed(m Major) (timed, known bool) {
	switch m {
	case MajorString, MajorLocation, MajorStack, MajorRename, MajorCalibration:
		return false, true
	case MajorModule, MajorComm, MajorFork, MajorExit, MajorSample,
		MajorLost, MajorThrottle, MajorEnd, MajorEvent, MajorSwitch, MajorProbe, MajorAdjust,
		MajorIRQ, MajorGoID, MajorCounter, MajorLabels, MajorPause,
		MajorTreeThread, MajorTreeNode, MajorTreeMark:
		return true, true
	}
	return false, false
}

func (d *chunkDecoder) errorf(off int, format string, args ...any) error {
	return fmt.Errorf("%w: record %d at chunk byte %d: %s", ErrCorrupt, d.records, off, fmt.Sprintf(format, args...))
}
