package export

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
)

// writePPROF exports p to a file in a test directory.
func writePPROF(t *testing.T, p *model.Profile) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "profile.pb.gz")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := PPROF(f, p, model.Filter{}); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestPPROFAggregationMatchesPprof is the oracle of the aggregations that
// pprof has too: the export of a profile aggregated by trueprof must give
// the rows `go tool pprof` gives with its option on the default export
// (--no-inlines: -noinlines; lines: -lines), and the rows of trueprof's
// own flat report. The fixtures have inlining at the leaf and in the
// middle of stacks, recursion through inlined frames and names defined by
// several modules.
func TestPPROFAggregationMatchesPprof(t *testing.T) {
	profiles := map[string]func() *model.Profile{"fixture": modeltest.Fixture}
	for i := range 3 {
		profiles[fmt.Sprint("random", i)] = func() *model.Profile { return modeltest.RandomSamples(rand.New(rand.NewPCG(5, uint64(i)))) }
	}
	aggregations := []struct {
		a      model.Aggregation
		option []string
	}{
		{model.Aggregation{NoInlines: true}, []string{"-noinlines"}},
		{model.Aggregation{Granularity: model.Lines}, []string{"-lines"}},
		{model.Aggregation{Granularity: model.Lines, NoInlines: true}, []string{"-lines", "-noinlines"}},
	}
	for name, profile := range profiles {
		def := pprofTop(t, writePPROF(t, profile()), "-functions")
		for _, agg := range aggregations {
			t.Run(fmt.Sprint(name, "/", agg.a), func(t *testing.T) {
				want := pprofTop(t, writePPROF(t, profile()), agg.option...)
				p := profile()
				if err := p.Aggregate(agg.a); err != nil {
					t.Fatal(err)
				}
				got := pprofTop(t, writePPROF(t, p))
				same := fmt.Sprint(got) == fmt.Sprint(want)
				if agg.a.Granularity == model.Lines {
					// Where the module qualifier goes is all that differs.
					same = fmt.Sprint(unqualified(got)) == fmt.Sprint(unqualified(want))
				}
				if !same {
					t.Errorf("export aggregated by %s: pprof -top\n%v\nwant pprof %v on the default export:\n%v", agg.a, got, agg.option, want)
				}
				flat, _ := trueprofFlat(t, p, model.Filter{})
				if fmt.Sprint(flat) != fmt.Sprint(got) {
					t.Errorf("trueprof flat %v\npprof -top %v", flat, got)
				}
				if agg.a.NoInlines && fmt.Sprint(got) == fmt.Sprint(def) && hasInlines(profile()) {
					t.Errorf("--no-inlines changed nothing on a profile with inlined frames")
				}
			})
		}
	}
}

// moduleQualifier is the " (module)" the export adds to a name that
// several modules define: pprof -lines puts it after the function, where
// the export had it, trueprof's lines after the line.
var moduleQualifier = regexp.MustCompile(` \((/[^)]*|\[[^)]*\])\)`)

// unqualified returns the rows of pprof -top, names without module
// qualifiers, sorted.
func unqualified(rows map[string]flatRow) []string {
	var out []string
	for name, r := range rows {
		out = append(out, fmt.Sprintf("%s %d %d", moduleQualifier.ReplaceAllString(name, ""), r.self, r.total))
	}
	slices.Sort(out)
	return out
}

// hasInlines reports whether a location of p has inlined frames.
func hasInlines(p *model.Profile) bool {
	for _, l := range p.Locations {
		if len(l.Frames) > 1 {
			return true
		}
	}
	return false
}
