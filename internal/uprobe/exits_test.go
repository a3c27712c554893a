package uprobe

import (
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"

	"trueprof/internal/testutil"
)

// throwFixture throws through deepest and middle to guarded; pure and
// callsPure throw nothing: pure calls nothing, callsPure only pure.
const throwFixture = `#include <cstdio>
#include <stdexcept>
#include <unistd.h>
static volatile long sink;
__attribute__((noinline)) void pure(int i) { sink += i; }
__attribute__((noinline)) void callsPure(int i) { pure(i); pure(i + 1); }
__attribute__((noinline)) void deepest(int i) { if (i % 3 == 0) throw std::runtime_error("x"); sink += i; }
__attribute__((noinline)) void middle(int i) { deepest(i); sink++; }
__attribute__((noinline)) void guarded(int i) { try { middle(i); } catch (const std::exception &) { sink--; } }
int main() {
	char c;
	if (read(0, &c, 1) < 0)
		return 1;
	for (int i = 0; i < 300; i++) {
		guarded(i);
		callsPure(i);
	}
	std::printf("%ld\n", sink);
	return 0;
}
`

// launchPlanned starts bin stopped before its exec, under sites' probes,
// and returns them and a function that lets it run to its end and
// returns its output and how it ended.
func launchPlanned(t *testing.T, bin string, sites []Site) (*Set, func() (string, error)) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", `read x; exec "$0"`, bin)
	in, out := testutil.StartGated(t, cmd, "")
	set, err := Attach(cmd.Process.Pid, bin, sites)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	return set, func() (string, error) {
		io.WriteString(in, "go\n")
		in.Close()
		err := cmd.Wait()
		return strings.TrimSpace(out.String()), err
	}
}

// runPlanned runs bin under sites' probes (launchPlanned) and returns
// its output, the events' counts and how it ended.
func runPlanned(t *testing.T, bin string, sites []Site) (string, counts, error) {
	t.Helper()
	set, run := launchPlanned(t, bin, sites)
	c := collect(t, set, sites)
	out, err := run()
	return out, c.finish(), err
}

// TestExitsPerFunction: in a module that throws C++ exceptions, the
// functions an exception can pass through exit by RET probes and the
// others by return probes; with a return probe on middle instead, the
// exception's unwinder meets the trampoline's address and the program is
// terminated, which the per-function choice avoids.
func TestExitsPerFunction(t *testing.T) {
	bin := testutil.BuildCXX(t, t.TempDir(), "throw", throwFixture, "-O1", "-fno-omit-frame-pointer")
	sites, err := Plan(bin, []string{"pure*", "callsPure*", "deepest*", "middle*", "guarded*"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sites {
		short := withoutParams(s.Function)
		if nothrow := short == "pure" || short == "callsPure"; nothrow != (s.Return || len(s.Calls) > 0) || nothrow == (len(s.Exits) > 0) {
			t.Errorf("%s: %+v: want a return probe (or call sites) %v, RET probes %v", s.Function, s, nothrow, !nothrow)
		}
	}
	requireUprobes(t)
	out, n, err := runPlanned(t, bin, sites)
	if err != nil {
		t.Fatalf("the program under its planned probes: %v (output %q)", err, out)
	}
	// 100 of 300 calls of middle and deepest end by the exception.
	want := counts{"pure(int)": {600, 600}, "callsPure(int)": {300, 300}, "guarded(int)": {300, 300},
		"middle(int)": {300, 200}, "deepest(int)": {300, 200}}
	for fn, w := range want {
		if n[fn] != w {
			t.Errorf("%s: %v entries, exits, want %v", fn, n[fn], w)
		}
	}

	for i := range sites {
		if withoutParams(sites[i].Function) == "middle" {
			sites[i].Exits, sites[i].Return = nil, true
		}
	}
	if out, _, err := runPlanned(t, bin, sites); err == nil {
		t.Errorf("with a return probe on middle the program ran to its end (output %q): the test shows nothing", out)
	}
}

// longjmpFixture leaves jumper and through by longjmp in a third of the
// calls of catcher.
const longjmpFixture = `#include <setjmp.h>
#include <stdio.h>
#include <unistd.h>
static jmp_buf env;
static volatile long sink;
__attribute__((noinline)) void jumper(int i) { if (i % 3 == 0) longjmp(env, 1); sink += i; }
__attribute__((noinline)) void through(int i) { jumper(i); sink++; }
__attribute__((noinline)) void catcher(int i) { if (setjmp(env) == 0) through(i); else sink--; }
int main(void) {
	char c;
	if (read(0, &c, 1) < 0)
		return 1;
	for (int i = 0; i < 300; i++)
		catcher(i);
	printf("%ld\n", sink);
	return 0;
}
`

// TestLongjmpReturnProbes: a module that calls longjmp keeps return
// probes, since the kernel drops those of the frames longjmp leaves: the
// program runs to its end with its own result, the frames left have no
// exit, and catcher, to which longjmp returns, has all of its exits.
func TestLongjmpReturnProbes(t *testing.T) {
	bin := testutil.BuildC(t, t.TempDir(), "longjmp", longjmpFixture)
	sites, err := Plan(bin, []string{"jumper", "through", "catcher"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sites {
		if len(s.Exits) > 0 {
			t.Errorf("%s: RET probes %#x, want a return probe", s.Function, s.Exits)
		}
	}
	requireUprobes(t)
	out, n, err := runPlanned(t, bin, sites)
	if err != nil {
		t.Fatalf("the program under return probes: %v (output %q)", err, out)
	}
	sink := 0
	for i := range 300 {
		if i%3 == 0 {
			sink--
		} else {
			sink += i + 1
		}
	}
	if out != fmt.Sprint(sink) {
		t.Errorf("output %q, want %d", out, sink)
	}
	want := counts{"catcher": {300, 300}, "through": {300, 200}, "jumper": {300, 200}}
	for fn, w := range want {
		if n[fn] != w {
			t.Errorf("%s: %v entries, exits, want %v", fn, n[fn], w)
		}
	}
}

// vexFixture's g runs an AVX instruction (VEX-encoded, which x86asm does
// not decode) before calling thrower, which throws in two of three
// calls; opaque's code holds a byte sequence nothing decodes, on a path
// never run.
const vexFixture = `#include <cstdio>
#include <stdexcept>
__attribute__((noinline)) void thrower(int x) { if (x > 0) throw std::runtime_error("boom"); }
__attribute__((noinline)) void g(int x) { asm volatile("vzeroupper"); thrower(x); asm volatile("" ::: "memory"); }
__attribute__((noinline)) void opaque(int x) { if (x < -5) asm volatile(".byte 0xc4, 0xe0, 0x78, 0x77"); thrower(x); asm volatile("" ::: "memory"); }
int main() {
	int n = 0;
	for (int i = 0; i < 3; i++) {
		try { g(i); } catch (const std::exception &) { n++; }
		try { opaque(i - 3); } catch (const std::exception &) { n++; }
	}
	std::printf("caught %d\n", n);
	return 0;
}
`

// TestExitsVEX: an exception passes through g, whose code holds an AVX
// instruction: g exits by RET probes, the program catches both
// exceptions, and g's counts are exact. A function whose code does not
// decode is not taken as one no exception passes (it would get a return
// probe): it is left unprobed with the reason.
func TestExitsVEX(t *testing.T) {
	bin := testutil.BuildCXX(t, t.TempDir(), "vex", vexFixture, "-O2")
	sites, err := Plan(bin, []string{"g*", "opaque*"})
	var skip *SkipError
	if !errors.As(err, &skip) || len(skip.Skipped) != 1 || withoutParams(skip.Skipped[0].Function) != "opaque" {
		t.Fatalf("Plan: %v, want opaque skipped (undecodable)", err)
	}
	if len(sites) != 1 || withoutParams(sites[0].Function) != "g" || sites[0].Return || len(sites[0].Exits) == 0 {
		t.Fatalf("sites %+v, want g with RET probes", sites)
	}
	requireUprobes(t)
	out, n, err := runPlanned(t, bin, sites)
	if err != nil || out != "caught 2" {
		t.Fatalf("the program under its planned probes: %v (output %q), want caught 2", err, out)
	}
	if w := [2]int{3, 1}; n["g(int)"] != w {
		t.Errorf("g: %v entries, exits, want %v", n["g(int)"], w)
	}
}

// atFixture's get throws std::out_of_range from inside libstdc++
// (std::vector::at calls std::__throw_out_of_range_fmt): the program
// imports no unwinder symbol of its own.
const atFixture = `#include <vector>
#include <cstdio>
std::vector<int> v(3);
__attribute__((noinline)) int get(int i) { return v.at(i); }
int main() { int n = 0; for (int i = 0; i < 3; i++) { try { n += get(10 + i); } catch (...) { n++; } } std::printf("caught %d\n", n); return 0; }
`

// staticFixture throws through mid in a static program, which imports
// nothing and defines the unwinder.
const staticFixture = `#include <cstdio>
#include <stdexcept>
__attribute__((noinline)) void thrower(int x) { if (x > 0) throw std::runtime_error("boom"); }
__attribute__((noinline)) void mid(int x) { thrower(x); asm volatile("" ::: "memory"); }
int main() { int n = 0; for (int i = 0; i < 3; i++) { try { mid(i); } catch (const std::exception &) { n++; } } std::printf("caught %d\n", n); return 0; }
`

// TestExitsHostedUnwinding: modules that can host C++ unwinding without
// importing __cxa_throw (a throw inside libstdc++, a static program)
// give return probes only to the functions no exception passes: the
// programs catch every exception under their probes, with exact counts.
func TestExitsHostedUnwinding(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name, src, fn string
		flags         []string
		out           string
		want          [2]int
	}{
		{"vector::at", atFixture, "get(int)", []string{"-O2"}, "caught 3", [2]int{3, 0}},
		{"static", staticFixture, "mid(int)", []string{"-O2", "-static"}, "caught 2", [2]int{3, 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bin := testutil.BuildCXX(t, dir, strings.ReplaceAll(tt.name, ":", ""), tt.src, tt.flags...)
			sites, err := Plan(bin, []string{withoutParams(tt.fn)})
			if err != nil {
				t.Fatal(err)
			}
			if s := siteOf(t, sites, tt.fn); s.Return || len(s.Calls) > 0 || len(s.Exits) == 0 {
				t.Fatalf("%s: %+v, want RET probes", tt.fn, s)
			}
			requireUprobes(t)
			out, n, err := runPlanned(t, bin, sites)
			if err != nil || out != tt.out {
				t.Fatalf("the program under its planned probes: %v (output %q), want %q", err, out, tt.out)
			}
			if n[tt.fn] != tt.want {
				t.Errorf("%s: %v entries, exits, want %v", tt.fn, n[tt.fn], tt.want)
			}
		})
	}
}
