package trace

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
)

// chunkBuilder accumulates the raw (uncompressed) records of one chunk
// together with the state that record encoding depends on. That state is
// reset with each chunk, so every chunk decodes on its own.
type chunkBuilder struct {
	raw     []byte
	body    []byte // scratch for the record being encoded
	records uint32
	// items is what a reader hands out of the chunk: its records, a
	// run's events one each.
	items    uint32
	samples  uint32
	prevTime uint64 // time of the previous timed record, 0 at chunk start
	prev     Sample // previous sample, for field elision
	hasPrev  bool
	// prevEvent is the previous event, for thread elision.
	prevEvent Event
	hasEvent  bool
	// run is the offset in raw of the open run of events, which the
	// next close event of prevEvent's thread joins; 0 when there is
	// none (a run always follows an Event record).
	run int
	// runRoom is how many more events the open run takes (0: none
	// open), which the writer looks at rather than the run's header.
	runRoom int
	// runMax is the largest function the open run takes:
	// maxNarrowFunction in a run of majorEventRun, maxRunFunction in
	// one of majorEventRunWide.
	runMax uint32
	// runStride is the bytes of an event in the open run.
	runStride int
	lastTime  uint64 // time of the last sample or event, for Lost{LostWrap}
}

func (c *chunkBuilder) reset() {
	c.raw = c.raw[:0]
	c.records, c.items, c.samples = 0, 0, 0
	c.prevTime = 0
	c.hasPrev = false
	c.hasEvent = false
	c.run, c.runRoom = 0, 0
}

// appendTime appends t as a zig-zag varint delta from the previous timed
// record. Subtraction wraps, so any pair of uint64 times round-trips,
// including times that go backwards (records from different CPUs are not
// strictly ordered).
func (c *chunkBuilder) appendTime(b []byte, t uint64) []byte {
	d := int64(t - c.prevTime)
	c.prevTime = t
	return binary.AppendVarint(b, d)
}

func appendBytes(b, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendF64 appends v as 8 little-endian bytes, exactly: the tree
// records' calibrated times, which are fractional nanoseconds.
func appendF64(b []byte, v float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func u(x uint32) uint64 { return uint64(x) }

// add encodes r and appends it to the chunk. It fails only for records
// that cannot be encoded, before changing the chunk.
func (c *chunkBuilder) add(r Record) error {
	if e, ok := r.(*Event); ok && e != nil {
		return c.addEvent(e)
	}
	if isNil(r) {
		return fmt.Errorf("%w: nil %T", ErrInvalidRecord, r)
	}
	if s, ok := r.(*Sample); ok && s.Flags&^sampleFlagMask != 0 {
		return fmt.Errorf("%w: sample flags %#x use reserved bits", ErrInvalidRecord, s.Flags)
	}
	if e, ok := r.(*End); ok && e.Detached > e.Time {
		return fmt.Errorf("%w: End detached at %d, after its time %d", ErrInvalidRecord, e.Detached, e.Time)
	}
	var minor uint8
	timed := true
	b := c.body[:0]
	oldTime := c.prevTime
	switch r := r.(type) {
	case *Sample:
		minor = r.Flags
		b = c.appendTime(b, r.Time)
		var same bool
		b, same = appendThread(b, c.hasPrev, c.prev.PID, c.prev.TID, r.PID, r.TID)
		if same {
			minor |= sampleSameThread
		}
		if c.hasPrev && r.CPU == c.prev.CPU {
			minor |= sampleSameCPU
		} else {
			b = binary.AppendUvarint(b, u(r.CPU))
		}
		if c.hasPrev && r.Period == c.prev.Period {
			minor |= sampleSamePeriod
		} else {
			b = binary.AppendUvarint(b, r.Period)
		}
		b = binary.AppendUvarint(b, u(r.Stack))
		c.prev, c.hasPrev = *r, true
		c.samples++
		c.lastTime = r.Time
	case *String:
		timed = false
		b = binary.AppendUvarint(b, u(r.ID))
		b = appendString(b, r.Text)
	case *Module:
		b = c.appendTime(b, r.Time)
		b = binary.AppendUvarint(b, u(r.PID))
		b = binary.AppendUvarint(b, u(r.TID))
		b = binary.AppendUvarint(b, r.Start)
		b = binary.AppendUvarint(b, r.Len)
		b = binary.AppendUvarint(b, r.PgOff)
		b = binary.AppendUvarint(b, u(r.Prot))
		b = binary.AppendUvarint(b, u(r.Flags))
		b = binary.AppendUvarint(b, u(r.Path))
		b = appendBytes(b, r.BuildID)
	case *Comm:
		if r.Exec {
			minor = 1
		}
		b = c.appendTime(b, r.Time)
		b = binary.AppendUvarint(b, u(r.PID))
		b = binary.AppendUvarint(b, u(r.TID))
		b = binary.AppendUvarint(b, u(r.Name))
	case *Fork:
		b = c.appendTime(b, r.Time)
		b = binary.AppendUvarint(b, u(r.PID))
		b = binary.AppendUvarint(b, u(r.PPID))
		b = binary.AppendUvarint(b, u(r.TID))
		b = binary.AppendUvarint(b, u(r.PTID))
	case *Exit:
		b = c.appendTime(b, r.Time)
		b = binary.AppendUvarint(b, u(r.PID))
		b = binary.AppendUvarint(b, u(r.PPID))
		b = binary.AppendUvarint(b, u(r.TID))
		b = binary.AppendUvarint(b, u(r.PTID))
	case *Location:
		timed = false
		b = binary.AppendUvarint(b, u(r.ID))
		b = binary.AppendUvarint(b, r.Address)
		b = binary.AppendUvarint(b, u(r.Module))
		b = binary.AppendUvarint(b, r.Offset)
		b = appendLines(b, r.Lines)
	case *Rename:
		timed = false
		b = binary.AppendUvarint(b, u(r.ID))
		b = appendLines(b, r.Lines)
	case *CalibrationRecord:
		timed = false
		if r.Calibration == nil {
			return fmt.Errorf("%w: CalibrationRecord without a calibration", ErrInvalidRecord)
		}
		js, err := json.Marshal(r.Calibration)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrInvalidRecord, err)
		}
		b = appendString(b, string(js))
	case *StackNode:
		timed = false
		b = binary.AppendUvarint(b, u(r.ID))
		b = binary.AppendUvarint(b, u(r.Parent))
		b = binary.AppendUvarint(b, u(r.Location))
	case *Lost:
		minor = uint8(r.Kind)
		b = c.appendTime(b, r.Time)
		b = binary.AppendUvarint(b, r.Count)
	case *Throttle:
		if r.Unthrottle {
			minor = 1
		}
		b = c.appendTime(b, r.Time)
	case *End:
		b = c.appendTime(b, r.Time)
		b = binary.AppendVarint(b, int64(r.ExitCode))
		b = binary.AppendUvarint(b, u(r.Reason))
		if r.Detached != 0 {
			// An appended field, which older readers ignore: how long
			// before the End the probes came off.
			b = binary.AppendUvarint(b, r.Time-r.Detached)
		}
	case *Switch:
		if r.Out {
			minor |= 1
		}
		if r.Preempt {
			minor |= 2
		}
		b = c.appendTime(b, r.Time)
		b = binary.AppendUvarint(b, u(r.PID))
		b = binary.AppendUvarint(b, u(r.TID))
		b = binary.AppendUvarint(b, u(r.CPU))
	case *Probe:
		minor = uint8(r.Mech)
		b = c.appendTime(b, r.Time)
		b = binary.AppendUvarint(b, u(r.PID))
		b = binary.AppendUvarint(b, u(r.Function))
		b = binary.AppendUvarint(b, r.Address)
		// Appended fields, which older readers ignore: Stepped, CallSite
		// and RetInsn, each 0 or 1, written up to the last one set.
		flags := []bool{r.Stepped, r.CallSite, r.RetInsn}
		for len(flags) > 0 && !flags[len(flags)-1] {
			flags = flags[:len(flags)-1]
		}
		for _, f := range flags {
			if f {
				b = append(b, 1)
			} else {
				b = append(b, 0)
			}
		}
	case *Adjust:
		b = c.appendTime(b, r.Time)
		b = binary.AppendUvarint(b, u(r.PID))
		b = binary.AppendUvarint(b, u(r.TID))
		b = binary.AppendUvarint(b, r.Duration)
		b = binary.AppendUvarint(b, r.Dropped)
	case *Pause:
		b = c.appendTime(b, r.Time)
		b = binary.AppendUvarint(b, r.Duration)
		b = binary.AppendUvarint(b, r.Dropped)
	case *TreeThread:
		b, minor = appendTree(c.appendTime(b, r.Time), r)
	case *TreeNode:
		b, minor = appendTree(c.appendTime(b, r.Time), r)
	case *TreeMark:
		b, minor = appendTree(c.appendTime(b, r.Time), r)
	case *IRQ:
		minor = uint8(r.Kind)
		b = c.appendTime(b, r.Time)
		b = binary.AppendUvarint(b, u(r.PID))
		b = binary.AppendUvarint(b, u(r.TID))
		b = binary.AppendUvarint(b, u(r.CPU))
		b = binary.AppendUvarint(b, u(r.Vector))
		b = binary.AppendUvarint(b, r.Duration)
	case *GoID:
		b = c.appendTime(b, r.Time)
		b = binary.AppendUvarint(b, u(r.PID))
		b = binary.AppendUvarint(b, u(r.TID))
		b = binary.AppendUvarint(b, r.GoID)
	case *Counter:
		minor = uint8(r.Kind)
		b = c.appendTime(b, r.Time)
		b = binary.AppendUvarint(b, u(r.PID))
		b = binary.AppendUvarint(b, u(r.TID))
		b = binary.AppendUvarint(b, r.Value)
	case *Labels:
		if r.Truncated {
			minor = labelsTruncated
		}
		b = c.appendTime(b, r.Time)
		b = binary.AppendUvarint(b, u(r.PID))
		b = binary.AppendUvarint(b, r.GoID)
		b = appendList(b, r.Pairs, func(b []byte, l LabelPair) []byte { return appendU32s(b, l.Key, l.Value) })
	default:
		return fmt.Errorf("%w: unsupported type %T", ErrInvalidRecord, r)
	}
	c.body = b
	if len(b) > maxRecordSize {
		// Only strings, build ids and line tables can get this big,
		// and none of them is a sample, so only the time needs undoing.
		c.prevTime = oldTime
		return fmt.Errorf("%w: %T of %d bytes exceeds %d", ErrInvalidRecord, r, len(b), maxRecordSize)
	}
	first := byte(r.Major())
	if timed {
		first |= timedBit
	}
	c.raw = append(c.raw, first, minor)
	c.raw = binary.AppendUvarint(c.raw, uint64(len(b)))
	c.raw = append(c.raw, b...)
	c.records++
	c.items++
	c.run, c.runRoom = 0, 0
	return nil
}

// addEvent is add for an event. Events are the hot path of instrumented
// traces (tens of millions a second): the record is encoded in place,
// its body at most 25 bytes so that its length takes one byte, and like
// samples, the thread is elided when it repeats.
func (c *chunkBuilder) addEvent(r *Event) error {
	if r.Kind == 0 || r.Kind&^eventKindMask != 0 {
		return fmt.Errorf("%w: event kind %d", ErrInvalidRecord, r.Kind)
	}
	// The common event joins a run, two bytes: of the previous event's
	// thread, an entry or exit, its time delta under 128 ns and its
	// function under 256 (the dense load's events nearly all); three
	// bytes in a wide run, whose functions go to 65535 (a real
	// program's). A run is narrow until a function needs it wide.
	if c.hasEvent && c.fitsRun(r.Time, r.PID, r.TID, r.Kind, r.Function) {
		if c.runRoom == 0 || r.Function > c.runMax {
			c.openRun(r.Function > maxNarrowFunction)
		}
		c.appendRunEvent(r.Time, r.Kind, r.Function)
		return nil
	}
	c.run, c.runRoom = 0, 0
	minor := uint8(r.Kind)
	n := len(c.raw)
	b := append(c.raw, byte(r.Major())|timedBit, 0, 0)
	b = c.appendTime(b, r.Time)
	b, same := appendThread(b, c.hasEvent, c.prevEvent.PID, c.prevEvent.TID, r.PID, r.TID)
	if same {
		minor |= eventSameThread
	}
	b = binary.AppendUvarint(b, u(r.Function))
	b[n+1], b[n+2] = minor, byte(len(b)-n-3)
	c.raw = b
	c.prevEvent, c.hasEvent = *r, true
	c.lastTime = r.Time
	c.records++
	c.items++
	return nil
}

// fitsRun reports whether an event of thread pid/tid at time t, of kind
// and function fn, can follow the previous event in a run: an entry or
// exit of the same thread whose time delta fits seven bits and function
// sixteen; a run of majorEventRun takes it if fn is at most runMax too.
func (c *chunkBuilder) fitsRun(t uint64, pid, tid uint32, kind EventKind, fn uint32) bool {
	return t-c.prevTime < runEventMaxDelta && fn <= maxRunFunction && kind-EventEntry <= EventExit-EventEntry &&
		pid == c.prevEvent.PID && tid == c.prevEvent.TID
}

// openRun starts a run of events, wide (majorEventRunWide) or not.
func (c *chunkBuilder) openRun(wide bool) {
	major, room, most := majorEventRun, maxRunEvents, uint32(maxNarrowFunction)
	if wide {
		major, room, most = majorEventRunWide, maxWideRunEvents, maxRunFunction
	}
	c.run, c.runRoom, c.runMax, c.runStride = len(c.raw), room, most, runStride(wide)
	c.raw = append(c.raw, byte(major), 0, 0)
	c.records++
}

// appendRunEvent appends an event to the open run: its kind and time
// delta in a byte, then function fn in one byte, or two (little-endian)
// in a wide run. Both are written and the narrow run's second dropped,
// rather than a branch on the run's width: BenchmarkMergeEvents/
// functions=3 took 8.8 ns an event with the branch, 8.5 without (8.0
// before wide runs, with the width check this path has now).
func (c *chunkBuilder) appendRunEvent(t uint64, kind EventKind, fn uint32) {
	n := len(c.raw) + c.runStride
	c.raw = append(c.raw, byte((t-c.prevTime)<<1)|byte(kind-EventEntry), byte(fn), byte(fn>>8))
	c.raw = c.raw[:n] // a length alone: no write barrier, unlike append(...)[:n]
	c.raw[c.run+2] += byte(c.runStride)
	c.runRoom--
	c.prevTime, c.lastTime = t, t
	c.items++
}

// appendThread appends pid and tid, unless there is a previous record
// (hasPrev) of the same thread (prevPID, prevTID): it then appends
// nothing and reports that the thread repeats.
func appendThread(b []byte, hasPrev bool, prevPID, prevTID, pid, tid uint32) ([]byte, bool) {
	if hasPrev && pid == prevPID && tid == prevTID {
		return b, true
	}
	b = binary.AppendUvarint(b, u(pid))
	return binary.AppendUvarint(b, u(tid)), false
}

// appendList appends the number of items, then each item as item
// appends it.
func appendList[T any](b []byte, items []T, item func([]byte, T) []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(items)))
	for _, it := range items {
		b = item(b, it)
	}
	return b
}

// appendLines appends the frames of a Location or Rename.
func appendLines(b []byte, lines []Line) []byte {
	return appendList(b, lines, func(b []byte, l Line) []byte { return appendU32s(b, l.Function, l.File, l.Line) })
}

// appendU32s appends each of vs as a uvarint.
func appendU32s(b []byte, vs ...uint32) []byte {
	for _, v := range vs {
		b = binary.AppendUvarint(b, uint64(v))
	}
	return b
}

// labelsTruncated is the minor code of a Labels record whose set the
// recorder copied only in part.
const labelsTruncated = 1

// maxRecordSize bounds a record body so that a chunk holding up to
// maxOptionChunkSize bytes plus one record stays within MaxChunkSize.
const (
	maxOptionChunkSize = MaxChunkSize / 2
	maxRecordSize      = MaxChunkSize/2 - 16
)

// isNil reports whether r is nil or a typed nil pointer, which would
// otherwise panic during encoding.
func isNil(r Record) bool {
	switch r := r.(type) {
	case nil:
		return true
	case *String:
		return r == nil
	case *Module:
		return r == nil
	case *Comm:
		return r == nil
	case *Fork:
		return r == nil
	case *Exit:
		return r == nil
	case *Location:
		return r == nil
	case *StackNode:
		return r == nil
	case *Sample:
		return r == nil
	case *Lost:
		return r == nil
	case *Throttle:
		return r == nil
	case *End:
		return r == nil
	case *Event:
		return r == nil
	case *Switch:
		return r == nil
	case *Probe:
		return r == nil
	case *Adjust:
		return r == nil
	case *IRQ:
		return r == nil
	case *GoID:
		return r == nil
	case *Counter:
		return r == nil
	case *Labels:
		return r == nil
	case *Rename:
		return r == nil
	case *CalibrationRecord:
		return r == nil
	case *Pause:
		return r == nil
	case *TreeThread:
		return r == nil
	case *TreeNode:
		return r == nil
	case *TreeMark:
		return r == nil
	}
	return false
}
