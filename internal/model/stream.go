package model

import (
	"errors"
	"io"
	"os"

	"trueprof/internal/trace"
)

// RecordKind says which field of a Record holds it.
type RecordKind uint8

// The kinds of the records a trace holds one of per sample or event:
// what memory would grow with if a reader kept them.
const (
	RecordSample RecordKind = iota + 1
	RecordEvent
	RecordSwitch
	RecordAdjust
	RecordIRQ
	RecordGoID
)

// Record is one of the time-ordered records of a trace (Records.Next):
// the field Kind names holds it; the others are stale.
type Record struct {
	Kind   RecordKind
	Sample Sample
	Event  Event
	Switch Switch
	Adjust Adjust
	IRQ    IRQ
	GoID   GoID
}

// Time is when the record happened.
func (r *Record) Time() uint64 {
	switch r.Kind {
	case RecordSample:
		return r.Sample.Time
	case RecordEvent:
		return r.Event.Time
	case RecordSwitch:
		return r.Switch.Time
	case RecordAdjust:
		return r.Adjust.Time
	case RecordIRQ:
		return r.IRQ.Time
	case RecordGoID:
		return r.GoID.Time
	}
	return 0
}

// Set makes r a copy of src: its Kind and the field that names, a sixth
// of the whole Record (r's other fields are left stale, as Records.Next
// leaves them). Readers that pass records on copy them this way.
func (r *Record) Set(src *Record) {
	r.Kind = src.Kind
	switch src.Kind {
	case RecordSample:
		r.Sample = src.Sample
	case RecordEvent:
		r.Event = src.Event
	case RecordSwitch:
		r.Switch = src.Switch
	case RecordAdjust:
		r.Adjust = src.Adjust
	case RecordIRQ:
		r.IRQ = src.IRQ
	case RecordGoID:
		r.GoID = src.GoID
	}
}

// convert fills r from rec, one of the trace's time-ordered records
// (Sample, Event, Switch, Adjust, IRQ, GoID); other records leave r's
// Kind zero.
func convert(rec trace.Record, r *Record) {
	r.Kind = 0
	switch t := rec.(type) {
	case *trace.Sample:
		r.Kind, r.Sample = RecordSample, sampleOf(t)
	case *trace.Event:
		r.Kind, r.Event = RecordEvent, eventOf(t)
	case *trace.Switch:
		r.Kind, r.Switch = RecordSwitch, switchOf(t)
	case *trace.Adjust:
		r.Kind, r.Adjust = RecordAdjust, adjustOf(t)
	case *trace.IRQ:
		r.Kind, r.IRQ = RecordIRQ, irqOf(t)
	case *trace.GoID:
		r.Kind, r.GoID = RecordGoID, goIDOf(t)
	}
}

// sampleOf is the model's sample of the trace's.
func sampleOf(t *trace.Sample) Sample {
	s := Sample{Time: t.Time, PID: t.PID, TID: t.TID, CPU: t.CPU, Period: t.Period, Stack: t.Stack,
		Truncated: t.Flags&trace.SampleTruncated != 0, Kernel: t.Flags&trace.SampleKernel != 0}
	if s.Truncated {
		s.Unwind = t.Reason()
	}
	return s
}

// eventOf is the model's event of the trace's.
func eventOf(t *trace.Event) Event {
	return Event{Time: t.Time, PID: t.PID, TID: t.TID, Entry: t.Kind == trace.EventEntry, Function: t.Function}
}

// switchOf is the model's switch of the trace's.
func switchOf(t *trace.Switch) Switch {
	return Switch{Time: t.Time, PID: t.PID, TID: t.TID, CPU: t.CPU, Out: t.Out, Preempt: t.Preempt}
}

// adjustOf is the model's adjustment of the trace's.
func adjustOf(t *trace.Adjust) Adjust {
	return Adjust{Time: t.Time, PID: t.PID, TID: t.TID, Duration: t.Duration, Dropped: t.Dropped}
}

// irqOf is the model's interrupt of the trace's.
func irqOf(t *trace.IRQ) IRQ {
	return IRQ{Time: t.Time, PID: t.PID, TID: t.TID, CPU: t.CPU, Soft: t.Kind == trace.IRQSoft, Vector: t.Vector, Duration: t.Duration}
}

// goIDOf is the model's goroutine switch of the trace's.
func goIDOf(t *trace.GoID) GoID {
	return GoID{Time: t.Time, PID: t.PID, TID: t.TID, GoID: t.GoID}
}

// ReorderWindow is how late, in trace nanoseconds, a record may come
// after a later one for Records to put it back in order: the recorder
// writes its per-CPU and per-thread buffers every second, so records of
// one flush interleave with those of the next by up to that much.
const ReorderWindow = 1_000_000_000

// ErrNotStreamable is returned by Stream.Records for a trace whose
// records come more than ReorderWindow out of time order (wrap mode
// writes its samples at the end): read it with Load, which sorts.
var ErrNotStreamable = errors.New("trace records are too far out of time order to stream")

// Stream is a trace read in two passes, so that its time-ordered records
// need not be held in memory: OpenStream reads the tables (locations,
// stacks, threads, processes, probes, labels, counters, losses, the end)
// and counts the records, and Records reads the file again for them.
type Stream struct {
	// Profile holds the tables, as Load gives them, and none of the
	// time-ordered records: Samples, Events, Switches, Adjusts, IRQs and
	// GoIDs are nil. Truncated counts the truncated samples all the same.
	Profile *Profile
	// Counts is how many records of each kind the trace holds, by
	// RecordKind.
	Counts [RecordGoID + 1]uint64
	// First and Last are the earliest and latest record times; 0 without
	// records.
	First, Last uint64
	// Lateness is the most a record came after a later one of the file,
	// in trace nanoseconds: the reorder window Records needs.
	Lateness uint64

	open    func() (io.ReadCloser, error)
	records int   // records before the end or the damage Profile.Err says
	dropped []int // the indexes of the records the first pass dropped (Profile.Inconsistent)
	// held are the time-ordered records, in Records' order, when the
	// first pass kept them all (see maxHeld), else nil.
	held *heldRecords
}

// OpenStream reads the tables of the trace file at path (the first pass;
// see Stream). Like Load, it fails only when the header cannot be read.
func OpenStream(path string) (*Stream, error) {
	return newStream(func() (io.ReadCloser, error) { return os.Open(path) }, maxHeld)
}

// newStream reads the tables of the trace open returns, anew at each
// call.
func newStream(open func() (io.ReadCloser, error), hold int) (*Stream, error) {
	f, err := open()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr, err := trace.NewReader(f)
	if err != nil {
		return nil, err
	}
	c := tally{held: &heldRecords{}, limit: hold}
	l := newLoader(tr, &c)
	l.read(tr)
	l.finish()
	s := &Stream{Profile: l.p, Counts: c.counts, First: c.span.First, Last: c.span.Last, Lateness: c.span.Lateness,
		open: open, records: l.records, dropped: l.dropped}
	if c.span.Lateness == 0 {
		// In time order as read: Records' order.
		s.held = c.held
	}
	return s, nil
}

// maxHeld is how many time-ordered records the first pass keeps, in
// compact per-kind slices (24-40 bytes a record, at most 10 MiB), for
// Records to hand out without reading the file again: a sampling trace
// of ten seconds (40k samples and 74k switches) is then read,
// decompressed and decoded once rather than twice. A longer trace keeps
// none and is read again, so that memory stays flat as traces grow.
const maxHeld = 1 << 18

// heldRecords are the time-ordered records of a trace in file order:
// those of each kind in a list of their own, and the kind of each in
// turn.
type heldRecords struct {
	samples  blocks[Sample]
	events   blocks[Event]
	switches blocks[Switch]
	adjusts  blocks[Adjust]
	irqs     blocks[IRQ]
	goIDs    blocks[GoID]
	kinds    blocks[RecordKind]
}

// blockSize is the number of values of a block of blocks.
const blockSize = 4096

// blocks is a list of values held in fixed blocks rather than one
// slice: appending never copies what it holds. (A slice doubled to
// 100k records cost the first pass more than reading the file again:
// the copies, the page faults of each new array, and the garbage
// collector spinning to stop a goroutine inside a large copy.)
type blocks[T any] struct {
	b [][]T
	n int
}

// add appends v.
func (l *blocks[T]) add(v T) {
	if l.n%blockSize == 0 {
		l.b = append(l.b, make([]T, blockSize))
	}
	l.b[l.n/blockSize][l.n%blockSize] = v
	l.n++
}

// at returns the i'th value.
func (l *blocks[T]) at(i int) *T { return &l.b[i/blockSize][i%blockSize] }

// tally sums up the time-ordered records of the first pass.
type tally struct {
	counts [RecordGoID + 1]uint64
	span   trace.TimeSpan
	// held are the records so far while there are at most limit, nil
	// after.
	held  *heldRecords
	limit int
}

// add counts a record of kind k at time t.
func (c *tally) add(k RecordKind, t uint64) {
	c.counts[k]++
	c.span.Add(t)
}

// hold keeps rec, a time-ordered record of kind k, in c.held while
// there is room.
func (c *tally) hold(k RecordKind, rec trace.Record) {
	h := c.held
	if h == nil {
		return
	}
	if h.kinds.n == c.limit {
		c.held = nil
		return
	}
	// Straight from the trace's record: through a Record's 192 bytes,
	// holding cost the first pass twice as much.
	switch k {
	case RecordSample:
		h.samples.add(sampleOf(rec.(*trace.Sample)))
	case RecordEvent:
		h.events.add(eventOf(rec.(*trace.Event)))
	case RecordSwitch:
		h.switches.add(switchOf(rec.(*trace.Switch)))
	case RecordAdjust:
		h.adjusts.add(adjustOf(rec.(*trace.Adjust)))
	case RecordIRQ:
		h.irqs.add(irqOf(rec.(*trace.IRQ)))
	case RecordGoID:
		h.goIDs.add(goIDOf(rec.(*trace.GoID)))
	}
	h.kinds.add(k)
}

// Records reads the file again and returns its time-ordered records
// (Sample, Event, Switch, Adjust, IRQ, GoID), in the order Load's
// slices have them: by time, ties in file order. It stops where the
// first pass stopped (Profile.Err). A trace more than ReorderWindow out
// of order gives ErrNotStreamable. Close the Records when done.
func (s *Stream) Records() (*Records, error) {
	if s.Lateness > ReorderWindow {
		return nil, ErrNotStreamable
	}
	if s.held != nil {
		return &Records{held: s.held}, nil
	}
	f, err := s.open()
	if err != nil {
		return nil, err
	}
	tr, err := trace.NewReader(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &Records{f: f, tr: tr, left: s.records, drop: s.dropped, lag: s.Lateness}, nil
}

// Records iterates over the time-ordered records of a trace (see
// Stream.Records). It holds the records of one reorder window at a time.
type Records struct {
	f    io.Closer
	tr   *trace.Reader
	left int    // records of the file still to read
	read int    // records of the file read
	drop []int  // the indexes of the records to drop, as the first pass did
	lag  uint64 // the reorder window
	seen uint64 // the latest time read
	seq  uint64 // records queued so far
	// The records waiting in the window: those that came in time order
	// in a queue (in order already, most of them), the late ones in a
	// heap; the next is the earlier of their heads.
	inOrder []queued
	head    int // inOrder[head:] wait
	q       reorder
	rec     Record
	// held are the records when the first pass kept them (Stream.held):
	// Next hands them out and reads no file; taken counts those of each
	// kind handed out.
	held  *heldRecords
	taken [RecordGoID + 1]int
}

// Held tells whether rs hands out records the first pass kept in
// memory rather than reading the file: then Next costs a copy, and
// reading ahead on another goroutine would not pay.
func (rs *Records) Held() bool { return rs.held != nil }

// first returns the earliest waiting record, nil if none.
func (rs *Records) first() *queued {
	var f *queued
	if rs.head < len(rs.inOrder) {
		f = &rs.inOrder[rs.head]
	}
	if len(rs.q) > 0 && (f == nil || rs.q.before(&rs.q[0], f)) {
		f = &rs.q[0]
	}
	return f
}

// Next fills r with the next record and returns nil, or returns io.EOF
// after the last one, or the error of reading the file again (which
// changed since the first pass if it differs).
func (rs *Records) Next(r *Record) error {
	if rs.held != nil {
		return rs.nextHeld(r)
	}
	if rs.lag == 0 {
		return rs.nextInOrder(r)
	}
	for {
		if f := rs.first(); f != nil && (rs.left == 0 || f.r.Time()+rs.lag <= rs.seen) {
			// Nothing still to come can be earlier: a record comes at
			// most lag after a later one, and ties go in file order.
			if len(rs.q) > 0 && f == &rs.q[0] {
				rs.q.pop(r)
				return nil
			}
			r.Set(&f.r)
			rs.head++
			if rs.head == len(rs.inOrder) {
				rs.inOrder, rs.head = rs.inOrder[:0], 0
			} else if rs.head > 4096 && rs.head*2 > len(rs.inOrder) {
				rs.inOrder, rs.head = append(rs.inOrder[:0], rs.inOrder[rs.head:]...), 0
			}
			return nil
		}
		if rs.left == 0 {
			return io.EOF
		}
		rec, err := rs.scan()
		if err != nil {
			return err
		}
		if convert(rec, &rs.rec); rs.rec.Kind == 0 {
			continue
		}
		t := rs.rec.Time()
		if n := len(rs.inOrder); n == rs.head || t >= rs.inOrder[n-1].r.Time() {
			if n < cap(rs.inOrder) {
				rs.inOrder = rs.inOrder[:n+1]
			} else {
				rs.inOrder = append(rs.inOrder, queued{})
			}
			rs.inOrder[n].r.Set(&rs.rec)
			rs.inOrder[n].seq = rs.seq
		} else {
			slot := rs.q.push()
			slot.r.Set(&rs.rec)
			slot.seq = rs.seq
			rs.q.fix()
		}
		rs.seen = max(rs.seen, t)
		rs.seq++
	}
}

// nextHeld is Next over the records the first pass kept.
func (rs *Records) nextHeld(r *Record) error {
	h := rs.held
	if rs.read == h.kinds.n {
		return io.EOF
	}
	k := *h.kinds.at(rs.read)
	rs.read++
	i := rs.taken[k]
	rs.taken[k]++
	r.Kind = k
	switch k {
	case RecordSample:
		r.Sample = *h.samples.at(i)
	case RecordEvent:
		r.Event = *h.events.at(i)
	case RecordSwitch:
		r.Switch = *h.switches.at(i)
	case RecordAdjust:
		r.Adjust = *h.adjusts.at(i)
	case RecordIRQ:
		r.IRQ = *h.irqs.at(i)
	case RecordGoID:
		r.GoID = *h.goIDs.at(i)
	}
	return nil
}

// nextInOrder is Next for a file that has its records in time order
// (the first pass saw none come after a later one): no window to wait
// in, each record goes out as it is read.
func (rs *Records) nextInOrder(r *Record) error {
	for rs.left > 0 {
		rec, err := rs.scan()
		if err != nil {
			return err
		}
		if convert(rec, r); r.Kind != 0 {
			return nil
		}
	}
	return io.EOF
}

// scan reads the next record of the file, of which rs.left are still
// to come: the file ends early if it has fewer now than the first pass
// read. A record the first pass dropped is nil.
func (rs *Records) scan() (trace.Record, error) {
	rec, err := rs.tr.Scan()
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	rs.left--
	rs.read++
	if err == nil && len(rs.drop) > 0 && rs.drop[0] == rs.read-1 {
		// Dropped by the first pass: nil converts to no record, which
		// the callers skip.
		rs.drop = rs.drop[1:]
		return nil, nil
	}
	return rec, err
}

// Close closes the file, if Records read one.
func (rs *Records) Close() error {
	if rs.f == nil {
		return nil
	}
	return rs.f.Close()
}

// queued is a record waiting in the reorder window, with its place in
// the file.
type queued struct {
	r   Record
	seq uint64
}

// reorder is a min-heap of records by time, then place in the file. It
// is typed rather than a container/heap, whose any boxes every record:
// that was 80% of the stream's allocations.
type reorder []queued

// less orders q[i] before q[j].
func (q reorder) less(i, j int) bool { return q.before(&q[i], &q[j]) }

// before orders a before b: by time, then place in the file.
func (reorder) before(a, b *queued) bool {
	ta, tb := a.r.Time(), b.r.Time()
	return ta < tb || ta == tb && a.seq < b.seq
}

// push appends a slot for a record, which the caller fills before
// calling fix.
func (q *reorder) push() *queued {
	*q = append(*q, queued{})
	return &(*q)[len(*q)-1]
}

// fix moves the record push appended (if any is out of place) up to its
// place in the heap.
func (q reorder) fix() {
	for i := len(q) - 1; i > 0; {
		parent := (i - 1) / 2
		if !q.less(i, parent) {
			break
		}
		q[i], q[parent] = q[parent], q[i]
		i = parent
	}
}

// pop moves the earliest record into r; q is not empty.
func (q *reorder) pop(r *Record) {
	h := *q
	r.Set(&h[0].r)
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && h.less(l, least) {
			least = l
		}
		if r < len(h) && h.less(r, least) {
			least = r
		}
		if least == i {
			break
		}
		h[i], h[least] = h[least], h[i]
		i = least
	}
	*q = h
}
