package uprobe

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"trueprof/internal/symbolize"
	"trueprof/internal/testutil"
)

// callSiteFixture's stepped and taken begin with a mov the kernel
// single-steps. Every call of stepped is a direct call: in both, each
// returns onto another call (emulated); in last, onto last's epilogue.
// taken's address is in data (fp).
const callSiteFixture = `#include <stdio.h>
#include <unistd.h>

static volatile long sink;
void stepped(void) { sink += sink * 3; }
void taken(void) { sink += sink * 5; }
void helper(void) { sink++; }
void (*volatile fp)(void) = taken;
void both(void) { stepped(); stepped(); helper(); }
void last(void) { helper(); stepped(); }

int main(void) {
	char c;
	if (read(0, &c, 1) < 0)
		return 1;
	for (int i = 0; i < 100; i++) {
		both();
		last();
		fp();
	}
	printf("%ld\n", sink);
	return 0;
}
`

// siteOf returns the site of fn in sites.
func siteOf(t *testing.T, sites []Site, fn string) Site {
	t.Helper()
	i := slices.IndexFunc(sites, func(s Site) bool { return s.Function == fn })
	if i < 0 {
		t.Fatalf("no site of %s in %+v", fn, sites)
	}
	return sites[i]
}

// TestPlanCallSites: a stepped function all of whose calls are known is
// probed on its calls; one whose address is taken, that is exported, or
// one of whose calls returns into the epilogue of a caller not probed
// keeps its stepped entry and return probe.
func TestPlanCallSites(t *testing.T) {
	dir := t.TempDir()
	bin := testutil.BuildC(t, dir, "callsites", callSiteFixture)
	code, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sites, err := Plan(bin, []string{"stepped", "taken", "both", "last"})
	if err != nil {
		t.Fatal(err)
	}
	s := siteOf(t, sites, "stepped")
	if s.Return || !s.Emulated || len(s.Calls) != 3 {
		t.Fatalf("stepped: %+v, want three call sites", s)
	}
	withCaller := 0
	for _, c := range s.Calls {
		if code[c.Call] != 0xe8 {
			t.Errorf("stepped: entry probe at %#x on byte %#x, want a call (0xe8)", c.Call, code[c.Call])
		}
		if c.WithCaller {
			withCaller++
			continue
		}
		// both's calls return onto the next call.
		if c.Return != c.Call+5 || code[c.Return] != 0xe8 {
			t.Errorf("stepped: exit probe at %#x (call at %#x) on byte %#x, want the next call", c.Return, c.Call, code[c.Return])
		}
	}
	if withCaller != 1 {
		t.Errorf("stepped: %d calls end with their caller, want 1 (last's): %+v", withCaller, s.Calls)
	}
	if s := siteOf(t, sites, "taken"); len(s.Calls) != 0 || !s.Return || s.Emulated {
		t.Errorf("taken, whose address is in data: %+v, want its stepped entry and a return probe", s)
	}
	for _, b := range siteOf(t, sites, "both").Calls {
		t.Errorf("both, whose entry is emulated, probed at its callers: %+v", b)
	}

	sites, err = Plan(bin, []string{"stepped", "both"})
	if err != nil {
		t.Fatal(err)
	}
	if s := siteOf(t, sites, "stepped"); len(s.Calls) != 0 || !s.Return {
		t.Errorf("stepped, last not probed: %+v, want its stepped entry (last's exit would not end its call)", s)
	}

	dyn := testutil.BuildC(t, dir, "callsitesdyn", callSiteFixture, "-rdynamic")
	sites, err = Plan(dyn, []string{"stepped", "both", "last"})
	if err != nil {
		t.Fatal(err)
	}
	if s := siteOf(t, sites, "stepped"); len(s.Calls) != 0 || !s.Return {
		t.Errorf("stepped, exported: %+v, want its stepped entry", s)
	}
}

// TestCallSiteEvents runs callSiteFixture under its planned probes: the
// events come in the order the calls ran, an exit and the next call's
// entry on one instruction (both's calls of stepped) in that order, and
// the call of stepped that last's epilogue follows has no exit of its
// own.
func TestCallSiteEvents(t *testing.T) {
	requireUprobes(t)
	bin := testutil.BuildC(t, t.TempDir(), "callsites", callSiteFixture)
	sites, err := Plan(bin, []string{"stepped", "taken", "both", "last"})
	if err != nil {
		t.Fatal(err)
	}
	if len(siteOf(t, sites, "stepped").Calls) == 0 {
		t.Fatal("stepped not probed at its callers")
	}
	set, run := launchPlanned(t, bin, sites)
	if out, err := run(); err != nil {
		t.Fatalf("%v (output %q)", err, out)
	}
	var got []string
	set.Read(func(e Event) {
		sign := "-"
		if e.Entry {
			sign = "+"
		}
		got = append(got, sign+sites[e.Site].Function)
	})
	if set.Lost() != 0 {
		t.Fatalf("%d events lost", set.Lost())
	}
	iteration := "+both +stepped -stepped +stepped -stepped -both +last +stepped -last +taken -taken"
	want := strings.TrimSpace(strings.Repeat(iteration+" ", 100))
	if g := strings.Join(got, " "); g != want {
		t.Errorf("events (%d):\n%.300s...\nwant 100 times:\n%s", len(got), g, iteration)
	}
}

// callSiteLongjmp: f leaves caller's loop by longjmp every other call,
// g returns; f's entry and g's are single-stepped (loads of sink).
const callSiteLongjmp = `#include <setjmp.h>
#include <stdio.h>
#include <unistd.h>

jmp_buf jb;
volatile long sink;
__attribute__((noinline)) void f(int x) { for (int i = 0; i < 1000; i++) sink += i; if (x) longjmp(jb, 1); }
__attribute__((noinline)) void g(void) { for (int i = 0; i < 1000; i++) sink += i; }
__attribute__((noinline)) void caller(void) {
	for (volatile int k = 0; k < 4; k++) {
		if (setjmp(jb) == 0) {
			f(k & 1);
			g();
		}
		g();
	}
}

int main(void) {
	char c;
	if (read(0, &c, 1) < 0)
		return 1;
	caller();
	printf("%ld\n", sink);
	return 0;
}
`

// TestCallSitesLongjmp: in a module that imports longjmp, a function
// that calls what may longjmp (f) keeps its own entry and return probe,
// whose frame the kernel drops when longjmp leaves it (the analysis
// repairs the exit it never sees).
func TestCallSitesLongjmp(t *testing.T) {
	bin := testutil.BuildC(t, t.TempDir(), "longjmp", callSiteLongjmp, "-O2", "-fno-optimize-sibling-calls")
	sites, err := Plan(bin, []string{"f", "g", "caller"})
	if err != nil {
		t.Fatal(err)
	}
	if s := siteOf(t, sites, "f"); len(s.Calls) != 0 || !s.Return {
		t.Errorf("f, which calls longjmp: %+v, want its own entry and a return probe", s)
	}
	requireUprobes(t)
	set, run := launchPlanned(t, bin, sites)
	if out, err := run(); err != nil {
		t.Fatalf("%v (output %q)", err, out)
	}
	n := entryCounts(set, sites)
	if n["f"] != 4 || n["g"] != 6 || n["caller"] != 1 {
		t.Errorf("entries %v, want f 4, g 6, caller 1", n)
	}
}

// TestCallSiteOnExit: f's call in h returns onto h's tail jump, a RET
// probe's instruction (h may pass an exception: its exits are probed on
// the instructions that leave it); f then keeps its stepped entry
// instead of sharing that offset, and the set attaches and records.
func TestCallSiteOnExit(t *testing.T) {
	dir := t.TempDir()
	bin := testutil.BuildCXX(t, dir, "tailjump", `#include <cstdio>
#include <stdexcept>
#include <unistd.h>
volatile long sink;
extern "C" __attribute__((noinline)) void f(void) { sink += sink * 3; }
extern "C" __attribute__((noinline)) void g(int x) { if (x > 5) throw std::runtime_error("boom"); }
extern "C" void h(int);
asm(".text\n.globl h\n.type h,@function\nh:\n nop\n call f\n jmp g\n.size h,.-h\n");
int main() {
	char c;
	if (read(0, &c, 1) < 0)
		return 1;
	h(1); h(2);
	std::printf("ok\n");
	return 0;
}
`, "-O2")
	sites, err := Plan(bin, []string{"f", "g", "h"})
	if err != nil {
		t.Fatal(err)
	}
	h := siteOf(t, sites, "h")
	for _, c := range siteOf(t, sites, "f").Calls {
		if slices.Contains(h.Exits, c.Call) || slices.Contains(h.Exits, c.Return) {
			t.Fatalf("f's call site %+v on h's exit probes %#x", c, h.Exits)
		}
	}
	requireUprobes(t)
	set, run := launchPlanned(t, bin, sites)
	if out, err := run(); err != nil {
		t.Fatalf("%v (output %q)", err, out)
	}
	n := entryCounts(set, sites)
	if n["f"] != 2 || n["h"] != 2 {
		t.Errorf("entries %v, want f 2, h 2", n)
	}
}

// entryCounts reads set's events: the entries of each function of sites.
func entryCounts(set *Set, sites []Site) map[string]int {
	n := map[string]int{}
	set.Read(func(e Event) {
		if e.Entry {
			n[sites[e.Site].Function]++
		}
	})
	return n
}

// TestPlanCallSitesTaken: a call or return point that a set placed
// earlier probes (Options.Taken) keeps the function on its stepped
// entry; offsets elsewhere change nothing.
func TestPlanCallSitesTaken(t *testing.T) {
	bin := testutil.BuildC(t, t.TempDir(), "callsites", callSiteFixture)
	patterns := []string{"stepped", "both", "last"}
	sites, err := Plan(bin, patterns)
	if err != nil {
		t.Fatal(err)
	}
	calls := siteOf(t, sites, "stepped").Calls
	if len(calls) == 0 {
		t.Fatal("stepped not probed at its callers")
	}
	for _, c := range calls {
		for _, off := range []uint64{c.Call, c.Return} {
			if off == 0 {
				continue // WithCaller: no return point
			}
			sites, err := PlanOptions(bin, patterns, Options{Taken: map[uint64]bool{off: true}})
			if err != nil {
				t.Fatal(err)
			}
			if s := siteOf(t, sites, "stepped"); len(s.Calls) != 0 || !s.Return {
				t.Errorf("offset %#x taken: stepped %+v, want its stepped entry", off, s)
			}
		}
	}
	sites, err = PlanOptions(bin, patterns, Options{Taken: map[uint64]bool{1: true}}) // in the ELF header
	if err != nil {
		t.Fatal(err)
	}
	if s := siteOf(t, sites, "stepped"); len(s.Calls) != len(calls) {
		t.Errorf("an offset no call uses taken: stepped %+v, want its %d call sites", s, len(calls))
	}
}

// storedPointerFixture's setup stores f's address with one instruction
// that has both a RIP-relative operand and an immediate (movq $f,
// hook(%rip) in a -no-pie build): five of f's six calls go through hook.
const storedPointerFixture = `#include <stdio.h>
volatile long sink;
__attribute__((noinline)) void f(void) { for (int i = 0; i < 1000; i++) sink += i; }
void (*volatile hook)(void);
__attribute__((noinline)) void setup(void) { hook = f; }
int main(void) { f(); setup(); for (int i = 0; i < 5; i++) hook(); printf("done\n"); return 0; }
`

// TestPlanStoredPointer: a function whose address an instruction's
// immediate stores through a RIP-relative operand (-fno-pie) is named, so Plan
// keeps it at its entry, and all six calls are counted.
func TestPlanStoredPointer(t *testing.T) {
	bin := testutil.BuildC(t, t.TempDir(), "storedptr", storedPointerFixture,
		"-O2", "-fomit-frame-pointer", "-momit-leaf-frame-pointer", "-fno-pie", "-no-pie")
	sites, err := Plan(bin, []string{"f"})
	if err != nil {
		t.Fatal(err)
	}
	if s := siteOf(t, sites, "f"); len(s.Calls) != 0 {
		t.Fatalf("f, stored by movq $f, hook(%%rip): probed at its calls %+v, want at its entry", s.Calls)
	}
	requireUprobes(t)
	out, n, err := runPlanned(t, bin, sites)
	if err != nil || out != "done" {
		t.Fatalf("the program under its planned probes: %v (output %q)", err, out)
	}
	if n["f"] != [2]int{6, 6} {
		t.Errorf("f: %v entries, exits, want 6, 6", n["f"])
	}
}

// chain returns n functions, each calling the next: the last calls
// outside them when leaky (an import: it may throw).
func chain(n int, leaky bool) (map[uint64]symbolize.Function, map[uint64][]uint64) {
	funcs := make(map[uint64]symbolize.Function, n)
	callees := make(map[uint64][]uint64, n)
	for i := range n {
		addr := uint64(0x1000 + 16*i)
		funcs[addr] = symbolize.Function{Addr: addr, Size: 16}
		if i+1 < n || leaky {
			callees[addr] = []uint64{addr + 16}
		}
	}
	return funcs, callees
}

// TestFindSafeChain: a chain of 100,000 calls is safe to its end, or
// unsafe from its end to its start when its last function calls an
// import, a function calling itself stays safe, and an opaque function
// makes its callers unsafe (BenchmarkFindSafe: linear time).
func TestFindSafeChain(t *testing.T) {
	const n = 100000
	funcs, callees := chain(n, false)
	callees[0x1000] = append(callees[0x1000], 0x1000) // recursion
	idx := &callIndex{safe: map[uint64]bool{}}
	idx.findSafe(funcs, callees, nil)
	if len(idx.safe) != n {
		t.Errorf("closed chain: %d of %d functions safe", len(idx.safe), n)
	}
	funcs, callees = chain(n, true)
	idx = &callIndex{safe: map[uint64]bool{}}
	idx.findSafe(funcs, callees, nil)
	if len(idx.safe) != 0 {
		t.Errorf("chain ending in an import: %d functions safe, want 0", len(idx.safe))
	}
	funcs, callees = chain(n, false)
	mid := uint64(0x1000 + 16*(n/2))
	idx = &callIndex{safe: map[uint64]bool{}}
	idx.findSafe(funcs, callees, map[uint64]bool{mid: true})
	if len(idx.safe) != n/2-1 || idx.safe[mid] || !idx.safe[mid+16] || idx.safe[mid-16] {
		t.Errorf("chain with an opaque function in its middle: %d functions safe, want the %d after it", len(idx.safe), n/2-1)
	}
}

// BenchmarkFindSafe times findSafe on chains of calls ending in an
// import, the case a fixpoint rescan made quadratic.
func BenchmarkFindSafe(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		funcs, callees := chain(n, true)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for b.Loop() {
				idx := &callIndex{safe: map[uint64]bool{}}
				idx.findSafe(funcs, callees, nil)
			}
		})
	}
}

// TestIndexHugeSymbols: two function symbols of size 2^63, whose sizes
// summed would wrap to nothing, leave the module unindexed (calls not
// probed at their callers) after bounded work, without a panic.
func TestIndexHugeSymbols(t *testing.T) {
	bin := testutil.BuildC(t, t.TempDir(), "huge", callSiteFixture)
	syms, symtab := symbolTable(t, bin)
	code, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	patched := 0
	for i, s := range syms {
		if s.Name == "helper" || s.Name == "taken" {
			// Symbols() leaves out the table's first, null entry; st_size
			// is at byte 16 of a 24-byte entry.
			binary.LittleEndian.PutUint64(code[symtab.Offset+uint64(i+1)*24+16:], 1<<63)
			patched++
		}
	}
	if patched != 2 {
		t.Fatalf("%d symbols patched, want 2", patched)
	}
	if err := os.WriteFile(bin, code, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := symbolize.OpenFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if idx := indexCalls(f); idx.complete || len(idx.calls) != 0 {
		t.Errorf("index of a module of 2^64 bytes of code: complete %v, %d functions' calls", idx.complete, len(idx.calls))
	}
	sites, err := Plan(bin, []string{"stepped"})
	if err != nil {
		t.Fatal(err)
	}
	if s := siteOf(t, sites, "stepped"); len(s.Calls) != 0 {
		t.Errorf("stepped in an unindexed module: %+v, want its entry", s)
	}
}

// symbolTable returns the .symtab symbols of the ELF file at path and
// their section.
func symbolTable(t *testing.T, path string) ([]elf.Symbol, *elf.Section) {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	syms, err := ef.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	return syms, ef.Section(".symtab")
}

// landingFixture has a function, hot, whose call of leaf returns to a
// nop (an instruction the kernel emulates), and a cold part, hot.cold,
// that jumps to that nop without calling leaf, in assembly so that the
// layout does not depend on the compiler.
const landingFixture = `
volatile long sink;
__attribute__((noinline)) void leaf(void) { sink++; }
__asm__(
	".text\n"
	".globl hot\n"
	".type hot, @function\n"
	"hot:\n"
	"	push %rbp\n"
	"	mov %rsp, %rbp\n"
	"	test %rdi, %rdi\n"
	"	jnz hot.cold\n"
	"	call leaf\n"
	".Lhot_ret:\n"
	"	nop\n"
	"	pop %rbp\n"
	"	ret\n"
	".size hot, .-hot\n"
	".type hot.cold, @function\n"
	"hot.cold:\n"
	"	jmp .Lhot_ret\n"
	".size hot.cold, .-hot.cold\n");
void hot(long);
int main(int argc, char **argv) { hot(argc > 1); hot(0); return 0; }
`

// TestIndexCallsLandings: a return point that a jump from another
// function lands on (a cold part's jump back) is reached without the
// call returning, so a callee's exit probe cannot go there, emulated or
// not; without that jump, the same nop takes it.
func TestIndexCallsLandings(t *testing.T) {
	bin := testutil.BuildC(t, t.TempDir(), "landing", landingFixture)
	f, err := symbolize.OpenFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	addr := map[string]uint64{}
	for _, fn := range f.Functions() {
		addr[fn.Name] = fn.Addr
	}
	if p, ok := f.ColdParent(addr["hot.cold"]); !ok || p.Name != "hot" {
		t.Fatalf("hot.cold's function: %+v, %v", p, ok)
	}
	refs := indexCalls(f).calls[addr["leaf"]]
	i := slices.IndexFunc(refs, func(r callRef) bool { return r.caller == addr["hot"] })
	if i < 0 {
		t.Fatalf("no call of leaf in hot: %+v", refs)
	}
	if r := refs[i]; r.retEmulated {
		t.Errorf("leaf's return point %#x, where hot.cold jumps, may take its exit probe: %+v", r.ret, r)
	}
	if _, ok := indexCalls(f).callSites(f, addr["leaf"], func(uint64) bool { return false }, nil); ok {
		t.Error("leaf is probed at its callers, an exit probe where hot.cold jumps")
	}
}
