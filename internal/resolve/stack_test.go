package resolve

import (
	"bufio"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"trueprof/internal/model"
	"trueprof/internal/perf"
	"trueprof/internal/trace"
)

// The tests below resolve the test binary's own code: its executable
// mappings (/proc/self/maps) are given to the Resolver as the kernel's
// records would give them, and runtime.Callers supplies real call chains,
// return addresses as the kernel's frame-pointer walk reports them.

// selfMappings returns the executable file mappings of the test process.
func selfMappings(t *testing.T) []Mapping {
	t.Helper()
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Fatalf("no /proc/self/maps: %v", err)
	}
	defer f.Close()
	var out []Mapping
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m, ok := ParseMapsLine(sc.Text()); ok && strings.HasPrefix(m.Path, "/") {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		t.Fatal("no executable file mapping in /proc/self/maps")
	}
	return out
}

// selfPID is the test process, as the Resolver's pids are.
func selfPID() uint32 { return uint32(os.Getpid()) }

// mapSelf gives r the test process's executable mappings, at time 1.
func mapSelf(t *testing.T, r *Resolver) {
	t.Helper()
	for _, m := range selfMappings(t) {
		m.Time = 1
		r.Mmap(selfPID(), m)
	}
}

// callers returns the call chain of its caller, innermost first, as return
// addresses, and the functions runtime names for each.
func callers() ([]uint64, []string) {
	pcs := make([]uintptr, 64)
	n := runtime.Callers(1, pcs)
	chain := make([]uint64, n)
	names := make([]string, n)
	for i, pc := range pcs[:n] {
		chain[i] = uint64(pc)
		names[i] = runtime.FuncForPC(pc - 1).Name()
	}
	return chain, names
}

// sample is a user-mode sample of the test process with a frame-pointer
// call chain.
func sample(chain []uint64) *perf.Record {
	return &perf.Record{PID: selfPID(), TID: selfPID(), IP: chain[0], Callchain: append([]uint64{perf.ContextUser}, chain...)}
}

// stackFunctions returns the physical functions of stack node id of p,
// innermost first.
func stackFunctions(p *model.Profile, id uint32) []string {
	var out []string
	for ; id != 0; id = p.Stacks[id].Parent {
		fr := p.Locations[p.Stacks[id].Location].Frames
		out = append(out, fr[len(fr)-1].Function)
	}
	return out
}

// TestStackNamesAndInterning: a chain of the test binary's own code is
// named as the Go runtime names it, the same chain is interned once, a
// chain sharing its callers shares their nodes, and a chain that reaches
// the goroutine's entry (runtime.goexit) is complete while one cut short
// of it is truncated, by the end of the frame-pointer chain.
func TestStackNamesAndInterning(t *testing.T) {
	var log strings.Builder
	r, buf, w := newResolver(t, &log, Options{})
	mapSelf(t, r)
	chain, names := callers()
	full, truncated, reason, err := r.Stack(sample(chain))
	if err != nil {
		t.Fatal(err)
	}
	if truncated || reason != trace.UnwindNone {
		t.Errorf("a chain ending in %s: truncated %v (%v), want complete", names[len(names)-1], truncated, reason)
	}
	again, _, _, err := r.Stack(sample(chain))
	if err != nil || again != full {
		t.Errorf("the same chain again: node %d (%v), want %d", again, err, full)
	}
	// Another leaf under the same callers.
	other := append([]uint64{uint64(funcPC(selfPID))}, chain[1:]...)
	sibling, _, _, err := r.Stack(sample(other))
	if err != nil {
		t.Fatal(err)
	}
	cut, truncated, reason, err := r.Stack(sample(chain[:len(chain)-1]))
	if err != nil {
		t.Fatal(err)
	}
	if !truncated || reason != trace.UnwindFPEnded {
		t.Errorf("a chain cut short of %s: truncated %v (%v), want truncated by %v", names[len(names)-1], truncated, reason, trace.UnwindFPEnded)
	}
	p := load(t, buf, w)
	if got := stackFunctions(p, full); strings.Join(got, " ") != strings.Join(names, " ") {
		t.Errorf("stack functions\n%q\nwant runtime's\n%q", got, names)
	}
	if p.Stacks[sibling].Parent != p.Stacks[full].Parent || sibling == full {
		t.Errorf("sibling leaf node %d (parent %d), full chain %d (parent %d): want two leaves of one parent",
			sibling, p.Stacks[sibling].Parent, full, p.Stacks[full].Parent)
	}
	if fr := p.Locations[p.Stacks[sibling].Location].Frames; fr[len(fr)-1].Function != "trueprof/internal/resolve.selfPID" {
		t.Errorf("sibling leaf %+v, want selfPID", fr)
	}
	if p.Stacks[cut].Location == p.Stacks[full].Location && cut == full {
		t.Errorf("the cut chain is the full one")
	}
	// Nodes are written once: one per distinct (parent, location).
	if want := len(chain) + 1 + len(chain) - 1; len(p.Stacks)-1 != want {
		t.Errorf("%d stack nodes, want %d (one chain, a sibling leaf, the cut chain's %d)", len(p.Stacks)-1, want, len(chain)-1)
	}
	if log.Len() != 0 {
		t.Errorf("warnings: %s", log.String())
	}
}

// funcPC is the entry address of a Go function.
func funcPC(f func() uint32) uintptr { return reflect.ValueOf(f).Pointer() }

// TestForkExec: a forked process resolves through its parent's mappings,
// and after its exec its old image's addresses are unknown, but for
// events stamped before the exec that come after it (a hook's late
// batch), cached or not: those resolve in the old image. So does a late
// event of a process whose pid a new fork reused.
func TestForkExec(t *testing.T) {
	var log strings.Builder
	r, buf, w := newResolver(t, &log, Options{})
	mapSelf(t, r)
	const child = 1 << 23 // above pid_max: no process of the machine
	pc := uint64(funcPC(selfPID))
	r.Fork(child, selfPID(), 1)
	inherited, err := r.FunctionLocation(child, pc, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Exec(child, 10); err != nil {
		t.Fatal(err)
	}
	afterExec, err := r.FunctionLocation(child, pc, 11)
	if err != nil {
		t.Fatal(err)
	}
	var late [2]uint32
	for i := range late { // the second time, the first is in the caches
		if late[i], err = r.FunctionLocation(child, pc, 5); err != nil {
			t.Fatal(err)
		}
	}
	if again, err := r.FunctionLocation(child, pc, 12); err != nil || again != afterExec {
		t.Errorf("after exec, after the late events: location %d (%v), want %d", again, err, afterExec)
	}
	parent, err := r.FunctionLocation(selfPID(), pc, 11)
	if err != nil {
		t.Fatal(err)
	}
	// The pid reused at 20 by another child of the same parent: the new
	// process resolves through the parent's mappings, and an event of
	// the exec'd image stamped before, at 15, still in that image.
	r.Fork(child, selfPID(), 20)
	reused, err := r.FunctionLocation(child, pc, 21)
	if err != nil {
		t.Fatal(err)
	}
	lateExeced, err := r.FunctionLocation(child, pc, 15)
	if err != nil {
		t.Fatal(err)
	}
	p := load(t, buf, w)
	name := func(id uint32) string { fr := p.Locations[id].Frames; return fr[len(fr)-1].Function }
	if got := name(inherited); got != "trueprof/internal/resolve.selfPID" {
		t.Errorf("forked child's function %q, want selfPID", got)
	}
	if parent != inherited {
		t.Errorf("the parent's location %d, the child's %d: code in a file is one location", parent, inherited)
	}
	if got := name(afterExec); got != moduleUnknown {
		t.Errorf("after exec: %q, want %s", got, moduleUnknown)
	}
	for _, id := range late {
		if id != inherited {
			t.Errorf("stamped before the exec, processed after it: location %d (%s), want %d", id, name(id), inherited)
		}
	}
	if reused != inherited || name(lateExeced) != moduleUnknown {
		t.Errorf("pid reused: location %d (%s), want %d; the exec'd image's late event %q, want %s",
			reused, name(reused), inherited, name(lateExeced), moduleUnknown)
	}
}

// TestExecImagesBounded: a process keeps its current image and at most
// maxImages-1 it replaced, each found by time.
func TestExecImagesBounded(t *testing.T) {
	as := &addrSpace{}
	for i := range 10 {
		as = as.replace(&addrSpace{}, uint64(10*(i+1)))
		as.insert(Mapping{Start: uint64(i+1) << 12, End: uint64(i+2) << 12, Path: "/image"})
	}
	n := 0
	for p := as; p != nil; p = p.prev {
		n++
	}
	if n != maxImages {
		t.Errorf("%d images kept, want %d", n, maxImages)
	}
	for _, tc := range []struct{ t, start uint64 }{{100, 10 << 12}, {99, 9 << 12}, {85, 8 << 12}, {70, 7 << 12}, {5, 7 << 12}} {
		if m := as.at(tc.t).find(tc.start); m == nil {
			t.Errorf("at %d: no mapping at %#x", tc.t, tc.start)
		}
	}
}

// TestFunctionLocationRemapped: a hook's function address is cached, and
// the cache forgets it when the mapping under it changes (here to
// anonymous memory, JIT code no file names yet).
func TestFunctionLocationRemapped(t *testing.T) {
	var log strings.Builder
	r, buf, w := newResolver(t, &log, Options{})
	mapSelf(t, r)
	pc := uint64(funcPC(selfPID))
	first, err := r.FunctionLocation(selfPID(), pc, 2)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := r.FunctionLocation(selfPID(), pc, 3); err != nil || again != first {
		t.Fatalf("same function again: %d (%v), want %d", again, err, first)
	}
	r.Mmap(selfPID(), Mapping{Start: pc &^ 0xfff, End: pc&^0xfff + 0x1000, Path: "//anon", Time: 4})
	remapped, err := r.FunctionLocation(selfPID(), pc, 5)
	if err != nil {
		t.Fatal(err)
	}
	p := load(t, buf, w)
	if remapped == first || p.Locations[remapped].Module != moduleJIT {
		t.Errorf("after an anonymous mapping over it: location %d in %q, want a new one in %s", remapped, p.Locations[remapped].Module, moduleJIT)
	}
}

// TestBuildIDMismatch: a file whose build id is not the mapping's is not
// used for names: its code is named by module and offset, with a warning.
func TestBuildIDMismatch(t *testing.T) {
	var log strings.Builder
	r, buf, w := newResolver(t, &log, Options{})
	pc := uint64(funcPC(selfPID))
	for _, m := range selfMappings(t) {
		m.BuildID = []byte{1, 2, 3, 4}
		r.Mmap(selfPID(), m)
	}
	id, err := r.FunctionLocation(selfPID(), pc, 2)
	if err != nil {
		t.Fatal(err)
	}
	p := load(t, buf, w)
	loc := p.Locations[id]
	want := filepath.Base(loc.Module) + "+0x"
	if got := loc.Frames[0].Function; !strings.HasPrefix(got, want) {
		t.Errorf("function %q, want %s...", got, want)
	}
	if !strings.Contains(log.String(), "build id") {
		t.Errorf("log %q does not say the build id differs", log.String())
	}
}

// TestIsFile: only file paths are files; anonymous memory and the
// kernel's mappings are not.
func TestIsFile(t *testing.T) {
	for path, want := range map[string]bool{
		"/usr/lib/libc.so.6": true, "": false, "//anon": false, "[anon:v8]": false,
		"/memfd:jit (deleted)": false, "[vdso]": false, "[vsyscall]": false,
	} {
		if got := IsFile(path); got != want {
			t.Errorf("IsFile(%q) = %v, want %v", path, got, want)
		}
	}
}
