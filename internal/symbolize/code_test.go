package symbolize

import (
	"bufio"
	"bytes"
	"cmp"
	"debug/elf"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"trueprof/internal/testutil"
)

// TestFunctionsAgreeWithNM: the functions of a C program have the
// addresses and sizes binutils nm gives, and FunctionAt finds each from
// any of its bytes but not past its end.
func TestFunctionsAgreeWithNM(t *testing.T) {
	path := cProg(t)
	f := openTest(t, path)
	syms := nm(t, path, false)
	for _, name := range []string{"main", "compute", "helper"} {
		want := nmLookup(t, syms, name)
		i := slices.IndexFunc(f.Functions(), func(fn Function) bool { return fn.Name == name })
		if i < 0 {
			t.Errorf("%s: not in Functions", name)
			continue
		}
		got := f.Functions()[i]
		if got.Addr != want.addr || got.Size != want.size || got.Global != (want.typ == 'T') {
			t.Errorf("%s: %+v, want nm's address %#x, size %#x, type %c", name, got, want.addr, want.size, want.typ)
		}
		for _, a := range []uint64{want.addr, want.addr + want.size/2, want.addr + want.size - 1} {
			if fn, ok := f.FunctionAt(a); !ok || fn.Name != name {
				t.Errorf("FunctionAt(%#x) = %+v, %v, want %s", a, fn, ok, name)
			}
		}
		if fn, ok := f.FunctionAt(want.addr + want.size); ok && fn.Name == name {
			t.Errorf("FunctionAt(%#x), just past %s: %s", want.addr+want.size, name, fn.Name)
		}
	}
	if !slices.IsSortedFunc(f.Functions(), func(a, b Function) int { return cmp.Compare(a.Addr, b.Addr) }) {
		t.Error("Functions are not sorted by address")
	}
}

// TestCodeAndFileOffset: the code of a function is the file's bytes at
// the offset its PT_LOAD header gives, and an address outside executable
// code has neither.
func TestCodeAndFileOffset(t *testing.T) {
	path := cProg(t)
	f := openTest(t, path)
	main := nmLookup(t, nm(t, path, false), "main")
	off, ok := f.FileOffset(main.addr)
	if want := fileOffset(t, path, main.addr); !ok || off != want {
		t.Fatalf("FileOffset(%#x) = %#x, %v; want %#x", main.addr, off, ok, want)
	}
	if back, ok := f.VAddr(off); !ok || back != main.addr {
		t.Errorf("VAddr(%#x) = %#x, %v; want %#x", off, back, ok, main.addr)
	}
	code, err := f.Code(main.addr, main.size)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(code, raw[off:off+main.size]) {
		t.Errorf("Code(main) differs from the file's bytes at offset %#x", off)
	}
	data := nmLookup(t, nm(t, path, false), "__data_start") // a data symbol
	if _, ok := f.FileOffset(data.addr); ok {
		t.Errorf("FileOffset of data at %#x: want none", data.addr)
	}
	if _, err := f.Code(data.addr, 8); err == nil {
		t.Errorf("Code of data at %#x: want ErrNoCode", data.addr)
	}
}

// objdumpCall matches a direct call or jump of objdump -d: "call 401140 <compute>".
var objdumpCall = regexp.MustCompile(`\s(?:call|jmp)\s+[0-9a-f]+ <([^>+]+)>$`)

// TestCallees: the direct callees of main are those objdump shows it
// calling or jumping to, in the order of their first call, without the
// PLT stubs (other modules' code) and main itself.
func TestCallees(t *testing.T) {
	path := cProg(t)
	requires(t, "objdump")
	out, err := exec.Command("objdump", "-d", "--no-show-raw-insn", "--disassemble=main", path).Output()
	if err != nil {
		t.Fatalf("objdump: %v", err)
	}
	var want []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := objdumpCall.FindStringSubmatch(sc.Text()); m != nil && !strings.Contains(m[1], "@") && m[1] != "main" && !slices.Contains(want, m[1]) {
			want = append(want, m[1])
		}
	}
	if !slices.Contains(want, "compute") || !slices.Contains(want, "helper") {
		t.Fatalf("objdump shows main calling %q: the fixture should call compute and helper", want)
	}
	f := openTest(t, path)
	main := nmLookup(t, nm(t, path, false), "main")
	var got []string
	for _, fn := range f.Callees(main.addr) {
		got = append(got, fn.Name)
	}
	if !slices.Equal(got, want) {
		t.Errorf("Callees(main) = %q, want objdump's %q", got, want)
	}
	if c := f.Callees(main.addr + 1); c != nil {
		t.Errorf("Callees inside main = %+v, want none: no function starts there", c)
	}
}

// TestImportsAndDynamic: a dynamically linked C program imports what nm
// -D lists as undefined and has an interpreter; a Go program (static)
// has neither, and its stripped copy's functions come from .gopclntab.
func TestImportsAndDynamic(t *testing.T) {
	path := cProg(t)
	f := openTest(t, path)
	out, err := exec.Command("nm", "-D", "--undefined-only", path).Output()
	if err != nil {
		t.Fatalf("nm: %v", err)
	}
	undefined := 0
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) != 2 {
			continue
		}
		name, _, _ := strings.Cut(fields[1], "@")
		undefined++
		if !f.Imports(name) {
			t.Errorf("Imports(%q) = false; nm -D lists it undefined", name)
		}
	}
	if undefined == 0 || f.Imports("compute") || !f.Dynamic() || f.Machine() != elf.EM_X86_64 {
		t.Errorf("%d undefined, Imports(compute) %v, Dynamic %v, machine %v: want imports, compute defined, dynamic, x86-64",
			undefined, f.Imports("compute"), f.Dynamic(), f.Machine())
	}

	// The interpreter is what readelf -l says the program requests.
	out, err = exec.Command("readelf", "-l", path).Output()
	if err != nil {
		t.Fatalf("readelf: %v", err)
	}
	_, rest, _ := strings.Cut(string(out), "[Requesting program interpreter: ")
	want, _, _ := strings.Cut(rest, "]")
	if got := f.Interpreter(); want == "" || got != want {
		t.Errorf("Interpreter() = %q, readelf -l requests %q", got, want)
	}

	g := openTest(t, goProg(t, true))
	if g.Dynamic() || g.Interpreter() != "" {
		t.Errorf("a Go program without cgo: Dynamic() = %v, Interpreter() = %q", g.Dynamic(), g.Interpreter())
	}
	i := slices.IndexFunc(g.Functions(), func(fn Function) bool { return fn.Name == "main.main" })
	if i < 0 {
		t.Fatalf("stripped Go program: no main.main among %d functions from .gopclntab", len(g.Functions()))
	}
	fn := g.Functions()[i]
	if at, ok := g.FunctionAt(fn.Addr + fn.Size - 1); !ok || at.Name != "main.main" {
		t.Errorf("FunctionAt(last byte of main.main) = %+v, %v", at, ok)
	}
	if frames, _ := g.Resolve(mustOffset(t, g, fn.Addr)); frames[len(frames)-1].Function != "main.main" {
		t.Errorf("Resolve(main.main) = %+v: Functions and Resolve disagree", frames)
	}
}

// mustOffset is f.FileOffset(vaddr), failing the test for code outside
// executable segments.
func mustOffset(t *testing.T, f *File, vaddr uint64) uint64 {
	t.Helper()
	off, ok := f.FileOffset(vaddr)
	if !ok {
		t.Fatalf("%#x: in no executable segment", vaddr)
	}
	return off
}

// openTest opens the ELF file at path for the test, closed at its end.
func openTest(t *testing.T, path string) *File {
	t.Helper()
	f, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestDynamicSymbolsAndAddressWords: of a shared library, the dynamic
// symbols are what nm -D lists (defined: exported, undefined: imported),
// its DT_NEEDED entries are objdump -p's, and the words AddressWords
// yields hold the address of a hidden function stored in a table (a
// relocation's addend) and the values of the exported functions.
func TestDynamicSymbolsAndAddressWords(t *testing.T) {
	requires(t, "objdump")
	lib := testutil.BuildC(t, t.TempDir(), "libdyn.so", `
#include <stdio.h>
__attribute__((visibility("hidden"))) int hidden_fn(int x) { return x + 1; }
int exported_fn(int x) { return hidden_fn(x) * 2; }
int (*table[])(int) = { hidden_fn };
void say(void) { puts("x"); }
`, "-shared", "-fPIC")
	f := openTest(t, lib)
	for _, s := range nm(t, lib, true) {
		if s.typ == 'T' && (!f.Exports(s.name) || !f.HasDynamicSymbol(func(n string) bool { return n == s.name })) {
			t.Errorf("nm -D lists %s defined: Exports %v", s.name, f.Exports(s.name))
		}
	}
	if f.Exports("hidden_fn") || f.Exports("puts") || !f.Exports("exported_fn") {
		t.Errorf("Exports: hidden_fn %v, puts %v, exported_fn %v; want false, false, true",
			f.Exports("hidden_fn"), f.Exports("puts"), f.Exports("exported_fn"))
	}
	if !f.HasDynamicSymbol(func(n string) bool { return n == "puts" }) || f.HasDynamicSymbol(func(n string) bool { return n == "hidden_fn" }) {
		t.Error("HasDynamicSymbol: want puts (imported), not hidden_fn")
	}
	out, err := exec.Command("objdump", "-p", lib).Output()
	if err != nil {
		t.Fatalf("objdump -p: %v", err)
	}
	var needed []string
	for _, line := range strings.Split(string(out), "\n") {
		if fs := strings.Fields(line); len(fs) == 2 && fs[0] == "NEEDED" {
			needed = append(needed, fs[1])
		}
	}
	if len(needed) == 0 || !slices.Equal(f.Needed(), needed) {
		t.Errorf("Needed() = %q, objdump -p lists %q", f.Needed(), needed)
	}
	syms := nm(t, lib, false)
	want := map[uint64]string{}
	for _, name := range []string{"hidden_fn", "exported_fn", "say"} {
		want[nmLookup(t, syms, name).addr] = name
	}
	if !f.AddressWords(func(v uint64) { delete(want, v) }) {
		t.Fatal("AddressWords: a section could not be read")
	}
	if len(want) != 0 {
		t.Errorf("AddressWords yields no word holding %v", want)
	}
}

// TestColdParentName: the names GCC and LLVM give a function's cold
// part, in C and demangled C++, name the function; clones that are
// functions of their own (.part, .constprop, .isra) do not.
func TestColdParentName(t *testing.T) {
	for _, tt := range []struct{ name, parent string }{
		{"main.cold", "main"},
		{"foo.cold.3", "foo"},
		{"foo.constprop.0.cold", "foo.constprop.0"},
		{Demangle("_Z4workl.cold"), "work(long)"},
		{Demangle("_ZN1A3fooEv.cold.12"), "A::foo()"},
		{Demangle("_Z4workl.constprop.0.cold"), "work(long) [clone .constprop.0]"},
		{"foo.part.0", ""},
		{"foo.isra.0", ""},
		{Demangle("_Z4workl.part.0"), ""},
		{"coldness", ""},
		{".cold", ""},
	} {
		got, ok := coldParentName(tt.name)
		if got != tt.parent || ok != (tt.parent != "") {
			t.Errorf("coldParentName(%q) = %q, %v; want %q", tt.name, got, ok, tt.parent)
		}
	}
}

// TestColdParts: gcc -O2 moves work's unlikely block into work.cold,
// which is work's, not a function of its own: its calls are work's
// callees, and it is no callee.
func TestColdParts(t *testing.T) {
	path := testutil.BuildC(t, t.TempDir(), "cold", testutil.ColdPartsC, "-O2")
	f := openTest(t, path)
	byName := map[string]Function{}
	for _, fn := range f.Functions() {
		byName[fn.Name] = fn
	}
	work, cold := byName["work"], byName["work.cold"]
	if work.Name == "" || cold.Name == "" {
		t.Fatalf("no work and work.cold in the fixture (gcc -O2 did not split work)")
	}
	if p, ok := f.ColdParent(cold.Addr); !ok || p != work {
		t.Errorf("ColdParent(work.cold) = %+v, %v; want work", p, ok)
	}
	if _, ok := f.ColdParent(work.Addr); ok {
		t.Error("work is a cold part")
	}
	if got := f.ColdParts(work.Addr); len(got) != 1 || got[0] != cold {
		t.Errorf("ColdParts(work) = %+v, want work.cold", got)
	}
	var callees []string
	for _, fn := range f.Callees(work.Addr) {
		callees = append(callees, fn.Name)
	}
	slices.Sort(callees)
	if !slices.Equal(callees, []string{"leaf", "report"}) {
		t.Errorf("Callees(work) = %q, want leaf and report (report is called from work.cold only)", callees)
	}
}
