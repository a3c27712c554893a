package hook

import (
	"bytes"
	"errors"
	"os"
	"slices"
	"sort"
	"time"
	_ "unsafe" // for go:linkname
)

// nanotime is the runtime's CLOCK_MONOTONIC reading through the vDSO
// (unix.ClockGettime makes a real system call, which would widen every
// calibration bracket to a few hundred ns).
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

// pairEvery is how often the recorder adds a (TSC, CLOCK_MONOTONIC) pair.
// Between pairs the conversion is linear; CLOCK_MONOTONIC is itself
// linear in the TSC between NTP frequency updates, so short segments keep
// the error in the tens of ns (TestClockConversion).
const pairEvery = 10 * time.Millisecond

// maxPairs bounds the history: records are drained within a few
// milliseconds, so only recent segments are ever needed.
const maxPairs = 512

// pair is one simultaneous reading of both clocks. slope is ns per tick
// from this pair to the next (for the last pair: that of the segment
// before it, used to extrapolate).
type pair struct {
	tsc, mono uint64
	slope     float64
}

// clock converts rdtsc values to CLOCK_MONOTONIC ns by piecewise-linear
// interpolation between pairs the recorder reads over time.
type clock struct {
	pairs []pair
	// The segment last used, which most records fall in: values in
	// [lo, lo+span) convert to base + (t-lo)*slope.
	lo, span, base uint64
	slope          float64
	added          uint64 // pairs added so far, to tell snapshots apart
}

// errTSC reports a TSC that does not advance at a sane rate.
var errTSC = errors.New("TSC not usable: implausible rate")

// newClock reads a pair, and the TSC's rate over rateWindow: update adds
// the second pair once the first is firstPairAfter old, so that a
// recording's start does not wait for it (a 2 ms sleep before the
// target could be launched). Until then the rate converts.
func newClock() (*clock, error) {
	first := samplePair()
	for uint64(nanotime())-first.mono < uint64(rateWindow) {
	}
	p := samplePair()
	if p.tsc <= first.tsc || p.mono <= first.mono {
		return nil, errTSC
	}
	first.slope = float64(p.mono-first.mono) / float64(p.tsc-first.tsc)
	if first.slope < 0.01 || first.slope > 100 { // 10 MHz .. 100 GHz
		return nil, errTSC
	}
	return &clock{pairs: []pair{first}}, nil
}

// rateWindow is how long newClock measures the TSC's first rate: a pair
// is within some 20 ns, so the rate within 2e-4, which converts values
// to within 400 ns until the second pair, firstPairAfter later.
const rateWindow = 100 * time.Microsecond

// firstPairAfter is when update adds the second pair; later ones come
// every pairEvery.
const firstPairAfter = 2 * time.Millisecond

// samplePair reads the TSC on both sides of CLOCK_MONOTONIC and keeps the
// tightest of a few tries; the TSC value is the bracket's midpoint.
func samplePair() pair {
	var best pair
	width := ^uint64(0)
	for i := 0; i < 5; i++ {
		t0 := rdtsc()
		m := nanotime()
		t1 := rdtsc()
		if t1 >= t0 && t1-t0 < width {
			width = t1 - t0
			best = pair{tsc: t0 + (t1-t0)/2, mono: uint64(m)}
		}
	}
	return best
}

// add appends p if both clocks advanced since the last pair.
func (c *clock) add(p pair) {
	n := len(c.pairs)
	last := &c.pairs[n-1]
	if p.tsc <= last.tsc || p.mono <= last.mono {
		return
	}
	last.slope = float64(p.mono-last.mono) / float64(p.tsc-last.tsc)
	p.slope = last.slope
	if n >= maxPairs {
		k := copy(c.pairs, c.pairs[n-maxPairs/2:])
		c.pairs = c.pairs[:k]
	}
	c.pairs = append(c.pairs, p)
	c.span = 0 // the cached segment may have changed: look it up again
	c.added++
}

// snapshot returns a copy of c that later pairs leave alone, for
// converting on another goroutine.
func (c *clock) snapshot() *clock {
	return &clock{pairs: slices.Clone(c.pairs), added: c.added}
}

// update adds a pair when the last one is pairEvery old (the second
// pair: firstPairAfter).
func (c *clock) update() {
	every := pairEvery
	if len(c.pairs) == 1 {
		every = firstPairAfter
	}
	if uint64(nanotime())-c.pairs[len(c.pairs)-1].mono >= uint64(every) {
		c.add(samplePair())
	}
}

// mono converts TSC value t. The common case is small enough to inline.
func (c *clock) mono(t uint64) uint64 {
	if d := t - c.lo; d < c.span {
		return c.base + uint64(int64(float64(int64(d))*c.slope))
	}
	return c.monoSeg(t)
}

// monoSeg converts t in the segment it falls in, and caches that segment
// (when t is before the first pair: the first segment, extrapolated
// backwards).
func (c *clock) monoSeg(t uint64) uint64 {
	ps := c.pairs
	i := sort.Search(len(ps), func(j int) bool { return ps[j].tsc > t }) - 1
	if i < 0 {
		p := ps[0]
		return uint64(int64(p.mono) - int64(float64(int64(p.tsc-t))*p.slope))
	}
	p := ps[i]
	c.lo, c.base, c.slope = p.tsc, p.mono, p.slope
	c.span = 1 << 62 // the last pair's segment is open-ended
	if i+1 < len(ps) {
		c.span = ps[i+1].tsc - p.tsc
	}
	return c.base + uint64(int64(float64(int64(t-c.lo))*c.slope))
}

// ticks converts a duration to TSC ticks at the latest rate.
func (c *clock) ticks(d time.Duration) uint64 {
	return uint64(float64(d) / c.pairs[len(c.pairs)-1].slope)
}

// tscUsable reports whether records can be timed with rdtsc: the kernel
// itself keeps time with the TSC (so it found it synchronized across
// CPUs and stable), and the CPU says its rate is constant and it keeps
// counting in sleep states.
func tscUsable() bool {
	if !haveRDTSC {
		return false
	}
	cs, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	if err != nil || string(bytes.TrimSpace(cs)) != "tsc" {
		return false
	}
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false
	}
	for _, line := range bytes.Split(info, []byte("\n")) {
		if bytes.HasPrefix(line, []byte("flags")) {
			f := bytes.Fields(line)
			return hasField(f, "constant_tsc") && hasField(f, "nonstop_tsc")
		}
	}
	return false
}

func hasField(fields [][]byte, name string) bool {
	for _, f := range fields {
		if string(f) == name {
			return true
		}
	}
	return false
}
