package symbolize

import (
	"bytes"
	"debug/elf"
	"debug/gosym"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"trueprof/internal/testutil"
)

// resolveVaddr resolves a vaddr of path through its file offset and
// checks that Resolve maps the offset back to the same vaddr.
func resolveVaddr(t testing.TB, f *File, vaddr uint64) []Frame {
	t.Helper()
	frames, got := f.Resolve(fileOffset(t, f.Path(), vaddr))
	if got != vaddr {
		t.Fatalf("Resolve(offset of %#x) gave vaddr %#x", vaddr, got)
	}
	if len(frames) == 0 {
		t.Fatalf("Resolve(%#x) returned no frames", vaddr)
	}
	return frames
}

func openFile(t testing.TB, path string, opts Options) *File {
	t.Helper()
	f, err := OpenFileOptions(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestCProgram(t *testing.T) {
	path := cProg(t)
	f := openFile(t, path, Options{})
	syms := nm(t, path, false)
	compute := nmLookup(t, syms, "compute")
	helper := nmLookup(t, syms, "helper")

	tests := []struct {
		name  string
		vaddr uint64
		want  string // outermost function
	}{
		{"compute entry", compute.addr, "compute"},
		{"compute last byte", compute.addr + compute.size - 1, "compute"},
		{"static helper", helper.addr + 1, "helper"},
		{"main", nmLookup(t, syms, "main").addr, "main"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			frames := resolveVaddr(t, f, tt.vaddr)
			if got := frames[len(frames)-1].Function; got != tt.want {
				t.Errorf("physical function = %q, want %q (%s)", got, tt.want, frameString(frames))
			}
			if !strings.HasSuffix(frames[0].File, "prog.c") || frames[0].Line == 0 {
				t.Errorf("innermost position = %s:%d, want prog.c:N", frames[0].File, frames[0].Line)
			}
		})
	}

	// Somewhere in compute, square is inlined into sum_squares inlined
	// into compute: look for that exact chain with the call lines.
	want := []Frame{
		{Function: "square", Line: marker(t, "prog.c", "square")},
		{Function: "sum_squares", Line: marker(t, "prog.c", "sum_squares")},
		{Function: "compute", Line: marker(t, "prog.c", "compute")},
	}
	found := false
	for a := compute.addr; a < compute.addr+compute.size && !found; a++ {
		frames := resolveVaddr(t, f, a)
		if len(frames) != len(want) {
			continue
		}
		found = true
		for i := range want {
			if frames[i].Function != want[i].Function || frames[i].Line != want[i].Line || !strings.HasSuffix(frames[i].File, "prog.c") {
				found = false
			}
		}
	}
	if !found {
		t.Errorf("no address of compute resolves to square <- sum_squares <- compute with lines %v", want)
	}

	if id := f.BuildID(); len(id) == 0 {
		t.Errorf("BuildID() = nil; gcc links with --build-id")
	} else if out, err := exec.Command("readelf", "-n", path).Output(); err == nil {
		if !bytes.Contains(out, []byte(hex.EncodeToString(id))) {
			t.Errorf("BuildID() = %x, not in readelf -n output", id)
		}
	}
}

// TestAddr2lineOracle compares every address of the fixtures' functions
// with binutils addr2line -f -i.
func TestAddr2lineOracle(t *testing.T) {
	tests := []struct {
		name     string
		path     func(testing.TB) string
		demangle bool
		funcs    []string
	}{
		{"c", cProg, false, []string{"compute", "helper", "main"}},
		// Not main: it inlines glibc's extern "C" atol, which has no
		// linkage name, and addr2line -C then names the inlined frame
		// "main" instead of "atol".
		{"c++", cxxProg, true, []string{"geo::area(long, long)", "geo::area(double)", "geo::Square::size() const"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tt.path(t)
			f := openFile(t, path, Options{})
			var extra []string
			if tt.demangle {
				extra = []string{"-C"}
			}
			syms := nm(t, path, false, extra...)
			var addrs []uint64
			for _, name := range tt.funcs {
				s := nmLookup(t, syms, name)
				for a := s.addr; a < s.addr+s.size; a++ {
					addrs = append(addrs, a)
				}
			}
			oracle := addr2line(t, path, tt.demangle, addrs)
			mismatches := 0
			for i, a := range addrs {
				got := resolveVaddr(t, f, a)
				want := oracle[i]
				if len(want) == 0 || want[0].Function == "??" {
					continue
				}
				if !sameFrames(got, want) {
					mismatches++
					if mismatches <= 5 {
						t.Errorf("%#x: got %s, addr2line %s", a, frameString(got), frameString(want))
					}
				}
			}
			if mismatches > 0 {
				t.Errorf("%d of %d addresses differ from addr2line", mismatches, len(addrs))
			}
		})
	}
}

func sameLines(got, want []Frame) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i].Line != want[i].Line {
			return false
		}
	}
	return true
}

func sameFrames(got, want []Frame) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i].Function != want[i].Function || got[i].Line != want[i].Line ||
			filepath.Base(got[i].File) != filepath.Base(want[i].File) {
			return false
		}
	}
	return true
}

// TestStrippedEHFrame checks that a stripped program's functions, known
// only from .eh_frame, are each named after their start, at every address;
// also without section headers, where .eh_frame is found through
// PT_GNU_EH_FRAME and .eh_frame_hdr.
func TestStrippedEHFrame(t *testing.T) {
	full := cProg(t)
	stripped := cProgStripped(t)
	data, err := os.ReadFile(stripped)
	if err != nil {
		t.Fatal(err)
	}
	// Drop the section headers: e_shoff, e_shnum and e_shstrndx of an
	// ELF64 header.
	clear(data[0x28:0x30])
	clear(data[0x3c:0x40])
	noSections := filepath.Join(t.TempDir(), "prog.stripped")
	if err := os.WriteFile(noSections, data, 0o755); err != nil {
		t.Fatal(err)
	}
	syms := nm(t, full, false)
	for _, path := range []string{stripped, noSections} {
		f := openFile(t, path, Options{NoDebugFile: true})
		if len(f.BuildID()) == 0 {
			t.Errorf("%s: no build id", path)
		}
		// The ELF header is in the first PT_LOAD but in no function.
		if frames, vaddr := f.Resolve(0x10); vaddr != 0x10 || frames[0].Function != "prog.stripped+0x10" {
			t.Errorf("%s: Resolve(0x10) = %s, %#x; want prog.stripped+0x10", path, frameString(frames), vaddr)
		}
		for _, name := range []string{"compute", "helper", "main"} {
			s := nmLookup(t, syms, name)
			want := fmt.Sprintf("prog.stripped+%#x", s.addr)
			for a := s.addr; a < s.addr+s.size; a++ {
				frames := resolveVaddr(t, f, a)
				if len(frames) != 1 || frames[0].Function != want {
					t.Fatalf("%s: %s+%#x: got %s, want %s", path, name, a-s.addr, frameString(frames), want)
				}
			}
		}
	}
}

// TestSeparateDebugFile splits the debug information off the program and
// checks it is found by build id and by .gnu_debuglink.
func TestSeparateDebugFile(t *testing.T) {
	requires(t, "objcopy")
	full := cProg(t)
	dir := t.TempDir()
	debug := filepath.Join(dir, "prog.debug")
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	run("objcopy", "--only-keep-debug", full, debug)

	linked := filepath.Join(dir, "linked")
	run("strip", "-o", linked, full)
	run("objcopy", "--add-gnu-debuglink="+debug, linked)

	byID := filepath.Join(dir, "byid")
	run("strip", "-o", byID, full)
	root := filepath.Join(dir, "debugroot")
	f0 := openFile(t, byID, Options{NoDebugFile: true})
	h := hex.EncodeToString(f0.BuildID())
	if len(h) < 4 {
		t.Fatal("fixture has no build id")
	}
	if err := os.MkdirAll(filepath.Join(root, ".build-id", h[:2]), 0o755); err != nil {
		t.Fatal(err)
	}
	run("cp", debug, filepath.Join(root, ".build-id", h[:2], h[2:]+".debug"))

	compute := nmLookup(t, nm(t, full, false), "compute")
	for _, tt := range []struct {
		name string
		path string
		opts Options
	}{
		{"debuglink", linked, Options{DebugDir: filepath.Join(dir, "nowhere")}},
		{"build-id", byID, Options{DebugDir: root}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := openFile(t, tt.path, tt.opts)
			if f.DebugPath() == "" {
				t.Fatal("no debug file found")
			}
			frames := resolveVaddr(t, f, compute.addr)
			if got := frames[len(frames)-1]; got.Function != "compute" || !strings.HasSuffix(got.File, "prog.c") {
				t.Errorf("got %s, want compute at prog.c", frameString(frames))
			}
		})
	}
}

func TestCXXDemangled(t *testing.T) {
	path := cxxProg(t)
	f := openFile(t, path, Options{})
	raw := nm(t, path, false)
	tests := []struct{ mangled, want string }{
		{"_ZN3geo4areaEll", "geo::area(long, long)"},
		{"_ZN3geo4areaEd", "geo::area(double)"},
		{"_ZN3geo5twiceIlEET_S1_", "geo::twice<long>(long)"},
		{"_ZN3geo5twiceIdEET_S1_", "geo::twice<double>(double)"},
		{"_ZNK3geo6Square4sizeEv", "geo::Square::size() const"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			s := nmLookup(t, raw, tt.mangled)
			frames := resolveVaddr(t, f, s.addr)
			if got := frames[len(frames)-1].Function; got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestGoProgram(t *testing.T) {
	for _, stripped := range []bool{false, true} {
		t.Run(fmt.Sprintf("stripped=%v", stripped), func(t *testing.T) {
			path := goProg(t, stripped)
			f := openFile(t, path, Options{})
			ef, err := elf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer ef.Close()
			if stripped && ef.Section(".symtab") != nil {
				t.Fatal("fixture still has .symtab")
			}
			work := goFunc(t, ef, "main.work")
			// .gopclntab ends a function where the next begins, padding
			// included; the symbol table of the unstripped build has the
			// exact size, and both builds lay out code identically.
			sym := nmLookup(t, nm(t, goProg(t, false), false), "main.work")
			if sym.addr != work.Entry {
				t.Fatalf("main.work at %#x in the unstripped build, %#x here", sym.addr, work.Entry)
			}
			lo, hi := marker(t, "goprog/main.go", "work-loop")-2, marker(t, "goprog/main.go", "work-call")+3
			sawInline := false
			for a := work.Entry; a < work.Entry+sym.size; a++ {
				frames := resolveVaddr(t, f, a)
				phys := frames[len(frames)-1]
				if phys.Function != "main.work" {
					t.Fatalf("%#x: physical function %q, want main.work", a, phys.Function)
				}
				if !strings.HasSuffix(frames[0].File, "main.go") {
					t.Fatalf("%#x: file %q, want main.go", a, frames[0].File)
				}
				if len(frames) == 2 && frames[0].Function == "main.add" && frames[0].Line == marker(t, "goprog/main.go", "add") &&
					phys.Line == marker(t, "goprog/main.go", "work-call") {
					sawInline = true
				}
				if len(frames) == 1 && (phys.Line < lo || phys.Line > hi) && phys.Line != marker(t, "goprog/main.go", "add") {
					t.Errorf("%#x: line %d outside work", a, phys.Line)
				}
			}
			// DWARF describes the inlining of add; .gopclntab via
			// debug/gosym does not expose the inline tree.
			if !stripped && !sawInline {
				t.Errorf("no address of main.work resolves to main.add inlined at the call line")
			}
		})
	}
}

// goFunc finds a function through .gopclntab with debug/gosym directly,
// as an oracle independent of the symbol tables.
func goFunc(t testing.TB, ef *elf.File, name string) *gosym.Func {
	t.Helper()
	data, err := ef.Section(".gopclntab").Data()
	if err != nil {
		t.Fatal(err)
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, ef.Section(".text").Addr))
	if err != nil {
		t.Fatal(err)
	}
	fn := tab.LookupFunc(name)
	if fn == nil {
		t.Fatalf("no %s in .gopclntab", name)
	}
	return fn
}

const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"

func TestLibc(t *testing.T) {
	if _, err := os.Stat(libc); err != nil {
		testutil.Missing(t, fmt.Sprintf("no %s: %v", libc, err))
	}
	f := openFile(t, libc, Options{NoDebugFile: true})
	dyn := nm(t, libc, true)

	// An exported function: the name chosen among its aliases must be one
	// of them.
	getpid := nmLookup(t, dyn, "getpid")
	var aliases []string
	for _, s := range dyn {
		if s.addr == getpid.addr && (s.typ == 'T' || s.typ == 'W' || s.typ == 'i') {
			aliases = append(aliases, s.name)
		}
	}
	frames := resolveVaddr(t, f, getpid.addr+1)
	if !slices.Contains(aliases, frames[0].Function) {
		t.Errorf("getpid+1 resolved to %q, want one of %v", frames[0].Function, aliases)
	}

	// A stable choice between aliases: "malloc" over "__libc_malloc".
	malloc := nmLookup(t, dyn, "malloc")
	if frames := resolveVaddr(t, f, malloc.addr); frames[0].Function != "malloc" {
		t.Errorf("malloc resolved to %q", frames[0].Function)
	}

	// A non-exported function, known from the libc6-dbg symbols when
	// installed (the oracle), else from the .eh_frame grouping alone.
	dbg := filepath.Join(DefaultDebugDir, ".build-id", hex.EncodeToString(f.BuildID()[:1]), hex.EncodeToString(f.BuildID()[1:])+".debug")
	if _, err := os.Stat(dbg); err != nil {
		testutil.Missing(t, "no libc debug file "+dbg+" (Debian: libc6-dbg)")
	}
	internal := nmLookup(t, nm(t, dbg, false), "_int_malloc")
	want := fmt.Sprintf("libc.so.6+%#x", internal.addr)
	for a := internal.addr; a < internal.addr+internal.size; a += 7 {
		if frames := resolveVaddr(t, f, a); frames[0].Function != want {
			t.Fatalf("_int_malloc+%#x: got %q, want %q", a-internal.addr, frames[0].Function, want)
		}
	}

	withDebug := openFile(t, libc, Options{})
	if withDebug.DebugPath() != dbg {
		t.Errorf("DebugPath() = %q, want %q", withDebug.DebugPath(), dbg)
	}
	frames = resolveVaddr(t, withDebug, internal.addr+0x10)
	if phys := frames[len(frames)-1]; phys.Function != "_int_malloc" || !strings.HasSuffix(phys.File, "malloc.c") {
		t.Errorf("with debug file: got %s, want _int_malloc at malloc.c", frameString(frames))
	}
}

// TestLibcOracle compares sampled libc addresses with addr2line, which
// also finds the libc6-dbg file by build id.
func TestLibcOracle(t *testing.T) {
	if _, err := os.Stat(libc); err != nil {
		testutil.Missing(t, fmt.Sprintf("no %s: %v", libc, err))
	}
	f := openFile(t, libc, Options{})
	if f.DebugPath() == "" {
		testutil.Missing(t, "no libc debug file (Debian: libc6-dbg)")
	}
	ef, err := elf.Open(libc)
	if err != nil {
		t.Fatal(err)
	}
	text := ef.Section(".text")
	ef.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	var addrs []uint64
	for range 300 {
		addrs = append(addrs, text.Addr+rng.Uint64N(text.Size))
	}
	oracle := addr2line(t, libc, false, addrs)
	mismatches := 0
	for i, a := range addrs {
		got := resolveVaddr(t, f, a)
		want := oracle[i]
		if len(want) == 0 || want[0].Function == "??" {
			continue
		}
		// Compare the inline depth and the lines. Names differ by
		// alias (addr2line prints DWARF names, we prefer the exported
		// symbol), and addr2line names the including file instead of
		// the included one for code in glibc's template files such as
		// getXXent_r.c, where readelf --debug-dump=decodedline agrees
		// with us.
		if !sameLines(got, want) {
			mismatches++
			if mismatches <= 5 {
				t.Logf("%#x: got %s, addr2line %s", a, frameString(got), frameString(want))
			}
		}
	}
	// A few differences are tolerated: addr2line and debug/dwarf
	// disagree on rare line-table corner cases.
	if mismatches > len(addrs)/50 {
		t.Errorf("%d of %d libc addresses differ from addr2line", mismatches, len(addrs))
	}
}

// TestCorruptELF damages the fixture's unwind and debug sections and
// checks that opening and resolving never panics.
func TestCorruptELF(t *testing.T) {
	path := cProg(t)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.NewFile(bytes.NewReader(orig))
	if err != nil {
		t.Fatal(err)
	}
	var targets []*elf.Section
	for _, name := range []string{".eh_frame", ".eh_frame_hdr", ".debug_info", ".debug_line", ".debug_abbrev", ".symtab", ".debug_rnglists", ".plt", ".plt.got", ".rela.plt", ".rela.dyn"} {
		if s := ef.Section(name); s != nil && s.Type != elf.SHT_NOBITS {
			targets = append(targets, s)
		}
	}
	compute := nmLookup(t, nm(t, path, false), "compute")
	rng := rand.New(rand.NewPCG(3, 4))
	dir := t.TempDir()
	for i := range 60 {
		data := slices.Clone(orig)
		s := targets[i%len(targets)]
		for range 1 + rng.IntN(8) {
			data[s.Offset+rng.Uint64N(s.Size)] = byte(rng.Uint32())
		}
		p := filepath.Join(dir, fmt.Sprintf("corrupt%d", i))
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := OpenFileOptions(p, Options{NoDebugFile: true})
		if err != nil {
			continue
		}
		for a := compute.addr; a < compute.addr+compute.size; a += 3 {
			if frames, _ := f.Resolve(a); len(frames) == 0 || frames[0].Function == "" {
				t.Errorf("%s: empty result at %#x", s.Name, a)
			}
		}
		f.Close()
	}
}

func TestOpenFileErrors(t *testing.T) {
	dir := t.TempDir()
	notELF := filepath.Join(dir, "text")
	if err := os.WriteFile(notELF, []byte("hello, world\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{notELF, filepath.Join(dir, "missing")} {
		if f, err := OpenFile(p); err == nil {
			f.Close()
			t.Errorf("OpenFile(%s) succeeded", p)
		}
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, bytes.Repeat([]byte("not an ELF file"), 10), 0o644); err != nil {
		t.Fatal(err)
	}
	var fe *elf.FormatError
	if _, err := OpenFile(bad); !errors.As(err, &fe) {
		t.Errorf("OpenFile(bad) = %v, want *elf.FormatError", err)
	}
}

func benchmarkResolve(b *testing.B, path string, cold bool) {
	f := openFile(b, path, Options{})
	ef, err := elf.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	text := ef.Section(".text")
	ef.Close()
	var offs []uint64
	for a := text.Addr; a < text.Addr+text.Size && len(offs) < 4096; a += max(1, text.Size/4096) {
		offs = append(offs, fileOffset(b, path, a))
	}
	for _, o := range offs {
		f.Resolve(o) // warm up: DWARF units decoded, cache filled
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if cold && i%len(offs) == 0 {
			f.mu.Lock()
			clear(f.cache)
			f.mu.Unlock()
		}
		f.Resolve(offs[i%len(offs)])
	}
}

// BenchmarkResolve measures Resolve on a warm File: cached measures repeated
// addresses, uncached the lookups behind the cache (DWARF already decoded).
func BenchmarkResolve(b *testing.B) {
	b.Run("c/cached", func(b *testing.B) { benchmarkResolve(b, cProg(b), false) })
	b.Run("c/uncached", func(b *testing.B) { benchmarkResolve(b, cProg(b), true) })
	if _, err := os.Stat(libc); err == nil {
		b.Run("libc/cached", func(b *testing.B) { benchmarkResolve(b, libc, false) })
		b.Run("libc/uncached", func(b *testing.B) { benchmarkResolve(b, libc, true) })
	}
}
