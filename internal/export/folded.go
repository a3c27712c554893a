package export

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
)

// Folded writes the samples of p that pass f as folded stacks, one line per
// distinct stack: the process name, then the functions outermost first,
// separated by ';', a space and the sample count. Lines are sorted. Stacks
// that differ only by pid or tid are merged, as stackcollapse-perf.pl does
// for processes of the same name. Inlined functions are frames of their
// own. A ';' in a name would split a frame in two, so it becomes ':', and
// line breaks become spaces.
// FoldedStream does the same without holding the records.
func Folded(w io.Writer, p *model.Profile, f model.Filter) error {
	return folded(w, p, calltree.GroupSamples(p, f, false))
}

// FoldedStream is Folded for a trace read in two passes, as PPROFStream
// is PPROF's.
func FoldedStream(w io.Writer, s *model.Stream, f model.Filter) error {
	samples, err := streamSamples(s, f, false)
	if err != nil {
		return err
	}
	return folded(w, s.Profile, samples)
}

// folded writes samples, grouped from p's records, as folded stacks.
func folded(w io.Writer, p *model.Profile, samples *calltree.Samples) error {
	counts := map[string]uint64{}
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
		counts[b.String()] += s.Samples
	}
	lines := make([]string, 0, len(counts))
	for stack := range counts {
		lines = append(lines, stack)
	}
	slices.Sort(lines)
	bw := bufio.NewWriter(w)
	for _, stack := range lines {
		fmt.Fprintf(bw, "%s %d\n", stack, counts[stack])
	}
	return bw.Flush()
}

var foldedReplacer = strings.NewReplacer(";", ":", "\n", " ", "\r", " ")

func foldedFrame(name string) string { return foldedReplacer.Replace(name) }
