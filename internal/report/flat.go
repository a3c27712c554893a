package report

import (
	"cmp"
	"fmt"
	"io"
	"path/filepath"
	"slices"
)

// FlatFunction is one row of the flat view.
type FlatFunction struct {
	Name   string  `json:"name"`
	Module string  `json:"module"`
	Calls  *uint64 `json:"calls"` // always null: sampling does not count calls
	// Self counts the samples where the function is the leaf frame, Total
	// those where it is anywhere on the stack (once per sample, however
	// deep it recursed).
	Self         Metrics `json:"self"`
	Total        Metrics `json:"total"`
	SelfPercent  float64 `json:"self_percent"`
	TotalPercent float64 `json:"total_percent"`
}

// FlatReport is the JSON form of the flat view.
type FlatReport struct {
	Header
	Functions []FlatFunction `json:"functions"`
}

// buildFlat computes self and total per function, sorted by self, then
// total (both largest first), then name and module.
func buildFlat(d *data, o Options) FlatReport {
	type acc struct{ self, total Metrics }
	funcs := map[Func]*acc{}
	get := func(f Func) *acc {
		a := funcs[f]
		if a == nil {
			a = &acc{}
			funcs[f] = a
		}
		return a
	}
	// seen[f] == i+1 when f was already counted for stack i: a recursive
	// function adds to its total once per sample.
	seen := map[Func]int{}
	for i := range d.Stacks {
		s := &d.Stacks[i]
		for _, f := range s.Funcs {
			if seen[f] == i+1 {
				continue
			}
			seen[f] = i + 1
			get(f).total.Add(s.Count)
		}
		get(s.Funcs[len(s.Funcs)-1]).self.Add(s.Count)
	}

	r := FlatReport{Header: d.header("flat"), Functions: []FlatFunction{}}
	for f, a := range funcs {
		if hidden(a.self.Samples, d.Total.Samples, o) {
			continue
		}
		r.Functions = append(r.Functions, FlatFunction{
			Name:         f.Name,
			Module:       f.Module,
			Self:         a.self,
			Total:        a.total,
			SelfPercent:  percent(a.self.Samples, d.Total.Samples),
			TotalPercent: percent(a.total.Samples, d.Total.Samples),
		})
	}
	slices.SortFunc(r.Functions, func(a, b FlatFunction) int {
		return cmp.Or(
			cmp.Compare(b.Self.Samples, a.Self.Samples),
			cmp.Compare(b.Total.Samples, a.Total.Samples),
			cmp.Compare(a.Name, b.Name),
			cmp.Compare(a.Module, b.Module))
	})
	return r
}

func flatText(w io.Writer, d *data, o Options) error {
	r := buildFlat(d, o)
	fmt.Fprintf(w, "%10s %7s %7s %10s %7s  %s\n", "SELF", "SELF%", "SUM%", "TOTAL", "TOTAL%", "FUNCTION (MODULE)")
	var sum uint64
	for _, f := range r.Functions {
		sum += f.Self.Samples
		fmt.Fprintf(w, "%10d %6.2f%% %6.2f%% %10d %6.2f%%  %s\n",
			f.Self.Samples, f.SelfPercent, percent(sum, d.Total.Samples),
			f.Total.Samples, f.TotalPercent, funcLabel(Func{Name: f.Name, Module: f.Module}))
	}
	return nil
}

// funcLabel is how text views name a function: "name (module)" with the
// module's base name, which is what tells two same-named functions apart
// at a glance; JSON carries the full module path.
func funcLabel(f Func) string {
	if f.Module == "" {
		return f.Name
	}
	return fmt.Sprintf("%s (%s)", f.Name, filepath.Base(f.Module))
}

// moduleName is how a module is named in rows of its own: its path, or
// "[unknown]" for samples without a location.
func moduleName(m string) string {
	if m == "" {
		return "[unknown]"
	}
	return m
}
