package model

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"

	"trueprof/internal/trace"
)

// ErrNoEnd is Profile.Err for a trace that is intact but has no End record:
// the recorder was killed, or is still writing.
var ErrNoEnd = errors.New("trace has no end record: the recorder was killed or is still running; showing what was written")

// Open loads the trace file at path.
func Open(path string) (*Profile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Load(f)
}

// Load reads a whole trace. A header that cannot be read is an error;
// damage later in the file is not: Load returns every intact record
// (before a truncation, and around skipped damaged chunks) with
// Profile.Err describing the damage and its byte offset.
func Load(r io.Reader) (*Profile, error) {
	tr, err := trace.NewReader(r)
	if err != nil {
		return nil, err
	}
	l := newLoader(tr, nil)
	l.read(tr)
	l.finish()
	return l.p, nil
}

// newLoader returns a loader of the trace tr reads. With tally nil it
// keeps every record (Load); otherwise it keeps the tables and only
// tallies the time-ordered records (Record) instead (OpenStream's first
// pass).
func newLoader(tr *trace.Reader, tally *tally) *loader {
	return &loader{
		p:       &Profile{Header: tr.Header(), Locations: []Location{{}}, Stacks: []StackNode{{}}},
		strings: map[uint32]string{0: ""},
		current: map[[2]uint32]*Thread{},
		tally:   tally,
	}
}

// read adds the records of tr up to its end or the first damage, which
// becomes Profile.Err, and counts them in l.records.
func (l *loader) read(tr *trace.Reader) {
	for {
		rec, err := tr.Scan()
		if err == io.EOF {
			break
		}
		if err != nil {
			l.p.Err = err
			break
		}
		l.damaged = tr.Damaged()
		if err := l.add(rec); err != nil {
			if l.damaged {
				// Its definition was lost in the damage: keep the rest.
				l.p.Inconsistent++
				l.dropped = append(l.dropped, l.records)
				l.records++
				continue
			}
			// A well-formed record that refers to something never defined:
			// the chunk holding it is corrupt.
			l.p.Err = &trace.FormatError{Offset: tr.Offset(), Err: fmt.Errorf("%w: %w", trace.ErrCorrupt, err)}
			break
		}
		l.records++
		if e, ok := rec.(*trace.Event); ok {
			l.skim(tr, e)
		}
	}
	if l.p.Err == nil && l.p.End == nil {
		l.p.Err = ErrNoEnd
	}
}

// skim takes the run of events that follows e, an event the loader
// took, as l.event would (trace.Reader.SkimEvents), when only their
// number and times are kept: the stream's first pass once it holds no
// records. A run stops where l.event has more to do: another thread, a
// function not yet defined, a time after the end of e's thread.
func (l *loader) skim(tr *trace.Reader, e *trace.Event) {
	c := l.tally
	if c == nil || c.held != nil {
		return
	}
	th := l.last // e's, which l.event looked up last
	until := th.End
	if until == 0 {
		until = math.MaxUint64
	}
	n := tr.SkimEvents(uint32(len(l.p.Locations)), until, &c.span)
	c.counts[RecordEvent] += uint64(n)
	l.records += n
}

// loader accumulates records into a Profile.
type loader struct {
	p       *Profile
	strings map[uint32]string
	current map[[2]uint32]*Thread // the latest incarnation of each pid, tid
	threads []*Thread             // every incarnation
	tally   *tally                // nil: the records go to p's slices (or keep)
	keep    func(*Record)         // Tables' receiver of the records
	records int                   // records read without damage
	// damaged is set once the reader has skipped damage; dropped are
	// the indexes, among the records read, of those dropped then as
	// inconsistent; padded the stack nodes that stand for lost ones
	// (their location is set by finish).
	damaged bool
	dropped []int
	padded  []int
	rec     Record
	// last is the incarnation thread returned last: records of one
	// thread come in runs, and this spares the map lookup.
	last *Thread
}

// appendRecord appends r to p's slice of its kind.
func (p *Profile) appendRecord(r *Record) {
	switch r.Kind {
	case RecordSample:
		p.Samples = append(p.Samples, r.Sample)
	case RecordEvent:
		p.Events = append(p.Events, r.Event)
	case RecordSwitch:
		p.Switches = append(p.Switches, r.Switch)
	case RecordAdjust:
		p.Adjusts = append(p.Adjusts, r.Adjust)
	case RecordIRQ:
		p.IRQs = append(p.IRQs, r.IRQ)
	case RecordGoID:
		p.GoIDs = append(p.GoIDs, r.GoID)
	}
}

// record tallies a time-ordered record of kind k at time t or, without
// a tally, converts it into l.rec and hands it to keep or else appends
// it to p's slice of its kind.
func (l *loader) record(k RecordKind, t uint64, rec trace.Record) {
	if l.tally != nil {
		l.tally.add(k, t)
		l.tally.hold(k, rec)
		return
	}
	r := &l.rec
	convert(rec, r)
	if l.keep != nil {
		l.keep(r)
		return
	}
	l.p.appendRecord(r)
}

// errCorrupt marks records that are well formed but refer to things the
// file never defined; the writer never produces them.
var errCorrupt = errors.New("inconsistent record")

// maxPadding bounds the definitions lost in damage that the loader
// stands placeholders for at once: an id further on is not believed.
const maxPadding = 1 << 20

// pad makes room for the definition of id in a table of n entries after
// damage, by adding placeholders through add: whether id may be defined
// (or referred to) now.
func (l *loader) pad(id uint32, n int, add func()) bool {
	if !l.damaged || int(id) <= n || int(id)-n > maxPadding {
		return int(id) == n
	}
	for range int(id) - n {
		add()
	}
	return true
}

// padLocation adds a placeholder location.
func (l *loader) padLocation() {
	l.p.Locations = append(l.p.Locations, Location{Module: DamagedName, Frames: []Frame{{Function: DamagedName}}})
}

// padStack adds a placeholder stack node, a root one whose location
// finish sets.
func (l *loader) padStack() {
	l.padded = append(l.padded, len(l.p.Stacks))
	l.p.Stacks = append(l.p.Stacks, StackNode{})
}

func (l *loader) str(id uint32) (string, error) {
	s, ok := l.strings[id]
	if !ok && l.damaged {
		return DamagedName, nil
	}
	if !ok {
		return "", fmt.Errorf("%w: undefined string id %d", errCorrupt, id)
	}
	return s, nil
}

// thread returns the incarnation of pid/tid that a record at time now
// belongs to. A record after the thread's exit, the kernel having reused
// the id, begins a new incarnation (its Fork record does so first).
func (l *loader) thread(pid, tid uint32, now uint64) *Thread {
	if t := l.last; t != nil && t.PID == pid && t.TID == tid && (t.End == 0 || now <= t.End) {
		return t // l.current's, which only thread and Fork change
	}
	k := [2]uint32{pid, tid}
	t := l.current[k]
	if t == nil || (t.End != 0 && now > t.End) {
		t = &Thread{PID: pid, TID: tid}
		if len(l.threads) > 0 && l.current[k] != nil {
			t.Start = now // a reused id without a Fork record: from here on
		}
		l.current[k] = t
		l.threads = append(l.threads, t)
	}
	l.last = t
	return t
}

func (l *loader) add(rec trace.Record) error {
	if e, ok := rec.(*trace.Event); ok {
		// Most records of an instrumented trace: one comparison rather
		// than the type switch's search.
		return l.event(e)
	}
	p := l.p
	switch r := rec.(type) {
	case *trace.String:
		l.strings[r.ID] = r.Text
	case *trace.Location:
		if !l.pad(r.ID, len(p.Locations), l.padLocation) {
			return fmt.Errorf("%w: location id %d out of sequence (want %d)", errCorrupt, r.ID, len(p.Locations))
		}
		mod, err := l.str(r.Module)
		if err != nil {
			return err
		}
		loc := Location{Address: r.Address, Module: mod, Offset: r.Offset}
		if loc.Frames, err = l.frames(mod, r.Offset, r.Lines); err != nil {
			return err
		}
		p.Locations = append(p.Locations, loc)
	case *trace.Rename:
		// Names learned after the location was written (JIT maps read
		// at the end): they hold for every use of the location.
		if r.ID == 0 || int(r.ID) >= len(p.Locations) {
			return fmt.Errorf("%w: rename of undefined location %d", errCorrupt, r.ID)
		}
		loc := &p.Locations[r.ID]
		frames, err := l.frames(loc.Module, loc.Offset, r.Lines)
		if err != nil {
			return err
		}
		loc.Frames = frames
	case *trace.StackNode:
		if !l.pad(r.ID, len(p.Stacks), l.padStack) || r.Parent >= r.ID || r.Location == 0 || int(r.Location) >= len(p.Locations) {
			return fmt.Errorf("%w: stack node %d (parent %d, location %d)", errCorrupt, r.ID, r.Parent, r.Location)
		}
		p.Stacks = append(p.Stacks, StackNode{Parent: r.Parent, Location: r.Location})
	case *trace.Sample:
		if int(r.Stack) >= len(p.Stacks) && !l.pad(r.Stack+1, len(p.Stacks), l.padStack) {
			return fmt.Errorf("%w: sample refers to undefined stack %d", errCorrupt, r.Stack)
		}
		if r.Flags&trace.SampleTruncated != 0 {
			p.Truncated++
			p.TruncatedBy[r.Reason()]++
		}
		l.record(RecordSample, r.Time, r)
		l.thread(r.PID, r.TID, r.Time)
	case *trace.Comm:
		name, err := l.str(r.Name)
		if err != nil {
			return err
		}
		t := l.thread(r.PID, r.TID, r.Time)
		if r.Exec && t.Start == 0 && len(l.p.Header.Command) > 0 {
			// A launched target is recorded from its exec (events are
			// enabled then): its first thread's life in the recording
			// begins there, not when the recorder started.
			t.Start = r.Time
		}
		if len(t.Names) == 0 || t.Names[len(t.Names)-1] != name {
			t.Names = append(t.Names, name)
		}
		t.Name = name
	case *trace.Fork:
		t := l.thread(r.PID, r.TID, r.Time)
		if t.End != 0 {
			// The id's previous thread exited at this very time.
			t = &Thread{PID: r.PID, TID: r.TID}
			l.current[[2]uint32{r.PID, r.TID}] = t
			l.threads = append(l.threads, t)
			l.last = t
		}
		if t.Start == 0 {
			t.Start = r.Time
		}
		// A new thread has its creator's name until it sets its own; the
		// kernel sends no COMM record for that.
		if parent := l.current[[2]uint32{r.PPID, r.PTID}]; parent != nil && len(t.Names) == 0 && parent.Name != "" {
			t.Name = parent.Name
			t.Names = append(t.Names, parent.Name)
		}
	case *trace.Exit:
		l.thread(r.PID, r.TID, r.Time).End = r.Time
	case *trace.Lost:
		switch r.Kind {
		case trace.LostKernel:
			p.Lost.Kernel += r.Count
		case trace.LostWrap:
			p.Lost.Wrap += r.Count
		case trace.LostSize:
			p.Lost.Size += r.Count
		default:
			p.Lost.Unparsed += r.Count
		}
	case *trace.Throttle:
		if !r.Unthrottle {
			p.Throttled++
		}
	case *trace.Pause:
		p.Pauses = append(p.Pauses, Pause{Time: r.Time, Duration: r.Duration, Dropped: r.Dropped})
	case *trace.Switch:
		l.record(RecordSwitch, r.Time, r)
	case *trace.Adjust:
		l.record(RecordAdjust, r.Time, r)
	case *trace.IRQ:
		l.record(RecordIRQ, r.Time, r)
	case *trace.GoID:
		l.record(RecordGoID, r.Time, r)
	case *trace.Probe:
		if r.Function == 0 || int(r.Function) >= len(p.Locations) {
			return fmt.Errorf("%w: probe for undefined location %d", errCorrupt, r.Function)
		}
		p.Probes = append(p.Probes, Probe{Time: r.Time, PID: r.PID, Function: r.Function, Address: r.Address, Mech: r.Mech, Stepped: r.Stepped, CallSite: r.CallSite, RetInsn: r.RetInsn})
	case *trace.Labels:
		lb := Labels{Time: r.Time, PID: r.PID, GoID: r.GoID, Truncated: r.Truncated}
		for _, pair := range r.Pairs {
			k, err := l.str(pair.Key)
			if err != nil {
				return err
			}
			v, err := l.str(pair.Value)
			if err != nil {
				return err
			}
			lb.Pairs = append(lb.Pairs, LabelPair{Key: k, Value: v})
		}
		p.Labels = append(p.Labels, lb)
	case *trace.Counter:
		// Written at the thread's exit or at the end, with the exit
		// record's time or later: the latest incarnation up to then.
		t := l.current[[2]uint32{r.PID, r.TID}]
		if t == nil {
			t = l.thread(r.PID, r.TID, r.Time)
		}
		if t.Counters == nil {
			t.Counters = map[trace.CounterKind]uint64{}
		}
		t.Counters[r.Kind] = r.Value
	case *trace.CalibrationRecord:
		// The in-run calibration, fitted when recording ended: it
		// replaces the header's (the recorder writes one only when it
		// measured in the run).
		p.Header.Calibration = r.Calibration
	case *trace.TreeThread, *trace.TreeNode, *trace.TreeMark:
		return l.addTree(rec)
	case *trace.End:
		reason, err := l.str(r.Reason)
		if err != nil {
			return err
		}
		p.End = &End{Time: r.Time, ExitCode: int(r.ExitCode), Reason: reason, Detached: r.Detached}
	}
	return nil
}

// event adds a function entry or exit.
func (l *loader) event(r *trace.Event) error {
	if r.Function == 0 || int(r.Function) >= len(l.p.Locations) && !l.pad(r.Function+1, len(l.p.Locations), l.padLocation) {
		return fmt.Errorf("%w: event for undefined location %d", errCorrupt, r.Function)
	}
	l.p.events = true
	l.record(RecordEvent, r.Time, r)
	l.thread(r.PID, r.TID, r.Time)
	return nil
}

// frames converts a location's lines to frames, naming a nameless one
// (and a location without lines) after its module and offset.
func (l *loader) frames(mod string, off uint64, lines []trace.Line) ([]Frame, error) {
	frames := make([]Frame, 0, max(len(lines), 1))
	for _, ln := range lines {
		fn, err := l.str(ln.Function)
		if err != nil {
			return nil, err
		}
		file, err := l.str(ln.File)
		if err != nil {
			return nil, err
		}
		if fn == "" {
			fn = AddressName(mod, off)
		}
		frames = append(frames, Frame{Function: fn, File: file, Line: int(ln.Line)})
	}
	if len(frames) == 0 {
		frames = append(frames, Frame{Function: AddressName(mod, off)})
	}
	return frames, nil
}

// AddressName names code that no symbol covers by where it is:
// "module+0xoffset", as perf does.
func AddressName(module string, offset uint64) string {
	return fmt.Sprintf("%s+%#x", module, offset)
}

// finish sorts threads and derives processes; wrap mode writes samples out
// of time order, so samples are sorted by time too.
func (l *loader) finish() {
	p := l.p
	if len(l.padded) > 0 {
		// The stack nodes lost in damage are one frame, a placeholder.
		loc := uint32(len(p.Locations))
		l.padLocation()
		for _, i := range l.padded {
			p.Stacks[i].Location = loc
		}
	}
	sort.SliceStable(p.Samples, func(i, j int) bool { return p.Samples[i].Time < p.Samples[j].Time })
	sort.SliceStable(p.Events, func(i, j int) bool { return p.Events[i].Time < p.Events[j].Time })
	sort.SliceStable(p.Switches, func(i, j int) bool { return p.Switches[i].Time < p.Switches[j].Time })
	sort.SliceStable(p.Probes, func(i, j int) bool { return p.Probes[i].Time < p.Probes[j].Time })
	sort.SliceStable(p.Adjusts, func(i, j int) bool { return p.Adjusts[i].Time < p.Adjusts[j].Time })
	sort.SliceStable(p.IRQs, func(i, j int) bool { return p.IRQs[i].Time < p.IRQs[j].Time })
	sort.SliceStable(p.GoIDs, func(i, j int) bool { return p.GoIDs[i].Time < p.GoIDs[j].Time })
	sort.SliceStable(p.Labels, func(i, j int) bool { return p.Labels[i].Time < p.Labels[j].Time })
	procs := map[uint32]*Process{}
	for _, t := range l.threads {
		p.Threads = append(p.Threads, t)
		pr := procs[t.PID]
		if pr == nil {
			pr = &Process{PID: t.PID}
			procs[t.PID] = pr
		}
		if (t.TID == t.PID && l.current[[2]uint32{t.PID, t.TID}] == t) || pr.Name == "" {
			if t.Name != "" {
				pr.Name = t.Name
			}
		}
	}
	slices.SortStableFunc(p.Threads, threadOrder)
	for _, pr := range procs {
		p.Processes = append(p.Processes, pr)
	}
	sort.Slice(p.Processes, func(i, j int) bool { return p.Processes[i].PID < p.Processes[j].PID })
}

// threadOrder is the order of a Profile's Threads: by PID, TID, then
// start time (a TID's incarnations in turn).
func threadOrder(a, b *Thread) int {
	return cmp.Or(cmp.Compare(a.PID, b.PID), cmp.Compare(a.TID, b.TID), cmp.Compare(a.Start, b.Start))
}
