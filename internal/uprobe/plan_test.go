package uprobe

import (
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/arch/x86/x86asm"

	"trueprof/internal/symbolize"
	"trueprof/internal/testutil"
)

func TestGlob(t *testing.T) {
	for _, tt := range []struct {
		name, glob, s string
		want          bool
	}{
		{"literal", "main", "main", true},
		{"literal is anchored", "main", "main2", false},
		{"star", "f*b", "fib", true},
		{"star matches slash", "net/*.Serve", "net/http.(*Server).Serve", true},
		{"question", "f?b", "fib", true},
		{"question one char", "f?b", "fiib", false},
		{"class", "f[0-9]", "f7", true},
		{"class miss", "f[0-9]", "fx", false},
		{"negated class", "f[!0-9]", "fx", true},
		{"regexp metas are literal", "a.b+(c)", "a.b+(c)", true},
		{"dot is literal", "a.b", "axb", false},
		{"escape", `a\*`, "a*", true},
		{"escape no star", `a\*`, "ab", false},
		{"cxx", "ns::S::get*", "ns::S::get() const", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			re, err := globRegexp(tt.glob)
			if err != nil {
				t.Fatal(err)
			}
			if got := re.MatchString(tt.s); got != tt.want {
				t.Errorf("%q matches %q: %v, want %v", tt.glob, tt.s, got, tt.want)
			}
		})
	}
	if _, err := globRegexp("f[0-9"); err == nil {
		t.Error("unterminated class accepted")
	}
}

func TestSplitModule(t *testing.T) {
	for _, tt := range []struct{ in, mod, glob string }{
		{"main", "", "main"},
		{"prog:main", "prog", "main"},
		{"libc.so.6:mall*", "libc.so.6", "mall*"},
		{"ns::f", "", "ns::f"},
		{"prog:ns::f", "prog", "ns::f"},
		{"ns::S::f", "", "ns::S::f"},
	} {
		if mod, glob := SplitModule(tt.in); mod != tt.mod || glob != tt.glob {
			t.Errorf("SplitModule(%q) = %q, %q; want %q, %q", tt.in, mod, glob, tt.mod, tt.glob)
		}
	}
}

func TestWithoutParams(t *testing.T) {
	for in, want := range map[string]string{
		"ns::f(int)":                         "ns::f",
		"ns::S::get() const":                 "ns::S::get",
		"f(void (*)(int), char)":             "f",
		"main.(*T).Method":                   "main.(*T).Method",
		"main":                               "main",
		"std::vector<int>::push_back(int&&)": "std::vector<int>::push_back",
	} {
		if got := withoutParams(in); got != want {
			t.Errorf("withoutParams(%q) = %q, want %q", in, got, want)
		}
	}
}

// planFixture has functions whose names the patterns below select.
const planFixture = `#include <stdio.h>
int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
int fob(int n) { return n + 1; }
static int helper(int n) { return n * 2; }
int main(void) { printf("%d\n", fib(5) + fob(1) + helper(2)); return 0; }
`

func names(sites []Site) []string {
	var n []string
	for _, s := range sites {
		n = append(n, s.Function)
	}
	slices.Sort(n)
	return n
}

func TestPlanC(t *testing.T) {
	bin := testutil.BuildC(t, t.TempDir(), "planc", planFixture)
	syms, _ := symbolTable(t, bin)
	addr := map[string]uint64{}
	for _, s := range syms {
		addr[s.Name] = s.Value
	}
	for _, tt := range []struct {
		name     string
		patterns []string
		want     []string
		err      error
	}{
		{"glob", []string{"f?b"}, []string{"fib", "fob"}, nil},
		{"several", []string{"fib", "helper"}, []string{"fib", "helper"}, nil},
		{"module", []string{"planc:f?b"}, []string{"fib", "fob"}, nil},
		{"other module ignored", []string{"libc.so.6:f*", "main"}, []string{"main"}, nil},
		{"only other modules", []string{"libc.so.6:malloc"}, nil, ErrNoMatch},
		{"no match", []string{"nosuch*"}, nil, ErrNoMatch},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sites, err := Plan(bin, tt.patterns)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err %v, want %v", err, tt.err)
			}
			if got := names(sites); !slices.Equal(got, tt.want) {
				t.Errorf("functions %q, want %q", got, tt.want)
			}
			for _, s := range sites {
				// C without exceptions or longjmp: cheap return probes.
				if s.Start != addr[s.Function] || !s.Return || len(s.Exits) != 0 {
					t.Errorf("%s: %+v, want Start %#x and a uretprobe", s.Function, s, addr[s.Function])
				}
			}
		})
	}
}

// cxxFixture has overloads, a namespace and a const method.
const cxxFixture = `#include <cstdio>
namespace ns {
int add(int a, int b) { return a + b; }
double add(double a, double b) { return a + b; }
struct S {
	int v;
	int get() const { return v; }
};
}
int main() {
	ns::S s{3};
	std::printf("%d %f\n", ns::add(1, 2) + s.get(), ns::add(1.0, 2.0));
	return 0;
}
`

func TestPlanCXX(t *testing.T) {
	bin := testutil.BuildCXX(t, t.TempDir(), "cxx", cxxFixture, "-O1", "-fno-inline")
	for _, tt := range []struct {
		pattern string
		want    []string
	}{
		{"ns::add", []string{"ns::add(double, double)", "ns::add(int, int)"}},
		{"ns::add(int, int)", []string{"ns::add(int, int)"}},
		{"cxx:ns::S::get", []string{"ns::S::get() const"}},
		{"ns::*", []string{"ns::S::get() const", "ns::add(double, double)", "ns::add(int, int)"}},
	} {
		sites, err := Plan(bin, []string{tt.pattern})
		if err != nil {
			t.Errorf("%q: %v", tt.pattern, err)
			continue
		}
		if got := names(sites); !slices.Equal(got, tt.want) {
			t.Errorf("%q: %q, want %q", tt.pattern, got, tt.want)
		}
	}
}

func TestPlanStripped(t *testing.T) {
	bin := testutil.BuildC(t, t.TempDir(), "stripped", planFixture, "-s")
	_, err := Plan(bin, []string{"fib"})
	if !errors.Is(err, ErrStripped) {
		t.Fatalf("err %v, want ErrStripped", err)
	}
	if msg := err.Error(); !strings.Contains(msg, bin) || !strings.Contains(msg, "stripped") {
		t.Errorf("message %q does not name the file and say it is stripped", msg)
	}
	// Patterns that name only another module do not concern it (a
	// distribution's stripped executable, probed in its libraries).
	if _, err := Plan(bin, []string{"liblzma.so.5:lzma_code"}); !errors.Is(err, ErrNoMatch) {
		t.Errorf("a pattern of another module on a stripped file: %v, want ErrNoMatch", err)
	}
}

func TestPlanGoStripped(t *testing.T) {
	// A stripped Go binary keeps .gopclntab, which names its functions.
	goTool := testutil.RequireCommand(t, "go")
	dir := t.TempDir()
	src := filepath.Join(dir, "g.go")
	if err := os.WriteFile(src, []byte("package main\n\n//go:noinline\nfunc work(n int) int { return n * 2 }\n\nfunc main() { println(work(3)) }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "g")
	build := exec.Command(goTool, "build", "-ldflags=-s", "-o", bin, src)
	build.Dir = dir
	build.Env = append(build.Environ(), "GOWORK=off", "GOFLAGS=", "GO111MODULE=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	sites, err := Plan(bin, []string{"main.work", "main.main"})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(sites); !slices.Equal(got, []string{"main.main", "main.work"}) {
		t.Errorf("functions %q", got)
	}
	for _, s := range sites {
		if s.Return || len(s.Exits) == 0 {
			t.Errorf("%s: %+v, want RET probes", s.Function, s)
		}
	}
}

func TestChooseEntry(t *testing.T) {
	for _, tt := range []struct {
		name     string
		code     []byte
		entry    int // offset
		emulated bool
		exits    []int
	}{
		{
			name: "go stack check then push",
			code: []byte{
				0x49, 0x3b, 0x66, 0x10, // 0: cmp 0x10(%r14),%rsp
				0x76, 0x0e, // 4: jbe 20
				0x55,             // 6: push %rbp
				0x48, 0x89, 0xe5, // 7: mov %rsp,%rbp
				0x48, 0x83, 0xec, 0x10, // 10: sub $0x10,%rsp
				0x48, 0x83, 0xc4, 0x10, // 14: add $0x10,%rsp
				0x5d,                         // 18: pop %rbp
				0xc3,                         // 19: ret
				0x48, 0x89, 0x44, 0x24, 0x08, // 20: mov %rax,0x8(%rsp)
				0xe8, 0x00, 0x10, 0x00, 0x00, // 25: call runtime.morestack
				0x48, 0x8b, 0x44, 0x24, 0x08, // 30: mov 0x8(%rsp),%rax
				0xeb, 0xdb, // 35: jmp 0
			},
			entry: 6, emulated: true, exits: []int{19},
		},
		{
			name:  "endbr64 then push",
			code:  []byte{0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3},
			entry: 4, emulated: true, exits: []int{9},
		},
		{
			name:  "frameless leaf",
			code:  []byte{0x8d, 0x04, 0x7f, 0xc3}, // lea (%rdi,%rdi,2),%eax; ret
			entry: 0, exits: []int{3},
		},
		{
			name: "branch back into the prologue",
			code: []byte{
				0xf3, 0x0f, 0x1e, 0xfa, // 0: endbr64
				0x55,             // 4: push %rbp
				0x48, 0x89, 0xe5, // 5: mov %rsp,%rbp
				0x5d,       // 8: pop %rbp
				0x75, 0xf9, // 9: jne 4
				0xc3, // 11: ret
			},
			entry: 0, exits: []int{11},
		},
		{
			name: "conditional branch that does not restart",
			code: []byte{
				0x49, 0x3b, 0x66, 0x10, // 0: cmp 0x10(%r14),%rsp
				0x76, 0x06, // 4: jbe 12
				0x55,             // 6: push %rbp
				0x48, 0x89, 0xe5, // 7: mov %rsp,%rbp
				0x5d, // 10: pop %rbp
				0xc3, // 11: ret
				0xc3, // 12: ret
			},
			// The jbe runs once per call and is emulated.
			entry: 4, emulated: true, exits: []int{11, 12},
		},
		{
			name: "stack moves before the push",
			code: []byte{
				0x48, 0x83, 0xec, 0x08, // 0: sub $8,%rsp
				0x55,                   // 4: push %rbp
				0x5d,                   // 5: pop %rbp
				0x48, 0x83, 0xc4, 0x08, // 6: add $8,%rsp
				0xc3, // 10: ret
			},
			// Exits are RET probes: the entry probe may follow the sub.
			entry: 4, emulated: true, exits: []int{10},
		},
		{
			name:  "tail call wrapper",
			code:  []byte{0xe9, 0x00, 0x01, 0x00, 0x00}, // jmp +0x100
			entry: 0, emulated: true, exits: []int{0},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ins, err := decodeFunc(tt.code)
			if err != nil {
				t.Fatal(err)
			}
			k := chooseEntry(ins, false)
			if ins[k].off != tt.entry || emulated(ins[k].raw) != tt.emulated {
				t.Errorf("entry at +%d (emulated %v), want +%d (%v)", ins[k].off, emulated(ins[k].raw), tt.entry, tt.emulated)
			}
			if got := exitInsns(ins, within(len(tt.code))); !slices.Equal(got, tt.exits) {
				t.Errorf("exits %v, want %v", got, tt.exits)
			}
		})
	}
}

func TestDecodeFuncErrors(t *testing.T) {
	// Trailing zero padding ends the function.
	ins, err := decodeFunc([]byte{0x55, 0x5d, 0xc3, 0x00})
	if err != nil || len(ins) != 3 {
		t.Errorf("padding: %d instructions, %v", len(ins), err)
	}
	// A truncated instruction is an error: a probe must never be placed
	// off an instruction boundary.
	if _, err := decodeFunc([]byte{0x55, 0x48, 0x89}); !errors.Is(err, errDecode) {
		t.Errorf("truncated: %v, want errDecode", err)
	}
}

func TestEmulated(t *testing.T) {
	for _, tt := range []struct {
		name string
		b    []byte
		want bool
	}{
		{"push rbp", []byte{0x55}, true},
		{"push r12", []byte{0x41, 0x54}, true},
		{"nop", []byte{0x90}, true},
		{"nopl", []byte{0x0f, 0x1f, 0x40, 0x00}, true},
		{"jmp", []byte{0xeb, 0x00}, true},
		{"call", []byte{0xe8, 0, 0, 0, 0}, true},
		{"jcc32", []byte{0x0f, 0x84, 0, 0, 0, 0}, true},
		{"endbr64", []byte{0xf3, 0x0f, 0x1e, 0xfa}, false},
		{"ret", []byte{0xc3}, false},
		{"pop rbp", []byte{0x5d}, false},
		{"mov rsp rbp", []byte{0x48, 0x89, 0xe5}, false},
		{"xchg r8 rax", []byte{0x41, 0x90}, false},
		{"empty", nil, false},
	} {
		if got := emulated(tt.b); got != tt.want {
			t.Errorf("%s: emulated %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestPlanCET checks that the entry probe of a function starting with
// endbr64 (gcc -fcf-protection), which the kernel single-steps, moves to
// the push %rbp after it.
func TestPlanCET(t *testing.T) {
	bin := testutil.BuildC(t, t.TempDir(), "cet", planFixture, "-fcf-protection=full")
	sites, err := Plan(bin, []string{"fib"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := sites[0]
	text := f.Section(".text")
	code := make([]byte, 5)
	if _, err := text.ReadAt(code, int64(s.Start-text.Addr)); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(code[:4], endbr64) || code[4] != 0x55 {
		t.Fatalf("built with -fcf-protection=full, fib starts % x, not endbr64; push", code)
	}
	if want := s.Start - text.Addr + text.Offset; s.StartOffset != want {
		t.Errorf("start offset %#x, want %#x (.text's address %#x at offset %#x)", s.StartOffset, want, text.Addr, text.Offset)
	}
	if want := s.StartOffset + 4; s.Entry != want || !s.Emulated {
		t.Errorf("entry %#x (emulated %v), want %#x, the push after endbr64", s.Entry, s.Emulated, want)
	}
}

// TestChooseEntryReturnProbe: with a return probe at the entry probe's
// address, the entry may move only while the return address is on top of
// the stack.
func TestChooseEntryReturnProbe(t *testing.T) {
	for _, tt := range []struct {
		name  string
		code  []byte
		entry int
	}{
		{"test-and-skip before the stack moves", []byte{
			0x48, 0x89, 0xf8, // 0: mov %rdi,%rax
			0x48, 0x85, 0xff, // 3: test %rdi,%rdi
			0x7e, 0x01, // 6: jle 9
			0x90, // 8: nop
			0xc3, // 9: ret
		}, 6},
		{"stack moves first", []byte{
			0x48, 0x83, 0xec, 0x08, // 0: sub $8,%rsp
			0x55,                   // 4: push %rbp
			0x5d,                   // 5: pop %rbp
			0x48, 0x83, 0xc4, 0x08, // 6: add $8,%rsp
			0xc3, // 10: ret
		}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ins, err := decodeFunc(tt.code)
			if err != nil {
				t.Fatal(err)
			}
			if k := chooseEntry(ins, true); ins[k].off != tt.entry {
				t.Errorf("entry at +%d, want +%d", ins[k].off, tt.entry)
			}
		})
	}
}

// TestPlanModulePatterns names a library by each of its names: the one it
// is linked by (a symlink named as its soname), its real file's, its
// soname, and globs; the same patterns apply when the real file is
// planned, as after dlopen, where the kernel names the mapping by it.
func TestPlanModulePatterns(t *testing.T) {
	dir := t.TempDir()
	real := testutil.BuildC(t, dir, "libplanmod.so.1.0.0", "int work(int n) { return n + 1; }\nint other(int n) { return n - 1; }\n",
		"-shared", "-fPIC", "-Wl,-soname,libplanmod.so.1")
	linked := filepath.Join(dir, "libplanmod.so.1")
	if err := os.Symlink(filepath.Base(real), linked); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		pattern string
		want    []string
	}{
		{"libplanmod.so.1:work", []string{"work"}},
		{"libplanmod.so.1.0.0:work", []string{"work"}},
		{"libplanmod*:work", []string{"work"}},
		{"*:work", []string{"work"}},
		{"lib[p]lanmod.so.?:o*", []string{"other"}},
		{"libplanmod.so:work", nil},
		{"libother*:work", nil},
	} {
		for _, path := range []string{linked, real} {
			t.Run(tt.pattern+" "+filepath.Base(path), func(t *testing.T) {
				sites, err := Plan(path, []string{tt.pattern})
				if tt.want == nil {
					if !errors.Is(err, ErrNoMatch) {
						t.Fatalf("err %v, want ErrNoMatch", err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if got := names(sites); !slices.Equal(got, tt.want) {
					t.Errorf("functions %q, want %q", got, tt.want)
				}
			})
		}
	}
	if _, err := Plan(real, []string{"libplan[mod:work"}); err == nil || errors.Is(err, ErrNoMatch) {
		t.Errorf("unterminated class in the module: err %v, want a pattern error", err)
	}
}

// TestPlanNotELF: a file that is not ELF is an error naming it (debug/elf's
// "bad magic number" does not).
func TestPlanNotELF(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sh")
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Plan(path, []string{"main"})
	if err == nil || !strings.HasPrefix(err.Error(), path+": ") {
		t.Errorf("err %v, want one naming %s", err, path)
	}
}

// TestPlanColdParts: a cold part (work.cold, testutil.ColdPartsC) is
// not probed as a function, however a pattern names it: its function's
// probes cover it. When the function exits by RET probes, the part's
// jumps back into it are no exits, and a return point that such a jump
// lands on is no place for a callee's exit probe.
func TestPlanColdParts(t *testing.T) {
	bin := testutil.BuildC(t, t.TempDir(), "cold", testutil.ColdPartsC, "-O2")
	f, err := symbolize.OpenFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var work, cold, leaf symbolize.Function
	for _, fn := range f.Functions() {
		switch fn.Name {
		case "work":
			work = fn
		case "work.cold":
			cold = fn
		case "leaf":
			leaf = fn
		}
	}
	if work.Name == "" || cold.Name == "" {
		t.Fatal("no work and work.cold in the fixture (gcc -O2 did not split work)")
	}

	sites, err := Plan(bin, []string{"work*", "leaf"})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(sites); !slices.Equal(got, []string{"leaf", "work"}) {
		t.Errorf("work* and leaf planned %q, want leaf and work", got)
	}
	sites, err = Plan(bin, []string{"work.cold"})
	var skip *SkipError
	if len(sites) != 0 || !errors.As(err, &skip) || !strings.Contains(err.Error(), "a cold part of work") {
		t.Errorf("work.cold alone: sites %q, err %v; want none, and why", names(sites), err)
	}

	// work's exits, were it probed by RET: its own RETs and the part's,
	// never a jump between them.
	decode := func(fn symbolize.Function) ([]insn, int) {
		code, err := f.Code(fn.Addr, fn.Size)
		if err != nil {
			t.Fatal(err)
		}
		ins, err := decodeFunc(code)
		if err != nil {
			t.Fatal(err)
		}
		return ins, len(code)
	}
	ins, size := decode(work)
	exits, err := exitAddrs(f, work, ins, size)
	if err != nil {
		t.Fatal(err)
	}
	coldIns, _ := decode(cold)
	back := map[uint64]bool{} // where the part's jumps land in work
	for _, in := range coldIns {
		target := cold.Addr + uint64(int64(in.target))
		if in.direct && in.op != x86asm.CALL && target-work.Addr < work.Size {
			back[target] = true
			if in.op == x86asm.JMP && slices.Contains(exits, cold.Addr+uint64(in.off)) {
				t.Errorf("work.cold's jump back to %#x is an exit of work", target)
			}
		}
	}
	if len(back) == 0 {
		t.Fatal("work.cold never jumps back into work: the fixture does not test what it should")
	}
	for _, in := range ins {
		if in.op == x86asm.RET && !slices.Contains(exits, work.Addr+uint64(in.off)) {
			t.Errorf("work's RET at %#x is not an exit (exits %#x)", work.Addr+uint64(in.off), exits)
		}
	}

	// The calls of leaf: the one in work.cold is work's, and the one in
	// work whose return point the part jumps to cannot take a probe there.
	idx := indexCalls(f)
	landed := false
	for _, r := range idx.calls[leaf.Addr] {
		if r.caller != work.Addr {
			t.Errorf("leaf called at %#x by %#x, want work (%#x)", r.call, r.caller, work.Addr)
		}
		if back[r.ret] {
			landed = true
			if r.retEmulated {
				t.Errorf("the return point %#x of leaf's call, where work.cold jumps, would take leaf's exit probe", r.ret)
			}
		}
	}
	if !landed {
		t.Error("work.cold jumps to no return point of a call of leaf: the fixture does not test what it should")
	}
}

// TestIndirectTailCalls: in a module that exits by RET probes, a jump
// through a function pointer variable, one through a register after the
// epilogue and one through a pointer loaded from an object leave their
// functions, and are exits; a jump table inside a function is not, nor
// are the .plt's jmp *GOT stubs that _init's guessed extent (a symbol
// without a size) runs into.
func TestIndirectTailCalls(t *testing.T) {
	bin := testutil.BuildCXX(t, t.TempDir(), "tails", testutil.TailCallsCXX, "-O2", "-g")
	f, err := symbolize.OpenFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string][]string{}
	for _, fn := range f.Functions() {
		code, err := f.Code(fn.Addr, fn.Size)
		if err != nil {
			continue
		}
		ins, err := decodeFunc(code)
		if err != nil {
			continue
		}
		for _, off := range indirectTailCalls(f, fn.Addr, ins) {
			i := slices.IndexFunc(ins, func(in insn) bool { return in.off == off })
			got[fn.Name] = append(got[fn.Name], x86asm.GNUSyntax(mustDecode(t, ins[i].raw), 0, nil))
		}
	}
	if len(got["via_slot"]) != 1 || !strings.Contains(got["via_slot"][0], "(%rip)") ||
		len(got["via_reg"]) != 1 || len(got["via_obj"]) != 1 || len(got) != 3 {
		t.Errorf("indirect tail calls %q, want via_slot's jmp through slot(%%rip), via_reg's and via_obj's", got)
	}
	sites, err := Plan(bin, []string{"via_*", "table"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sites {
		if s.Return || len(s.Calls) > 0 {
			t.Fatalf("%s: %+v, want RET probes: the module can host C++ unwinding", s.Function, s)
		}
		// table: its RETs; via_*: the tail call, at the end.
		if n := map[string]int{"via_slot": 1, "via_reg": 1, "via_obj": 1}[s.Function]; n > 0 && len(s.Exits) != n {
			t.Errorf("%s: exits %#x, want the tail call alone", s.Function, s.Exits)
		}
	}
}

// mustDecode decodes the one instruction b.
func mustDecode(t *testing.T, b []byte) x86asm.Inst {
	t.Helper()
	in, err := x86asm.Decode(b, 64)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// TestPlanGoSwitches: the Go runtime's functions that switch stacks or
// goroutines (runtime.mcall, morestack, the scheduler's) are never
// probed: none returns to its caller by its own RET. Those that return,
// however long they park (runtime.gopark), are.
func TestPlanGoSwitches(t *testing.T) {
	bin := testutil.BuildGo(t, t.TempDir(), "sleepers", testutil.SleepersGo)
	sites, err := Plan(bin, []string{"runtime.mcall", "runtime.morestack*", "runtime.schedule", "runtime.gopark"})
	var skip *SkipError
	if !errors.As(err, &skip) {
		t.Fatalf("err %v, want the switches skipped", err)
	}
	if got := names(sites); !slices.Equal(got, []string{"runtime.gopark"}) {
		t.Errorf("planned %q, want runtime.gopark alone", got)
	}
	var skipped []string
	for _, s := range skip.Skipped {
		if errors.Is(s.Reason, errGoSwitch) {
			skipped = append(skipped, strings.TrimSuffix(s.Function, ".abi0"))
		}
	}
	for _, fn := range []string{"runtime.mcall", "runtime.morestack", "runtime.morestack_noctxt", "runtime.schedule"} {
		if !slices.Contains(skipped, fn) {
			t.Errorf("%s not skipped as a switch (skipped: %q)", fn, skipped)
		}
	}
}
