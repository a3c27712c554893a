package calfit

import (
	"slices"
	"strings"

	"trueprof/internal/calltree"
	"trueprof/internal/trace"
)

// Prefix starts the names of the hook library's calibration functions
// (internal/hook/lib/calib.c): events of functions named so are
// calibration bursts, not the program's.
const Prefix = "trueprof_cal_"

// Roles of the calibration functions, by name.
const (
	burstName = "burst"  // one burst: Collector.Event reports its span
	shapeName = "shape_" // a shape's loop with probes
	refName   = "ref_"   // the same loop without probes
	emptyName = "empty"  // the shape whose intervals split the fitted sums
)

// IsCalibration reports whether function name is one of the hook
// library's calibration functions (a compiler's local alias included).
func IsCalibration(name string) bool { return strings.HasPrefix(name, Prefix) }

// Function is a calibration function's part in a burst, read from its
// name once (NewFunction): the recorder keeps one per function and
// passes it with every event, which then costs no string work (the
// name parsed at each of a burst's ~36,000 events was a fifth of
// Collector.Event's time).
type Function struct {
	burst bool // the burst itself
	loop  bool // a shape's loop (recorded or plain)
	ref   bool // a shape's plain loop
	leaf  bool
	// shape is a loop's shape name: its role without the loop's prefix.
	shape string
}

// NewFunction returns the part of the calibration function name
// (IsCalibration) in a burst.
func NewFunction(name string) *Function {
	role, _, _ := strings.Cut(strings.TrimPrefix(name, Prefix), ".") // ".localalias" and the like
	f := &Function{burst: role == burstName, loop: isLoop(role), ref: strings.HasPrefix(role, refName), leaf: role == "leaf"}
	if f.loop {
		f.shape = strings.TrimPrefix(strings.TrimPrefix(role, refName), shapeName)
	}
	return f
}

// Collector gathers the calibration bursts of a recording, event by
// event, and fits them at the end. The zero value is not usable; see
// NewCollector.
type Collector struct {
	threads map[[2]uint32]*burstThread
	// last is the thread of the latest event, lastKey its pid and tid:
	// a burst's events come from one thread, whose map lookup was a
	// third of Collector.Event's time.
	last      *burstThread
	lastKey   [2]uint32
	plain     map[string][]float64 // per shape: its plain runs' times
	runs      map[string][]Run     // per shape: its recorded runs
	order     []string             // shape names in first-seen order
	intervals [trace.Transitions][]uint64
	bursts    int
}

// burstThread is one thread's place in a burst.
type burstThread struct {
	burstStart uint64
	inBurst    bool
	stack      []*Function // open calibration functions, innermost last
	prevTime   uint64
	prevEntry  bool
	run        *Run // the shape loop being recorded, nil otherwise
	runName    string
	runRef     bool
	runStart   uint64
	damaged    bool // events were dropped during the run
}

// NewCollector returns an empty collector.
func NewCollector() *Collector {
	return &Collector{threads: map[[2]uint32]*burstThread{}, plain: map[string][]float64{}, runs: map[string][]Run{}}
}

// Active reports whether thread pid/tid is inside a burst: its adjust
// records belong to the collector (Adjust).
func (c *Collector) Active(pid, tid uint32) bool {
	t := c.threads[[2]uint32{pid, tid}]
	return t != nil && t.inBurst
}

// Event takes an entry (or exit) at time of the calibration function f
// on thread pid/tid. At the exit of a burst it returns done with the
// burst's span [start, time]: the time the thread spent calibrating,
// which the recorder removes from the thread as a profiler pause.
func (c *Collector) Event(pid, tid uint32, time uint64, entry bool, f *Function) (start uint64, done bool) {
	t := c.thread([2]uint32{pid, tid})
	if f.burst {
		if entry {
			*t = burstThread{inBurst: true, burstStart: time, prevTime: time, prevEntry: true, stack: t.stack[:0]}
			return 0, false
		}
		done = t.inBurst
		start = t.burstStart
		t.inBurst, t.run, t.stack = false, nil, t.stack[:0]
		if done {
			c.bursts++
		}
		return start, done
	}
	if !t.inBurst {
		return 0, false
	}
	// The interval since the thread's previous event.
	kind := calltree.Transition(t.prevEntry, entry)
	if r := t.run; r != nil && !t.runRef {
		r.Count[kind]++
		// The empty loop's intervals inside its calls (not the loop's
		// own, between them) are nothing but probe cost.
		if t.runName == emptyName && len(t.stack) > 0 && !t.stack[len(t.stack)-1].loop && time >= t.prevTime {
			c.intervals[kind] = append(c.intervals[kind], time-t.prevTime)
		}
	}
	t.prevTime, t.prevEntry = time, entry
	switch {
	case entry && f.loop:
		t.run, t.runRef, t.runStart, t.damaged = &Run{}, f.ref, time, false
		t.runName = f.shape
		t.stack = append(t.stack[:0], f)
	case entry:
		t.stack = append(t.stack, f)
		if t.run != nil {
			t.run.Calls++
			if f.leaf {
				t.run.Leaves++
			}
		}
	case f.loop:
		if r := t.run; r != nil && !t.damaged && time >= t.runStart {
			r.Raw += float64(time - t.runStart)
			c.keep(t.runName, t.runRef, *r)
		}
		t.run, t.stack = nil, t.stack[:0]
	default:
		if len(t.stack) > 0 {
			t.stack = t.stack[:len(t.stack)-1]
		}
	}
	return 0, false
}

// thread returns the burst state of thread key, created when new.
func (c *Collector) thread(key [2]uint32) *burstThread {
	if c.last != nil && c.lastKey == key {
		return c.last
	}
	t := c.threads[key]
	if t == nil {
		t = &burstThread{}
		c.threads[key] = t
	}
	c.last, c.lastKey = t, key
	return t
}

// Adjust takes a pause of the profiler (dur ns) or dropped events on a
// thread inside a burst: a pause is not the loop's time, and a run with
// drops is not used.
func (c *Collector) Adjust(pid, tid uint32, dur, dropped uint64) {
	t := c.threads[[2]uint32{pid, tid}]
	if t == nil || t.run == nil {
		return
	}
	t.run.Raw -= float64(dur)
	if dropped > 0 {
		t.damaged = true
	}
}

// isLoop reports whether role is a shape's loop (recorded or plain).
func isLoop(role string) bool {
	return strings.HasPrefix(role, shapeName) || strings.HasPrefix(role, refName)
}

// keep records a finished run of shape name, plain (ref) or recorded.
func (c *Collector) keep(name string, ref bool, r Run) {
	if _, seen := c.runs[name]; !seen {
		c.order = append(c.order, name)
		c.runs[name] = nil
	}
	if ref {
		c.plain[name] = append(c.plain[name], r.Raw)
	} else {
		c.runs[name] = append(c.runs[name], r)
	}
}

// Bursts returns how many complete bursts the collector saw.
func (c *Collector) Bursts() int { return c.bursts }

// Calibration fits the bursts seen and returns the calibration of mech
// (Judge), Source "in-run": nil when there was no complete burst. A bad
// fit is returned with Refused set and no overheads.
func (c *Collector) Calibration(mech string) *trace.Calibration {
	if c.bursts == 0 {
		return nil
	}
	var shapes []Shape
	for _, name := range c.order {
		if s, ok := FastShape(strings.ReplaceAll(name, "_", "-"), c.plain[name], c.runs[name]); ok && name != emptyName {
			shapes = append(shapes, s)
		}
	}
	slices.SortStableFunc(shapes, func(a, b Shape) int { return strings.Compare(a.Name, b.Name) })
	var median [trace.Transitions]float64
	n := len(c.intervals[0])
	for k := range c.intervals {
		median[k] = float64(Median(c.intervals[k]))
		n = min(n, len(c.intervals[k]))
	}
	cal, _ := Judge(mech, median, n, shapes)
	cal.Source = "in-run"
	cal.Bursts = c.bursts
	return cal
}
