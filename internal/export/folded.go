package export

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
)

// ErrUnknownValue is returned by Folded and FoldedStream for a value
// that is not a sample type of the recording's pprof export; it is
// wrapped with the value and the valid ones.
var ErrUnknownValue = errors.New("unknown value")

// Folded writes p's data that pass f as folded stacks (flamegraph.pl's
// input: "a;b;c N"), one line per distinct stack: the process name, then
// the functions outermost first, separated by ';', a space and the
// value. Lines are sorted; lines whose value is 0 are left out. Stacks
// that differ only by pid or tid are merged, as stackcollapse-perf.pl
// does for processes of the same name. Inlined functions are frames of
// their own. A ';' in a name would split a frame in two, so it becomes
// ':', and line breaks become spaces.
//
// value names what N is, one of the sample types of the pprof export of
// the same recording. Of a sampling recording: "samples" or the sum of
// the periods ("cpu" for the clock events, else the event's name), the
// default for "" being the periods when they adapt (model.PeriodAdapts),
// else the samples. Of an instrumented recording, whose call paths are
// calltree's (see PPROF): "wall" (the default: self wall time,
// calibrated, in ns), "wall_raw", "calls", "cpu" when measured, and
// "samples" and the event's name when sampled alongside; the time
// outside the outermost traced calls is the process's own line. Any
// other value is an error wrapping ErrUnknownValue.
//
// FoldedStream does the same without holding the records.
func Folded(w io.Writer, p *model.Profile, f model.Filter, value string) error {
	return writeFolded(w, loadedSource(p), f, value)
}

// FoldedStream is Folded for a trace read in two passes, as PPROFStream
// is PPROF's.
func FoldedStream(w io.Writer, s *model.Stream, f model.Filter, value string) error {
	return writeFolded(w, streamSource(s), f, value)
}

// writeFolded writes src's data that pass f as folded stacks counting
// value.
func writeFolded(w io.Writer, src source, f model.Filter, value string) error {
	v, err := foldedValue(src.p, src.rec, value)
	if err != nil {
		return err
	}
	if v.tree != nil {
		r, err := src.tree(f)
		if err != nil {
			return err
		}
		return writeLines(w, foldedTree(r, *v.tree))
	}
	samples, err := src.samples(f, false)
	if err != nil {
		return err
	}
	return writeLines(w, foldedSamples(src.p, samples, v.period))
}

// foldedVal is what the lines of a folded export count: a sample type
// of the trees of an instrumented recording (tree), or the samples of
// a sampling recording, or the sum of their periods (period).
type foldedVal struct {
	tree   *treeValue
	period bool
}

// foldedValue returns the value named value of the folded export of p, a
// recording of kinds rec.
func foldedValue(p *model.Profile, rec recording, value string) (foldedVal, error) {
	var valid []string
	if rec.events {
		values := treeValues(p, rec)
		for i := range values {
			if values[i].typ.Type == cmp.Or(value, "wall") {
				return foldedVal{tree: &values[i]}, nil
			}
		}
		valid = treeTypes(values)
	} else {
		period := periodType(p).Type
		if value == "" && model.PeriodAdapts(p.Header) {
			value = period // as the reports weigh the samples
		}
		switch value {
		case "", "samples":
			return foldedVal{}, nil
		case period:
			return foldedVal{period: true}, nil
		}
		valid = []string{"samples", period}
	}
	return foldedVal{}, fmt.Errorf("export: %w %q for this recording (valid: %s)", ErrUnknownValue, value, strings.Join(valid, ", "))
}

// foldedSamples returns the folded lines of samples, grouped from p's
// records: their number, or the sum of their periods.
func foldedSamples(p *model.Profile, samples *calltree.Samples, period bool) map[string]float64 {
	lines := map[string]float64{}
	names := map[uint32]string{}
	var b strings.Builder
	for _, s := range samples.Stacks {
		name, ok := names[s.PID]
		if !ok {
			name = "[unknown]"
			if pr := p.Process(s.PID); pr != nil && pr.Name != "" {
				name = pr.Name
			}
			name = foldedFrame(name)
			names[s.PID] = name
		}
		b.Reset()
		b.WriteString(name)
		for _, fn := range s.Funcs {
			b.WriteByte(';')
			b.WriteString(foldedFrame(fn.Name))
		}
		if period {
			lines[b.String()] += float64(s.Period)
		} else {
			lines[b.String()] += float64(s.Samples)
		}
	}
	return lines
}

// writeLines writes folded lines, sorted, their values rounded so
// that they add up to the rounded total; a line rounded to 0 is left out.
func writeLines(w io.Writer, lines map[string]float64) error {
	stacks := make([]string, 0, len(lines))
	for stack := range lines {
		stacks = append(stacks, stack)
	}
	slices.Sort(stacks)
	bw := bufio.NewWriter(w)
	var r rounder
	for _, stack := range stacks {
		if n := r.next(lines[stack]); n != 0 {
			fmt.Fprintf(bw, "%s %d\n", stack, n)
		}
	}
	return bw.Flush()
}

var foldedReplacer = strings.NewReplacer(";", ":", "\n", " ", "\r", " ")

func foldedFrame(name string) string { return foldedReplacer.Replace(name) }
