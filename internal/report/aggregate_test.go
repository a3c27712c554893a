package report_test

import (
	"strings"
	"testing"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
	"trueprof/internal/report"
)

// aggregations are the non-default groupings of code the golden files
// cover: pprof's -noinlines and each other granularity.
var aggregations = []model.Aggregation{
	{NoInlines: true},
	{Granularity: model.Files},
	{Granularity: model.Lines},
	{Granularity: model.Addresses},
}

// shareFiles gives p's functions the files of a program split into a few
// sources (the fixtures give each function a file of its own, which would
// make files granularity show nothing new): the app's parser in
// src/parse.c, the rest of it in src/app.c, the db in src/db.c, and the
// libraries and the kernel no line information.
func shareFiles(p *model.Profile) *model.Profile {
	for i := range p.Locations {
		l := &p.Locations[i]
		for k := range l.Frames {
			f := &l.Frames[k]
			switch {
			case l.Module == modeltest.DefaultModule && (f.Function == "parse" || f.Function == "eval"):
				f.File = "src/parse.c"
			case l.Module == modeltest.DefaultModule:
				f.File = "src/app.c"
			case l.Module == "/usr/bin/db":
				f.File = "src/db.c"
			default:
				f.File, f.Line = "", 0
			}
		}
	}
	return p
}

// aggregated returns fixture's profile with shared files, aggregated by a.
func aggregated(t *testing.T, fixture func() *model.Profile, a model.Aggregation) *model.Profile {
	t.Helper()
	p := shareFiles(fixture())
	if err := p.Aggregate(a); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAggregationGolden(t *testing.T) {
	var opts []report.Options
	for _, view := range report.Views() {
		if view == "callflow" {
			continue // instrumented recordings only
		}
		for _, format := range report.Formats() {
			opts = append(opts, report.Options{View: view, Format: format})
		}
	}
	for _, a := range aggregations {
		runGolden(t, "", aggregated(t, modeltest.Fixture, a), opts)
	}
}

func TestInstrAggregationGolden(t *testing.T) {
	opts := []report.Options{
		{View: "flat", Format: "json"},
		{View: "flat", Format: "text"},
		{View: "tree", Format: "text"},
		{View: "callflow", Format: "text"},
		// A root names a function even when the entries are files.
		{View: "tree", Format: "text", Root: "compute"},
	}
	for _, a := range []model.Aggregation{{NoInlines: true}, {Granularity: model.Files}} {
		runGolden(t, "instr-", aggregated(t, modeltest.InstrFixture, a), opts)
	}
}

// TestNoInlinesSelf checks --no-inlines against the default on the
// fixture: a function's self share with its inlined code charged to it
// is its own plus that of every function inlined into it (in the
// fixture, compute's 10 samples plus inl_helper's 42, and sort's 0 plus
// cmp's 7), as perf, blind to inlining, reports it.
func TestNoInlinesSelf(t *testing.T) {
	self := func(p *model.Profile) map[calltree.Func]uint64 {
		var rep struct {
			Functions []struct {
				calltree.Func
				Self calltree.Count `json:"self"`
			} `json:"functions"`
		}
		writeJSON(t, p, report.Options{View: "flat"}, &rep)
		m := map[calltree.Func]uint64{}
		for _, f := range rep.Functions {
			m[f.Func] = f.Self.Samples
		}
		return m
	}
	def := self(modeltest.Fixture())
	p := modeltest.Fixture()
	if err := p.Aggregate(model.Aggregation{NoInlines: true}); err != nil {
		t.Fatal(err)
	}
	noInl := self(p)
	app, db := modeltest.DefaultModule, "/usr/bin/db"
	checks := []struct {
		fn   calltree.Func
		want uint64
	}{
		{calltree.Func{Name: "compute", Module: app}, def[calltree.Func{Name: "compute", Module: app}] + def[calltree.Func{Name: "inl_helper", Module: app}]},
		{calltree.Func{Name: "sort", Module: db}, def[calltree.Func{Name: "sort", Module: db}] + def[calltree.Func{Name: "cmp", Module: db}]},
		{calltree.Func{Name: "inl_helper", Module: app}, 0},
		{calltree.Func{Name: "cmp", Module: db}, 0},
	}
	for _, c := range checks {
		if got := noInl[c.fn]; got != c.want {
			t.Errorf("%s self = %d under --no-inlines, want %d", c.fn.Name, got, c.want)
		}
	}
	if noInl[checks[0].fn] != 52 {
		t.Errorf("compute self = %d, want 52 (the fixture changed?)", noInl[checks[0].fn])
	}
	var sum uint64
	for fn, n := range noInl {
		if strings.Contains(fn.Name, "inl_") {
			t.Errorf("inlined function %s is still an entry", fn.Name)
		}
		sum += n
	}
	if sum != 102 {
		t.Errorf("self samples sum to %d, want all 102", sum)
	}
}
