package report

import (
	"cmp"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"trueprof/internal/calltree"
)

// FlatFunction is one row of the flat view.
type FlatFunction struct {
	Name   string  `json:"name"`
	Module string  `json:"module"`
	Calls  *uint64 `json:"calls"` // always null: sampling does not count calls
	// Self counts the samples where the function is the leaf frame, Total
	// those where it is anywhere on the stack (once per sample, however
	// deep it recursed). The percentages are of their weight (data.weight:
	// samples, or periods when the event's period adapts).
	Self         calltree.Count `json:"self"`
	Total        calltree.Count `json:"total"`
	SelfPercent  float64        `json:"self_percent"`
	TotalPercent float64        `json:"total_percent"`
}

// FlatReport is the JSON form of the flat view.
type FlatReport struct {
	Header
	Functions []FlatFunction `json:"functions"`
}

// buildFlat lists calltree's functions (data.result) with their self
// and total samples, sorted by the weight of self, then of total (both
// largest first), then name and module.
func buildFlat(d *data, o Options) (FlatReport, error) {
	res, err := d.result()
	if err != nil {
		return FlatReport{}, err
	}
	r := FlatReport{Header: d.header("flat"), Functions: []FlatFunction{}}
	w := d.weight()
	for i := range res.Functions {
		f := &res.Functions[i]
		if hidden(w(count(f.Self)), w(d.Total), o) {
			continue
		}
		r.add(calltree.Func{Name: f.Name, Module: f.Module}, count(f.Self), count(f.Total), d.Total, w)
	}
	r.sort(w)
	return r, nil
}

// add adds the row of function f with self and total, weighed by w, of
// all samples.
func (r *FlatReport) add(f calltree.Func, self, total, all calltree.Count, w weight) {
	r.Functions = append(r.Functions, FlatFunction{
		Name:         f.Name,
		Module:       f.Module,
		Self:         self,
		Total:        total,
		SelfPercent:  percent(w(self), w(all)),
		TotalPercent: percent(w(total), w(all)),
	})
}

// sort orders the rows by the weight w of self, then of total (both
// largest first), then name and module.
func (r *FlatReport) sort(w weight) {
	slices.SortFunc(r.Functions, func(a, b FlatFunction) int {
		return cmp.Or(
			cmp.Compare(w(b.Self), w(a.Self)),
			cmp.Compare(w(b.Total), w(a.Total)),
			cmp.Compare(a.Name, b.Name),
			cmp.Compare(a.Module, b.Module))
	})
}

func flatText(w io.Writer, d *data, o Options) error {
	r, err := buildFlat(d, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%10s %7s %7s %10s %7s  %s\n", "SELF", "SELF%", "SUM%", "TOTAL", "TOTAL%", "FUNCTION (MODULE)")
	var sum uint64
	weigh := d.weight()
	for _, f := range r.Functions {
		sum += weigh(f.Self)
		fmt.Fprintf(w, "%10d %6.2f%% %6.2f%% %10d %6.2f%%  %s\n",
			f.Self.Samples, f.SelfPercent, percent(sum, weigh(d.Total)),
			f.Total.Samples, f.TotalPercent, funcLabel(calltree.Func{Name: f.Name, Module: f.Module}))
	}
	return nil
}

// funcLabel is how text views name a function: "name (module)" with the
// module's base name, which is what tells two same-named functions apart
// at a glance; JSON carries the full module path.
func funcLabel(f calltree.Func) string {
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
