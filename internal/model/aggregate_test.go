package model

import (
	"errors"
	"slices"
	"testing"
)

// aggregateLocations are the locations the aggregation tests regroup:
// Locations[0] is unused, as in a loaded profile.
func aggregateLocations() []Location {
	return []Location{
		{},
		// run with hash inlined into it, and probe inlined into hash, in
		// two files of a Go program.
		{Address: 0x401040, Module: "/usr/bin/app", Offset: 0x1040, Frames: []Frame{
			{Function: "probe", File: "/src/table.go", Line: 30},
			{Function: "hash", File: "/src/table.go", Line: 12},
			{Function: "run", File: "/src/main.go", Line: 7},
		}},
		// An instruction of run without inlining.
		{Address: 0x401080, Module: "/usr/bin/app", Offset: 0x1080, Frames: []Frame{
			{Function: "run", File: "/src/main.go", Line: 9},
		}},
		// A stripped library, and a file without line numbers.
		{Address: 0x7f0000002000, Module: "/lib/libc.so.6", Offset: 0x2000, Frames: []Frame{{Function: "memcpy"}}},
		{Address: 0x401100, Module: "/usr/bin/app", Offset: 0x1100, Frames: []Frame{{Function: "init", File: "/src/main.go"}}},
		// The kernel, and an address without a symbol.
		{Address: 0xffffffff81000000, Module: "[kernel.kallsyms]", Offset: 0xffffffff81000000, Frames: []Frame{{Function: "do_syscall_64"}}},
		{Address: 0x1234, Module: "", Offset: 0x1234, Frames: []Frame{{Function: "+0x1234"}}},
	}
}

func TestAggregate(t *testing.T) {
	// names lists each location's frame names, innermost first.
	tests := []struct {
		name  string
		a     Aggregation
		names [][]string
		lines [][]int // each location's frame lines; nil: as recorded
	}{
		{"default", Aggregation{}, [][]string{
			nil, {"probe", "hash", "run"}, {"run"}, {"memcpy"}, {"init"}, {"do_syscall_64"}, {"+0x1234"}}, nil},
		{"no inlines", Aggregation{NoInlines: true}, [][]string{
			nil, {"run"}, {"run"}, {"memcpy"}, {"init"}, {"do_syscall_64"}, {"+0x1234"}},
			[][]int{nil, {7}, {9}, {0}, {0}, {0}, {0}}},
		{"files", Aggregation{Granularity: Files}, [][]string{
			// probe and hash are both table.go: one frame, hash's line.
			nil, {"/src/table.go", "/src/main.go"}, {"/src/main.go"}, {"[libc.so.6]"}, {"/src/main.go"}, {"[kernel.kallsyms]"}, {"[unknown]"}},
			[][]int{nil, {12, 7}, {9}, {0}, {0}, {0}, {0}}},
		{"files, no inlines", Aggregation{Granularity: Files, NoInlines: true}, [][]string{
			nil, {"/src/main.go"}, {"/src/main.go"}, {"[libc.so.6]"}, {"/src/main.go"}, {"[kernel.kallsyms]"}, {"[unknown]"}}, nil},
		{"lines", Aggregation{Granularity: Lines}, [][]string{
			nil, {"probe /src/table.go:30", "hash /src/table.go:12", "run /src/main.go:7"}, {"run /src/main.go:9"},
			{"memcpy"}, {"init /src/main.go"}, {"do_syscall_64"}, {"+0x1234"}}, nil},
		{"lines, no inlines", Aggregation{Granularity: Lines, NoInlines: true}, [][]string{
			nil, {"run /src/main.go:7"}, {"run /src/main.go:9"}, {"memcpy"}, {"init /src/main.go"}, {"do_syscall_64"}, {"+0x1234"}}, nil},
		{"addresses", Aggregation{Granularity: Addresses}, [][]string{
			nil, {"0x1040 probe /src/table.go:30", "0x1040 hash /src/table.go:12", "0x1040 run /src/main.go:7"}, {"0x1080 run /src/main.go:9"},
			{"0x2000 memcpy"}, {"0x1100 init /src/main.go"}, {"0xffffffff81000000 do_syscall_64"}, {"0x1234 +0x1234"}}, nil},
		{"addresses, no inlines", Aggregation{Granularity: Addresses, NoInlines: true}, [][]string{
			nil, {"0x1040 run /src/main.go:7"}, {"0x1080 run /src/main.go:9"}, {"0x2000 memcpy"}, {"0x1100 init /src/main.go"},
			{"0xffffffff81000000 do_syscall_64"}, {"0x1234 +0x1234"}}, nil},
	}
	symbols := []string{"", "run", "run", "memcpy", "init", "do_syscall_64", "+0x1234"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &Profile{Locations: aggregateLocations()}
			if err := p.Aggregate(tt.a); err != nil {
				t.Fatal(err)
			}
			if p.Aggregation != tt.a {
				t.Errorf("Aggregation = %v, want %v", p.Aggregation, tt.a)
			}
			orig := aggregateLocations()
			for i, l := range p.Locations {
				var names []string
				var lines []int
				for _, f := range l.Frames {
					names = append(names, f.Function)
					lines = append(lines, f.Line)
				}
				if !slices.Equal(names, tt.names[i]) {
					t.Errorf("location %d: frames %q, want %q", i, names, tt.names[i])
				}
				if tt.lines != nil && !slices.Equal(lines, tt.lines[i]) {
					t.Errorf("location %d: lines %v, want %v", i, lines, tt.lines[i])
				}
				if got := l.Symbol(); got != symbols[i] {
					t.Errorf("location %d: Symbol() = %q, want %q", i, got, symbols[i])
				}
				if l.Address != orig[i].Address || l.Module != orig[i].Module || l.Offset != orig[i].Offset {
					t.Errorf("location %d changed its address: %+v", i, l)
				}
			}
		})
	}
}

func TestAggregateTwice(t *testing.T) {
	p := &Profile{Locations: aggregateLocations()}
	files := Aggregation{Granularity: Files}
	if err := p.Aggregate(files); err != nil {
		t.Fatal(err)
	}
	// The same aggregation again is a no-op; another one is refused, as
	// the file names have replaced the function names it would need.
	if err := p.Aggregate(files); err != nil {
		t.Errorf("same aggregation again: %v", err)
	}
	if got := p.Locations[1].Frames[0].Function; got != "/src/table.go" {
		t.Errorf("after a second Aggregate: %q", got)
	}
	if err := p.Aggregate(Aggregation{Granularity: Lines}); err == nil {
		t.Error("a second, different aggregation was accepted")
	}
	if err := (&Profile{}).Aggregate(Aggregation{Granularity: Addresses + 1}); !errors.Is(err, ErrUnknownGranularity) {
		t.Errorf("bad granularity: %v", err)
	}
}

func TestParseGranularity(t *testing.T) {
	for _, g := range []Granularity{Functions, Files, Lines, Addresses} {
		got, err := ParseGranularity(g.String())
		if err != nil || got != g {
			t.Errorf("ParseGranularity(%q) = %v, %v", g.String(), got, err)
		}
	}
	for _, s := range []string{"", "function", "FILES", "filefunctions"} {
		if _, err := ParseGranularity(s); !errors.Is(err, ErrUnknownGranularity) {
			t.Errorf("ParseGranularity(%q): %v, want ErrUnknownGranularity", s, err)
		}
	}
	var g Granularity
	if err := g.Set("lines"); err != nil || g != Lines {
		t.Errorf("Set(lines): %v, %v", g, err)
	}
	if err := g.Set("bytes"); err == nil || g != Lines {
		t.Errorf("Set(bytes): %v, %v: want an error and no change", g, err)
	}
}
