package calltree

import (
	"slices"
	"testing"

	"trueprof/internal/model"
)

// tableProfile has a location with an inlined frame, two functions of
// one name in two modules, a frameless location and stacks through a
// location id the trace lacks.
func tableProfile() *model.Profile {
	return &model.Profile{
		Locations: []model.Location{
			{},
			{Module: "app", Frames: []model.Frame{{Function: "main"}}},
			{Module: "app", Frames: []model.Frame{{Function: "inlined"}, {Function: "work"}}},
			{Module: "lib.so", Frames: []model.Frame{{Function: "work"}}},
			{Module: "[jit]", Offset: 0x40},
		},
		Stacks: []model.StackNode{
			{},
			{Parent: 0, Location: 1}, // 1: main
			{Parent: 1, Location: 2}, // 2: main > work(inlined)
			{Parent: 2, Location: 3}, // 3: ... > lib.so work
			{Parent: 1, Location: 9}, // 4: main > a location the trace lacks
			{Parent: 1, Location: 4}, // 5: main > [jit]+0x40
		},
	}
}

func TestTable(t *testing.T) {
	tb := NewTable(tableProfile())
	name := func(ids []FuncID) []string {
		var out []string
		for _, id := range ids {
			f := tb.Func(id)
			out = append(out, f.Module+":"+f.Name)
		}
		return out
	}
	for _, tc := range []struct {
		stack uint32
		funcs []string
		leaf  string
	}{
		{0, []string{":[unknown]"}, ":[unknown]"},
		{1, []string{"app:main"}, "app:main"},
		{2, []string{"app:main", "app:work", "app:inlined"}, "app:work"},
		{3, []string{"app:main", "app:work", "app:inlined", "lib.so:work"}, "lib.so:work"},
		{4, []string{"app:main", ":[unknown]"}, ":[unknown]"},
		{5, []string{"app:main", "[jit]:[jit]+0x40"}, "[jit]:[jit]+0x40"},
		{99, []string{":[unknown]"}, ":[unknown]"}, // a stack id the trace lacks
	} {
		buf := []FuncID{42} // Stack appends
		got, leaf := tb.Stack(tc.stack, buf)
		if got[0] != 42 || !slices.Equal(name(got[1:]), tc.funcs) {
			t.Errorf("stack %d: %v, want %v", tc.stack, name(got[1:]), tc.funcs)
		}
		if n := name([]FuncID{leaf}); n[0] != tc.leaf {
			t.Errorf("stack %d: leaf %s, want %s", tc.stack, n[0], tc.leaf)
		}
	}
	// One id per distinct (name, module): work in app and in lib.so are two.
	if tb.Len() != 6 {
		t.Errorf("%d functions, want 6 (unknown, main, work, inlined, lib.so work, [jit]+0x40)", tb.Len())
	}
	if tb.LocFunc(2) != tb.LocFuncs(2)[0] || tb.Func(tb.LocFunc(2)) != (Func{Name: "work", Module: "app"}) {
		t.Errorf("LocFunc(2) = %v, want app's work", tb.Func(tb.LocFunc(2)))
	}
	if tb.Func(UnknownID) != Unknown || tb.Func(-1) != Unknown || tb.Func(FuncID(tb.Len())) != Unknown {
		t.Error("ids out of range are not Unknown")
	}
}

func TestFrames(t *testing.T) {
	p := tableProfile()
	for _, tc := range []struct {
		id     uint32
		name   string
		module string
	}{
		{0, "[unknown]", ""},
		{9, "[unknown]", ""},
		{2, "inlined", "app"},
		{4, "[jit]+0x40", "[jit]"},
	} {
		frames, module := Frames(p, tc.id)
		if len(frames) == 0 || frames[0].Function != tc.name || module != tc.module {
			t.Errorf("Frames(%d) = %v %q, want %s in %q", tc.id, frames, module, tc.name, tc.module)
		}
	}
}
