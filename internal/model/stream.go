package model

import (
	"errors"
	"io"
	"math"
	"os"
	"slices"

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
		r.Kind = RecordEvent
		r.Event.set(t)
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
	var e Event
	e.set(t)
	return e
}

// set makes e the trace's event t, field by field: building an Event
// and copying it whole, the copy's wide loads of the fields just stored
// waited on store forwarding (a fifth of the second pass's time).
func (e *Event) set(t *trace.Event) {
	e.Time, e.PID, e.TID, e.Entry, e.Function = t.Time, t.PID, t.TID, t.Kind == trace.EventEntry, t.Function
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
	// in trace nanoseconds: the most Records may have to wait for one.
	Lateness uint64

	// ahead are the earliest times of the time-ordered records from
	// each block of trace.SpanBlock of them on, to the end: what is
	// still to come as Records reads.
	ahead   []uint64
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
	} else {
		s.ahead = c.span.Mins
		for i := len(s.ahead) - 2; i >= 0; i-- {
			s.ahead[i] = min(s.ahead[i], s.ahead[i+1])
		}
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
	rs := &Records{f: f, tr: tr, left: s.records, drop: s.dropped, lag: s.Lateness, suffix: []uint64{math.MaxUint64}}
	if len(s.dropped) == 0 {
		rs.ahead = s.ahead
	}
	return rs, nil
}

// Records iterates over the time-ordered records of a trace (see
// Stream.Records). It holds at most the records of one reorder window,
// and the block of records it read last.
type Records struct {
	f    io.Closer
	tr   *trace.Reader
	left int    // records of the file still to read
	read int    // records of the file read
	drop []int  // the indexes of the records to drop, as the first pass did
	lag  uint64 // the reorder window
	// ahead is Stream.ahead (nil when the first pass dropped records,
	// which could number the passes' records differently): with the
	// block of records read last, staged, it says what is still to
	// come. A record goes once it is not after any of that, and most
	// go as they are read: a window as deep as the lateness held 2.7
	// million events of a dense recording, whose probe events come up
	// to 100 ms late at times.
	ahead []uint64
	seen  uint64 // the latest time read
	seq   uint64 // time-ordered records staged so far (read counts the file's)
	// stage is the block of records read last (trace.SpanBlock of them,
	// the others' fields in order in stageOthers), stage[pos:] still to
	// go on; suffix[i] is the earliest time of stage[i:].
	stage       []waiting
	stageOthers []Record
	suffix      []uint64
	pos, opos   int
	blocks      int // blocks staged
	// The records waiting in the window, in lanes, each in time order:
	// a trace interleaves a few sequences, each in order (the kernel's
	// records, each probe source's batches, written as the recorder
	// gets them), and each record joins the lane it extends. The next
	// record is the earliest of the lanes' heads. Only when more
	// sequences than maxLanes interleave (damage) do records wait in a
	// heap instead.
	lanes []lane
	q     reorder
	rec   Record
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

// first returns the lane whose head is the earliest waiting record, -1
// for the heap's, and that record's time; ok is false when none waits.
func (rs *Records) first() (from int, t uint64, ok bool) {
	var seq uint64
	for i := range rs.lanes {
		l := &rs.lanes[i]
		if l.recs.empty() {
			continue
		}
		if w := l.recs.front(); !ok || w.ev.Time < t || w.ev.Time == t && w.seq < seq {
			from, t, seq, ok = i, w.ev.Time, w.seq, true
		}
	}
	if len(rs.q) > 0 {
		if qt := rs.q[0].r.Time(); !ok || qt < t || qt == t && rs.q[0].seq < seq {
			from, t, ok = -1, qt, true
		}
	}
	return from, t, ok
}

// unread is at most the earliest time of the records after the
// stage: as the first pass saw it (ahead), and no more than the
// lateness before the latest read.
func (rs *Records) unread() uint64 {
	if rs.left == 0 {
		return math.MaxUint64
	}
	var b uint64
	if rs.seen > rs.lag {
		b = rs.seen - rs.lag
	}
	if rs.blocks < len(rs.ahead) {
		b = max(b, rs.ahead[rs.blocks])
	}
	return b
}

// stageNext appends a record to the stage for the caller to fill in
// place (see Event.set).
func (rs *Records) stageNext() *waiting {
	n := len(rs.stage)
	if n < cap(rs.stage) {
		rs.stage = rs.stage[:n+1]
	} else {
		rs.stage = append(rs.stage, waiting{})
	}
	return &rs.stage[n]
}

// fill stages the next block of records.
func (rs *Records) fill() error {
	rs.stage, rs.stageOthers, rs.pos, rs.opos = rs.stage[:0], rs.stageOthers[:0], 0, 0
	for len(rs.stage) < trace.SpanBlock && rs.left > 0 {
		rec, err := rs.scan()
		if err != nil {
			return err
		}
		var w *waiting
		if e, ok := rec.(*trace.Event); ok {
			w = rs.stageNext()
			w.kind = RecordEvent
			w.ev.set(e)
		} else {
			if convert(rec, &rs.rec); rs.rec.Kind == 0 {
				continue
			}
			w = rs.stageNext()
			w.kind, w.ev = rs.rec.Kind, Event{Time: rs.rec.Time()}
			rs.stageOthers = append(rs.stageOthers, rs.rec)
		}
		w.seq = rs.seq
		rs.seen = max(rs.seen, w.ev.Time)
		rs.seq++
	}
	rs.blocks++
	n := len(rs.stage)
	rs.suffix = slices.Grow(rs.suffix[:0], n+1)[:n+1]
	rs.suffix[n] = math.MaxUint64
	for i := n - 1; i >= 0; i-- {
		rs.suffix[i] = min(rs.stage[i].ev.Time, rs.suffix[i+1])
	}
	return nil
}

// add queues the staged record w (other: its fields, when not an
// event). It goes at the end of the lane whose last record is the
// latest not after it (so that the lanes stay as few as the sequences
// interleaved), an empty or new one if none is, or the heap once there
// are maxLanes.
func (rs *Records) add(w *waiting, other *Record) {
	t := w.ev.Time
	best, empty := -1, -1
	var bestTime uint64
	for i := range rs.lanes {
		l := &rs.lanes[i]
		if l.recs.empty() {
			if empty < 0 {
				empty = i
			}
		} else if l.last <= t && (best < 0 || l.last > bestTime) {
			best, bestTime = i, l.last
		}
	}
	if best < 0 {
		best = empty
	}
	if best < 0 && len(rs.lanes) < maxLanes {
		rs.lanes = append(rs.lanes, lane{})
		best = len(rs.lanes) - 1
	}
	if best >= 0 {
		rs.lanes[best].push(w, other)
		return
	}
	slot := rs.q.push()
	w.record(other, &slot.r)
	slot.seq = w.seq
	rs.q.fix()
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
		unread := rs.unread()
		from, t, ok := rs.first()
		if ok && t <= min(rs.suffix[rs.pos], unread) {
			// Nothing still to come is earlier (ties go in file order).
			if from < 0 {
				rs.q.pop(r)
			} else {
				rs.lanes[from].pop(r)
			}
			return nil
		}
		if rs.pos < len(rs.stage) {
			w := &rs.stage[rs.pos]
			var other *Record
			if w.kind != RecordEvent {
				other = &rs.stageOthers[rs.opos]
				rs.opos++
			}
			rs.pos++
			if (!ok || w.ev.Time < t) && w.ev.Time <= min(rs.suffix[rs.pos], unread) {
				// Before everything waiting and all still to come: out
				// as read, as most records go.
				w.record(other, r)
				return nil
			}
			rs.add(w, other)
			continue
		}
		if rs.left == 0 {
			return io.EOF
		}
		if err := rs.fill(); err != nil {
			return err
		}
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

// before orders a before b: by time, then place in the file.
func before(a, b *queued) bool {
	ta, tb := a.r.Time(), b.r.Time()
	return ta < tb || ta == tb && a.seq < b.seq
}

// maxLanes bounds the lanes of Records: a recording's trace interleaves
// a handful of ordered sequences; a damaged one can interleave a
// sequence per record, which a heap orders in log time where lanes
// would cost a pass over all of them per record.
const maxLanes = 16

// lane is records waiting in the reorder window in time order, then
// file order. An event, most records, waits in 40 bytes rather than a
// Record's 192; any other kind waits in others, in the same order.
type lane struct {
	recs   fifo[waiting]
	others fifo[Record]
	last   uint64 // the time of the record pushed last
}

// waiting is a record in a lane: the event itself, or for another kind
// its time alone (Event.Time), the record in the lane's others.
type waiting struct {
	ev   Event
	seq  uint64 // the place in the file
	kind RecordKind
}

// push appends w to the lane (other: its fields, when not an event).
func (l *lane) push(w *waiting, other *Record) {
	*l.recs.push() = *w
	if other != nil {
		l.others.push().Set(other)
	}
	l.last = w.ev.Time
}

// record fills r with w (other: its fields, when not an event).
func (w *waiting) record(other *Record, r *Record) {
	if w.kind == RecordEvent {
		r.Kind, r.Event = RecordEvent, w.ev
	} else {
		r.Set(other)
	}
}

// pop moves the lane's first record into r; l is not empty.
func (l *lane) pop(r *Record) {
	w := l.recs.front()
	if w.kind == RecordEvent {
		r.Kind, r.Event = RecordEvent, w.ev
	} else {
		r.Set(l.others.front())
		l.others.pop()
	}
	l.recs.pop()
}

// fifoBlock is the number of elements of a fifo's blocks.
const fifoBlock = 1024

// fifo is a queue in blocks of fifoBlock elements: it grows by blocks
// and reuses those it empties, never copying what it holds (a slice
// grown by append, or moved down as its head advances, copied hundreds
// of megabytes at once on a dense trace, and the collector's stop
// waited for each copy).
type fifo[T any] struct {
	blocks [][]T // blocks[0][head:], then the others in full
	head   int
	spare  [][]T // emptied blocks, for the next ones needed
}

func (f *fifo[T]) empty() bool { return len(f.blocks) == 0 }

// front is the first element; f is not empty.
func (f *fifo[T]) front() *T { return &f.blocks[0][f.head] }

// push appends an element, which the caller fills.
func (f *fifo[T]) push() *T {
	n := len(f.blocks)
	if n == 0 || len(f.blocks[n-1]) == fifoBlock {
		var b []T
		if k := len(f.spare); k > 0 {
			b, f.spare = f.spare[k-1], f.spare[:k-1]
		} else {
			b = make([]T, 0, fifoBlock)
		}
		f.blocks = append(f.blocks, b)
		n++
	}
	b := &f.blocks[n-1]
	*b = (*b)[:len(*b)+1]
	return &(*b)[len(*b)-1]
}

// pop removes the first element; f is not empty.
func (f *fifo[T]) pop() {
	f.head++
	if f.head < len(f.blocks[0]) {
		return
	}
	f.spare, f.head = append(f.spare, f.blocks[0][:0]), 0
	f.blocks[0] = nil
	f.blocks = f.blocks[1:]
	if len(f.blocks) == 0 {
		f.blocks = nil
	}
}

// reorder is a min-heap of records by time, then place in the file,
// for those no lane takes. It is typed rather than a container/heap,
// whose any boxes every record: that was 80% of the stream's
// allocations.
type reorder []queued

// less orders q[i] before q[j].
func (q reorder) less(i, j int) bool { return before(&q[i], &q[j]) }

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
