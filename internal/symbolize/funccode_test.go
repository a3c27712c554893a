package symbolize

import (
	"path/filepath"
	"testing"
)

// TestFunctionCode checks FunctionCode on prog.c at -O2: compute's
// declaration line, its range from the symbol table, and rows that tile
// the range and name only lines of prog.c inside compute and the inline
// functions it expands (square, sum_squares).
func TestFunctionCode(t *testing.T) {
	path := cProg(t)
	f, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sym := nmLookup(t, nm(t, path, false), "compute")
	fc, ok := f.FunctionCode(fileOffset(t, path, sym.addr+1))
	if !ok {
		t.Fatal("no function at compute")
	}
	decl := marker(t, "prog.c", "compute") - 2 // the line of "long compute(long n)"
	if fc.Name != "compute" || fc.Entry != sym.addr || fc.Lo != sym.addr || fc.Hi != sym.addr+sym.size {
		t.Errorf("compute: %s at %#x [%#x, %#x), want compute at [%#x, %#x)", fc.Name, fc.Entry, fc.Lo, fc.Hi, sym.addr, sym.addr+sym.size)
	}
	if filepath.Base(fc.DeclFile) != "prog.c" || fc.DeclLine != decl {
		t.Errorf("compute declared at %s:%d, want prog.c:%d", fc.DeclFile, fc.DeclLine, decl)
	}
	if len(fc.Rows) == 0 {
		t.Fatal("compute has no line rows")
	}
	lines := map[int]bool{}
	next := fc.Lo
	for _, r := range fc.Rows {
		if r.Lo != next || r.Hi <= r.Lo {
			t.Errorf("row %+v does not follow %#x", r, next)
		}
		next = r.Hi
		if filepath.Base(r.File) != "prog.c" || r.Line < marker(t, "prog.c", "square")-3 || r.Line > decl+4 {
			t.Errorf("row %+v outside compute, square and sum_squares", r)
		}
		lines[r.Line] = true
	}
	if next != fc.Hi {
		t.Errorf("rows end at %#x, want %#x", next, fc.Hi)
	}
	for _, l := range []int{decl + 3, marker(t, "prog.c", "square")} { // "return r + n * 3", inlined square
		if !lines[l] {
			t.Errorf("no row at line %d (rows %v)", l, fc.Rows)
		}
	}
	if _, ok := f.FunctionCode(0); ok {
		t.Error("a function at file offset 0 (the ELF header)")
	}
}
