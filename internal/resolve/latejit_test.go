package resolve

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"trueprof/internal/trace"
)

// latePID is the process of the late-naming tests: no process has it
// (above the kernel's largest pid_max), so the files' owner must be the
// test's own user.
const latePID = 1 << 23

// jitDumpLoad is one JIT_CODE_LOAD of a test jitdump.
type jitDumpLoad struct {
	time, addr, size uint64
	name             string
}

// writeJitDump writes a jitdump of latePID with loads to dir, in the
// format of tools/perf/Documentation/jitdump-specification.txt.
func writeJitDump(t *testing.T, dir string, loads ...jitDumpLoad) string {
	t.Helper()
	le := binary.LittleEndian
	b := le.AppendUint32(nil, 0x4A695444) // magic
	b = le.AppendUint32(b, 1)             // version
	b = le.AppendUint32(b, 40)            // header size
	b = le.AppendUint32(b, 62)            // EM_X86_64
	b = le.AppendUint32(b, 0)
	b = le.AppendUint32(b, latePID)
	b = le.AppendUint64(b, 0) // timestamp
	b = le.AppendUint64(b, 0) // flags: CLOCK_MONOTONIC times
	for i, l := range loads {
		b = le.AppendUint32(b, 0) // JIT_CODE_LOAD
		b = le.AppendUint32(b, uint32(16+40+len(l.name)+1+int(l.size)))
		b = le.AppendUint64(b, l.time)
		b = le.AppendUint32(b, latePID)
		b = le.AppendUint32(b, latePID)
		b = le.AppendUint64(b, l.addr) // vma
		b = le.AppendUint64(b, l.addr)
		b = le.AppendUint64(b, l.size)
		b = le.AppendUint64(b, uint64(i)) // code index
		b = append(append(b, l.name...), 0)
		b = append(b, make([]byte, l.size)...)
	}
	path := filepath.Join(dir, fmt.Sprintf("jit-%d.dump", latePID))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// lateResolver is a resolver writing a trace, with one anonymous
// executable mapping [0x10000, 0x20000) of latePID, mapped at time 1.
func lateResolver(t *testing.T, log io.Writer) (*Resolver, *bytes.Buffer, *trace.Writer) {
	t.Helper()
	r, buf, w := newResolver(t, log, Options{})
	r.Mmap(latePID, Mapping{Start: 0x10000, End: 0x20000, Path: "//anon", Time: 1})
	return r, buf, w
}

// readLateNames closes the trace and returns each location's physical
// function name, by id.
func readLateNames(t *testing.T, buf *bytes.Buffer, w *trace.Writer) []string {
	t.Helper()
	p := load(t, buf, w)
	names := make([]string, len(p.Locations))
	for i, l := range p.Locations[1:] {
		names[i+1] = l.Frames[len(l.Frames)-1].Function
	}
	return names
}

// use resolves addr of latePID at time and returns its location id.
func use(t *testing.T, r *Resolver, addr, time uint64) uint32 {
	t.Helper()
	id, err := r.location(latePID, addr, false, time)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestNameLatePerfMap: JIT addresses no file named when sampled keep a
// location each, and a perf map written before the process's exit names
// each by its own entry, the latest winning where entries overlap.
func TestNameLatePerfMap(t *testing.T) {
	log := &strings.Builder{}
	r, buf, w := lateResolver(t, log)
	mapPath := fmt.Sprintf("/tmp/perf-%d.map", latePID)
	os.Remove(mapPath)
	t.Cleanup(func() { os.Remove(mapPath) })
	a := use(t, r, 0x10010, 100)
	b := use(t, r, 0x10100, 200)
	if again := use(t, r, 0x10010, 300); a == b || again != a {
		t.Fatalf("locations %d, %d, %d: want one per address", a, b, again)
	}
	noMap := use(t, r, 0x90000, 300) // outside every mapping: [unknown]
	if err := os.WriteFile(mapPath, []byte("10000 80 old\n10000 40 first\n10100 10 second\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.Exit(latePID); err != nil {
		t.Fatal(err)
	}
	if err := r.Finish(); err != nil {
		t.Fatal(err)
	}
	names := readLateNames(t, buf, w)
	if names[a] != "first" || names[b] != "second" || names[noMap] != "[unknown]" {
		t.Errorf("names %q: want %d first, %d second, %d [unknown]", names, a, b, noMap)
	}
	if !bytes.Contains([]byte(log.String()), []byte("2 JIT addresses named")) {
		t.Errorf("log %q does not say 2 addresses were named late", log.String())
	}
}

// TestNameLateJitDump: a jitdump read at the end names an address by the
// code loaded there at its samples' times, and leaves it unnamed when
// other code was loaded there between its first and last sample.
func TestNameLateJitDump(t *testing.T) {
	dir := t.TempDir()
	dump := filepath.Join(dir, fmt.Sprintf("jit-%d.dump", latePID))
	if err := os.WriteFile(dump, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	log := &strings.Builder{}
	r, buf, w := lateResolver(t, log)
	stable := use(t, r, 0x10010, 100)
	use(t, r, 0x10010, 150)
	reused := use(t, r, 0x10100, 100)
	use(t, r, 0x10100, 300)
	// Announced by mapping it, as perf's protocol has it, once written:
	// the resolver refuses a dump without a header.
	writeJitDump(t, dir,
		jitDumpLoad{time: 50, addr: 0x10000, size: 0x40, name: "stable"},
		jitDumpLoad{time: 50, addr: 0x10100, size: 0x10, name: "before"},
		jitDumpLoad{time: 200, addr: 0x10100, size: 0x10, name: "after"},
	)
	r.Mmap(latePID, Mapping{Start: 0x30000, End: 0x31000, Path: dump, Time: 2})
	if err := r.Finish(); err != nil {
		t.Fatal(err)
	}
	names := readLateNames(t, buf, w)
	if names[stable] != "stable" || names[reused] != "[jit]" {
		t.Errorf("names %q: want %d stable, %d [jit] (the address held two codes while sampled)", names, stable, reused)
	}
	if !bytes.Contains([]byte(log.String()), []byte("1 JIT addresses stay unnamed ([jit]): their jitdump shows different code")) {
		t.Errorf("log %q does not count the ambiguous address", log.String())
	}
}
