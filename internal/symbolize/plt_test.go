package symbolize

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"trueprof/internal/testutil"
)

// stlProg is a C++ program whose calls into libstdc++ go through its PLT.
const stlProg = `#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

int main(int argc, char **argv)
{
	std::map<std::string, int> count;
	std::vector<std::string> words(argv, argv + argc);
	for (auto &w : words)
		count[w + "!"]++;
	std::sort(words.begin(), words.end());
	try {
		if (argc > 5)
			throw std::runtime_error("many");
	} catch (const std::exception &e) {
		std::puts(e.what());
	}
	std::printf("%zu\n", count.size());
	return 0;
}
`

// stlProgO2 is stlProg built with g++ -O2 and the flags Debian builds
// with (IBT and shadow-stack notes, but the default lazy .plt, because
// the C runtime's objects are not all marked IBT).
func stlProgO2(t testing.TB) string {
	requires(t, "g++")
	src := filepath.Join(fixtureDir, "stl.cc")
	return build(t, "stl-O2",
		[]string{"sh", "-c", "cat > " + src + " <<'EOF'\n" + stlProg + "EOF"},
		[]string{"g++", "-O2", "-fcf-protection", "-o", "$OUT", src})
}

// ibtProg is testdata/prog.c linked with -z ibtplt: .plt keeps the
// header and the lazy-binding entries, .plt.sec the stubs that calls go
// to (endbr64; bnd jmp *slot), and .plt.got 16-byte IBT entries.
func ibtProg(t testing.TB) string {
	requires(t, "gcc")
	return build(t, "prog-ibtplt", []string{"gcc", "-O2", "-fcf-protection", "-Wl,-z,ibtplt", "-o", "$OUT", srcPath(t, "prog.c")})
}

// nowProg is testdata/prog.c linked with -z now (no lazy binding).
func nowProg(t testing.TB) string {
	requires(t, "gcc")
	return build(t, "prog-now", []string{"gcc", "-O2", "-Wl,-z,now", "-o", "$OUT", srcPath(t, "prog.c")})
}

// debianFile requires a file of Debian's packages.
func debianFile(t testing.TB, path, pkg string) string {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		testutil.Missing(t, fmt.Sprintf("%s (Debian package %s): %v", path, pkg, err))
	}
	return path
}

// objdumpLabel matches a label line of objdump -d: "0000000000008030 <puts@plt>:".
var objdumpLabel = regexp.MustCompile(`^([0-9a-f]+) <(.*)>:$`)

// objdumpPLT returns the synthetic "NAME@plt" labels objdump -d gives
// the PLT sections of path, by address, demangled when demangle is set.
func objdumpPLT(t testing.TB, path string, demangle bool) map[uint64]string {
	t.Helper()
	requires(t, "objdump")
	args := []string{"-d", "-w"}
	if demangle {
		args = append(args, "-C")
	}
	for _, s := range pltSections {
		args = append(args, "--section="+s)
	}
	out, err := exec.Command("objdump", append(args, path)...).Output()
	if err != nil {
		t.Fatalf("objdump %v: %v", args, err)
	}
	labels := make(map[uint64]string)
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		m := objdumpLabel.FindStringSubmatch(sc.Text())
		// Section starts without a stub ("<.plt>") and offsets from a
		// stub ("<puts@plt-0x10>" for a header) are not stub names.
		if m == nil || !strings.HasSuffix(m[2], "@plt") {
			continue
		}
		addr, err := strconv.ParseUint(m[1], 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		labels[addr] = m[2]
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return labels
}

// TestPLTStubsObjdump checks the PLT stubs found in real binaries, each
// layout the GNU linker makes, against objdump's "<NAME@plt>" labels:
// the same addresses, each with the symbol (or, for a local IFUNC,
// objdump's "*ABS*+0xRESOLVER") objdump names it by. Resolve then names
// every stub "NAME@plt" with the name demangled, checked against
// objdump -C, except where an IFUNC's resolver has a symbol, which
// trueprof prefers to objdump's address.
func TestPLTStubsObjdump(t *testing.T) {
	const lib = "/usr/lib/x86_64-linux-gnu/"
	for _, tc := range []struct {
		name string
		path func(t testing.TB) string
		// layout: sections that must hold stubs.
		layout []string
	}{
		{"sqlite3", func(t testing.TB) string { return debianFile(t, "/usr/bin/sqlite3", "sqlite3") }, []string{".plt", ".plt.got"}},
		{"libsqlite3", func(t testing.TB) string { return debianFile(t, lib+"libsqlite3.so.0", "libsqlite3-0") }, []string{".plt", ".plt.got"}},
		{"python3", func(t testing.TB) string { return debianFile(t, "/usr/bin/python3", "python3") }, []string{".plt"}},
		{"libstdc++", func(t testing.TB) string { return debianFile(t, lib+"libstdc++.so.6", "libstdc++6") }, []string{".plt", ".plt.got"}},
		{"libc IRELATIVE", func(t testing.TB) string { return debianFile(t, lib+"libc.so.6", "libc6") }, []string{".plt", ".plt.got"}},
		{"g++ -O2 STL", stlProgO2, []string{".plt", ".plt.got"}},
		{"-z ibtplt .plt.sec", ibtProg, []string{".plt.sec", ".plt.got"}},
		{"-z now", nowProg, []string{".plt"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path(t)
			ef, err := elf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer ef.Close()
			stubs, err := pltStubs(ef)
			if err != nil {
				t.Fatalf("pltStubs: %v", err)
			}
			want := objdumpPLT(t, path, false)
			got := make(map[uint64]string)
			for _, p := range stubs {
				if p.header {
					continue
				}
				name := p.target + "@plt"
				if p.target == "" {
					name = fmt.Sprintf("*ABS*+%#x@plt", p.ifunc)
				}
				got[p.lo] = name
			}
			for addr, name := range want {
				if got[addr] != name {
					t.Errorf("%#x: objdump <%s>, trueprof %q", addr, name, got[addr])
				}
			}
			for addr, name := range got {
				if _, ok := want[addr]; !ok {
					t.Errorf("%#x: trueprof %q, objdump has no stub there", addr, name)
				}
			}
			for _, sec := range tc.layout {
				s := ef.Section(sec)
				n := 0
				for _, p := range stubs {
					if s != nil && !p.header && p.lo >= s.Addr && p.hi <= s.Addr+s.Size {
						n++
					}
				}
				if n == 0 {
					t.Errorf("no stubs in %s", sec)
				}
			}
			t.Logf("%d stubs, all named as objdump names them", len(got))

			f, err := OpenFile(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			demangled := objdumpPLT(t, path, true)
			ifuncs := 0
			for _, p := range stubs {
				want := demangled[p.lo]
				if p.header {
					want = ".plt"
				} else if p.target == "" && !strings.HasPrefix(pltName(p, nil), "*ABS*") {
					t.Fatalf("pltName without symbols = %q", pltName(p, nil))
				}
				frames, _ := f.Resolve(fileOffset(t, path, p.hi-1))
				name := frames[len(frames)-1].Function
				if p.target == "" && !p.header {
					// A local IFUNC: named after its resolver's symbol.
					if strings.HasPrefix(name, "*ABS*") || !strings.HasSuffix(name, "@plt") {
						t.Errorf("%#x: IFUNC stub %s resolves to %q, want its resolver's name", p.lo, want, name)
					}
					ifuncs++
					continue
				}
				// objdump -C spells a template function with its
				// return type first; trueprof drops it, as perf does.
				if name != want && !strings.HasSuffix(want, " "+name) {
					t.Errorf("%#x: Resolve = %q, objdump -C <%s>", p.lo, name, want)
				}
			}
			if tc.name == "libc IRELATIVE" && ifuncs == 0 {
				t.Error("no IRELATIVE stubs in libc")
			}
		})
	}
}

// TestPLTJumpSlot decodes each form of x86-64 PLT entry, and rejects what
// is not one, without reading past a short entry.
func TestPLTJumpSlot(t *testing.T) {
	const addr = 0x1000
	for _, tc := range []struct {
		name  string
		entry []byte
		slot  uint64
		ok    bool
	}{
		{"lazy .plt entry", []byte{0xff, 0x25, 0xfa, 0x2f, 0, 0, 0x68, 0, 0, 0, 0, 0xe9, 0xe0, 0xff, 0xff, 0xff}, addr + 6 + 0x2ffa, true},
		{".plt.sec entry", []byte{0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25, 0x10, 0, 0, 0, 0x0f, 0x1f, 0x44, 0, 0}, addr + 11 + 0x10, true},
		{"backwards slot", []byte{0xff, 0x25, 0xf0, 0xff, 0xff, 0xff, 0x66, 0x90}, addr + 6 - 0x10, true},
		{"lazy header", []byte{0xff, 0x35, 2, 0x30, 0, 0, 0xff, 0x25, 4, 0x30, 0, 0, 0x0f, 0x1f, 0x40, 0}, 0, false},
		{"IBT lazy entry", []byte{0xf3, 0x0f, 0x1e, 0xfa, 0x68, 0, 0, 0, 0, 0xf2, 0xe9, 0xe1, 0xff, 0xff, 0xff, 0x90}, 0, false},
		{"truncated", []byte{0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25, 0x10}, 0, false},
		{"endbr64 only", []byte{0xf3, 0x0f, 0x1e, 0xfa}, 0, false},
		{"empty", nil, 0, false},
	} {
		slot, ok := pltJumpSlot(tc.entry, addr)
		if ok != tc.ok || slot != tc.slot {
			t.Errorf("%s: pltJumpSlot = %#x, %v, want %#x, %v", tc.name, slot, ok, tc.slot, tc.ok)
		}
	}
}

// TestPLTStubsMalformed cuts the relocation table of a real binary short
// and reports it, keeping the stubs the whole relocations still name.
func TestPLTStubsMalformed(t *testing.T) {
	path := cProg(t)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	rela := ef.Section(".rela.plt")
	if rela == nil || rela.Size < 48 {
		t.Fatalf("%s: no .rela.plt of two relocations", path)
	}
	full, err := pltStubs(ef)
	if err != nil {
		t.Fatal(err)
	}
	// Shorten .rela.plt's sh_size by 4 bytes in its section header.
	off, ok := sectionHeaderOffset(data, ef, ".rela.plt")
	if !ok {
		t.Fatal("no section header for .rela.plt")
	}
	const shSize = 32 // offset of sh_size in Elf64_Shdr
	ef.ByteOrder.PutUint64(data[off+shSize:], rela.Size-4)
	bad, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	stubs, err := pltStubs(bad)
	var de *DecodeError
	if !errors.As(err, &de) || !errors.Is(err, ErrFormat) || de.Name != ".rela.plt" {
		t.Fatalf("pltStubs of a short .rela.plt: error %v, want a DecodeError naming .rela.plt", err)
	}
	if len(stubs) != len(full)-1 {
		t.Errorf("%d stubs from a .rela.plt one relocation short, want %d", len(stubs), len(full)-1)
	}
}

// sectionHeaderOffset returns where the header of section name is in the
// ELF64 image data.
func sectionHeaderOffset(data []byte, ef *elf.File, name string) (int, bool) {
	shoff := ef.ByteOrder.Uint64(data[0x28:])
	shentsize := int(ef.ByteOrder.Uint16(data[0x3a:]))
	for i, s := range ef.Sections {
		if s.Name == name {
			return int(shoff) + i*shentsize, true
		}
	}
	return 0, false
}
