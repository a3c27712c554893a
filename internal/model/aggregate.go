package model

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// Granularity is what the views tell apart in code, with the meanings of
// pprof's -functions, -files, -lines and -addresses. The zero value,
// Functions, is the default.
type Granularity uint8

const (
	// Functions tells functions apart: every sample in a function is
	// the function's, whatever its line.
	Functions Granularity = iota
	// Files tells source files apart: a file's functions are one entry,
	// named by the file (by "[module]" for code without line
	// information).
	Files
	// Lines tells source lines apart: an entry is a function at a line,
	// "function file:line".
	Lines
	// Addresses tells instructions apart: an entry is a function at an
	// instruction, "0xOFFSET function file:line", the offset being the
	// instruction's in its module (a file offset for files), so the same
	// code is one entry in every process that maps it.
	Addresses
)

var granularityNames = [...]string{Functions: "functions", Files: "files", Lines: "lines", Addresses: "addresses"}

// ErrUnknownGranularity is returned for a granularity that is not one of
// functions, files, lines and addresses.
var ErrUnknownGranularity = errors.New("unknown granularity")

// ParseGranularity returns the Granularity named s.
func ParseGranularity(s string) (Granularity, error) {
	for g, name := range granularityNames {
		if s == name {
			return Granularity(g), nil
		}
	}
	return 0, fmt.Errorf("%w %q: want functions, files, lines or addresses", ErrUnknownGranularity, s)
}

// String returns the granularity's name, as ParseGranularity reads it.
func (g Granularity) String() string {
	if int(g) < len(granularityNames) {
		return granularityNames[g]
	}
	return fmt.Sprintf("Granularity(%d)", uint8(g))
}

// Set sets g to the granularity named s: a Granularity is a flag.Value.
func (g *Granularity) Set(s string) error {
	v, err := ParseGranularity(s)
	if err != nil {
		return err
	}
	*g = v
	return nil
}

// Type names the flag's value type in command help.
func (g *Granularity) Type() string { return "granularity" }

// Aggregation is how code is grouped in every view, export and the web
// UI. The zero value is the default: functions, inlined functions apart
// from the functions they were inlined into (as pprof by default).
type Aggregation struct {
	Granularity Granularity
	// NoInlines charges inlined code to the function it was inlined into
	// (the physical function, a location's last frame), as pprof's
	// -noinlines and as perf, which does not see inlining, does.
	NoInlines bool
}

// String describes a: "functions", "lines, no inlines".
func (a Aggregation) String() string {
	s := a.Granularity.String()
	if a.NoInlines {
		s += ", no inlines"
	}
	return s
}

// Aggregate regroups p's code as a says, once, after loading: it rewrites
// every location's Frames so that each frame's Function names the entry
// the views count (a file, a function at a line, ...), drops inlined
// frames under NoInlines, and merges a location's adjacent frames that
// became the same entry (code of a file inlined into the same file).
// File and Line keep what was recorded, for the source views, and
// Location.Symbol the physical function's name. Stacks, samples, events
// and probes keep their location ids, so everything that reads frames
// (reports, exports, the instrumented analysis, the web UI) sees the new
// grouping and nothing else changes. The zero Aggregation leaves p as it
// is. p.Aggregation records what was applied; a profile is aggregated
// once: a second, different aggregation is an error, since the first one
// lost what the second would need.
func (p *Profile) Aggregate(a Aggregation) error {
	if int(a.Granularity) >= len(granularityNames) {
		return fmt.Errorf("%w %d", ErrUnknownGranularity, a.Granularity)
	}
	if a == p.Aggregation {
		return nil
	}
	if p.Aggregation != (Aggregation{}) {
		return fmt.Errorf("profile already aggregated by %s: cannot regroup it by %s", p.Aggregation, a)
	}
	for i := range p.Locations {
		l := &p.Locations[i]
		if len(l.Frames) == 0 {
			continue // Locations[0], unused
		}
		l.symbol = l.Frames[len(l.Frames)-1].Function
		frames := l.Frames
		if a.NoInlines {
			frames = frames[len(frames)-1:]
		}
		out := make([]Frame, 0, len(frames))
		for _, f := range frames { // innermost first
			f.Function = a.Granularity.entry(l, f)
			if n := len(out); n > 0 && out[n-1].Function == f.Function {
				// The same entry inlined into itself: one frame, the
				// outer one, whose line is where the code physically is.
				out[n-1] = f
				continue
			}
			out = append(out, f)
		}
		l.Frames = out
	}
	p.Aggregation = a
	return nil
}

// entry names what frame f of location l is counted under at g, as
// pprof's graph nodes name it: what is missing is left out.
func (g Granularity) entry(l *Location, f Frame) string {
	switch g {
	case Files:
		if f.File != "" {
			return f.File
		}
		return moduleEntry(l.Module)
	case Lines:
		return lineEntry(f)
	case Addresses:
		return fmt.Sprintf("%#x %s", l.Offset, lineEntry(f))
	}
	return f.Function
}

// lineEntry is "function file:line", less what f lacks.
func lineEntry(f Frame) string {
	switch {
	case f.File != "" && f.Line != 0:
		return fmt.Sprintf("%s %s:%d", f.Function, f.File, f.Line)
	case f.File != "":
		return f.Function + " " + f.File
	}
	return f.Function
}

// moduleEntry names the code of a module without line information at
// files granularity: "[libc.so.6]", or the pseudo module itself
// ("[kernel.kallsyms]").
func moduleEntry(module string) string {
	switch {
	case module == "":
		return "[unknown]"
	case strings.HasPrefix(module, "["):
		return module
	}
	return "[" + filepath.Base(module) + "]"
}

// Symbol returns the name of the physical function the location's code
// is in, as recorded: Frames' last Function, unless Profile.Aggregate
// renamed the frames (to a file, a line, ...). What names functions
// rather than entries (a --root, the probes placed) uses it.
func (l *Location) Symbol() string {
	if l.symbol != "" {
		return l.symbol
	}
	if n := len(l.Frames); n > 0 {
		return l.Frames[n-1].Function
	}
	return ""
}
