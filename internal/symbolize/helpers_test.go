package symbolize

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"trueprof/internal/testutil"
)

// fixtureDir holds the programs the tests build; shared by all tests of
// one run and removed by TestMain.
var fixtureDir string

func TestMain(m *testing.M) {
	testutil.RunMain(m, "symbolize-test-", func(dir string) error {
		fixtureDir = dir
		return nil
	})
}

// requires requires tools on PATH: skipped locally, failed under
// TRUEPROF_REQUIRE_PERF=1 (testutil.RequireCommand).
func requires(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		testutil.RequireCommand(t, tool)
	}
}

type fixture struct {
	once sync.Once
	path string
	err  error
}

var fixtures sync.Map // name → *fixture

// build runs the commands that produce fixtureDir/name once per test run
// and returns the path. Each command is an argv; "$OUT" is replaced by the
// output path and "$DIR" by the fixture directory.
func build(t testing.TB, name string, cmds ...[]string) string {
	t.Helper()
	v, _ := fixtures.LoadOrStore(name, &fixture{})
	fx := v.(*fixture)
	fx.once.Do(func() {
		out := filepath.Join(fixtureDir, name)
		for _, argv := range cmds {
			args := make([]string, len(argv))
			for i, a := range argv {
				a = strings.ReplaceAll(a, "$OUT", out)
				args[i] = strings.ReplaceAll(a, "$DIR", fixtureDir)
			}
			cmd := exec.Command(args[0], args[1:]...)
			cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOFLAGS=", "GOWORK=off")
			if b, err := cmd.CombinedOutput(); err != nil {
				fx.err = fmt.Errorf("%v: %v\n%s", args, err, b)
				return
			}
		}
		fx.path = out
	})
	if fx.err != nil {
		t.Fatal(fx.err)
	}
	return fx.path
}

func srcPath(t testing.TB, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// cProg is testdata/prog.c built with -O2 -g.
func cProg(t testing.TB) string {
	requires(t, "gcc")
	return build(t, "prog", []string{"gcc", "-O2", "-g", "-fno-omit-frame-pointer", "-o", "$OUT", srcPath(t, "prog.c")})
}

// cProgStripped is cProg with every symbol and debug section removed.
func cProgStripped(t testing.TB) string {
	requires(t, "strip")
	in := cProg(t)
	return build(t, "prog.stripped", []string{"strip", "-o", "$OUT", in})
}

// cxxProg is testdata/prog.cc built with -O1 -g.
func cxxProg(t testing.TB) string {
	requires(t, "g++")
	return build(t, "progxx", []string{"g++", "-O1", "-g", "-o", "$OUT", srcPath(t, "prog.cc")})
}

// goProg is testdata/goprog built normally, or with -ldflags=-s -w.
func goProg(t testing.TB, stripped bool) string {
	requires(t, "go")
	name, flags := "goprog", "-ldflags="
	if stripped {
		name, flags = "goprog.stripped", "-ldflags=-s -w"
	}
	mod := filepath.Join(fixtureDir, "goprog-src")
	return build(t, name,
		[]string{"mkdir", "-p", mod},
		[]string{"cp", srcPath(t, "goprog/main.go"), mod},
		[]string{"sh", "-c", "printf 'module goprog\\ngo 1.21\\n' > " + filepath.Join(mod, "go.mod")},
		[]string{"go", "build", "-C", mod, flags, "-o", "$OUT", "."},
	)
}

// marker returns the line of src holding "L:name".
func marker(t testing.TB, src, name string) int {
	t.Helper()
	data, err := os.ReadFile(srcPath(t, src))
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, "L:"+name+" ") || strings.HasSuffix(line, "L:"+name) {
			return i + 1
		}
	}
	t.Fatalf("no marker L:%s in %s", name, src)
	return 0
}

type nmSym struct {
	addr, size uint64
	typ        byte
	name       string
}

// nm lists the symbols of path with binutils nm (the oracle, not our
// reader); dynamic selects the dynamic table.
func nm(t testing.TB, path string, dynamic bool, extra ...string) []nmSym {
	t.Helper()
	requires(t, "nm")
	args := []string{"-S", "--defined-only"}
	if dynamic {
		args = append(args, "-D")
	}
	args = append(args, extra...)
	args = append(args, path)
	out, err := exec.Command("nm", args...).Output()
	if err != nil {
		t.Fatalf("nm %v: %v", args, err)
	}
	var syms []nmSym
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		var s nmSym
		switch len(f) {
		case 3:
			s.addr, _ = strconv.ParseUint(f[0], 16, 64)
			s.typ, s.name = f[1][0], f[2]
		case 4:
			s.addr, _ = strconv.ParseUint(f[0], 16, 64)
			s.size, _ = strconv.ParseUint(f[1], 16, 64)
			s.typ, s.name = f[2][0], f[3]
		default:
			if len(f) > 4 { // demangled names contain spaces
				s.addr, _ = strconv.ParseUint(f[0], 16, 64)
				s.size, _ = strconv.ParseUint(f[1], 16, 64)
				s.typ, s.name = f[2][0], strings.Join(f[3:], " ")
			} else {
				continue
			}
		}
		if i := strings.IndexByte(s.name, '@'); i > 0 && !strings.Contains(s.name, " ") {
			s.name = s.name[:i] // version of a dynamic symbol
		}
		syms = append(syms, s)
	}
	return syms
}

func nmLookup(t testing.TB, syms []nmSym, name string) nmSym {
	t.Helper()
	for _, s := range syms {
		if s.name == name {
			return s
		}
	}
	t.Fatalf("nm: no symbol %q", name)
	return nmSym{}
}

// fileOffset converts a vaddr of path to a file offset through its
// PT_LOAD headers, the inverse of what Resolve does.
func fileOffset(t testing.TB, path string, vaddr uint64) uint64 {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && vaddr >= p.Vaddr && vaddr < p.Vaddr+p.Filesz {
			return vaddr - p.Vaddr + p.Off
		}
	}
	t.Fatalf("%s: vaddr %#x not in a PT_LOAD", path, vaddr)
	return 0
}

// addr2line runs binutils addr2line -f -i (and -C when demangle) on the
// vaddrs and returns each address's frames, innermost first. Unknown
// functions and lines come back as "??" and 0.
func addr2line(t testing.TB, path string, demangle bool, addrs []uint64) [][]Frame {
	t.Helper()
	requires(t, "addr2line")
	args := []string{"-a", "-f", "-i", "-e", path}
	if demangle {
		args = append(args, "-C")
	}
	for _, a := range addrs {
		args = append(args, fmt.Sprintf("%#x", a))
	}
	out, err := exec.Command("addr2line", args...).Output()
	if err != nil {
		t.Fatalf("addr2line: %v", err)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	var res [][]Frame
	for i := 0; i < len(lines); {
		if !strings.HasPrefix(lines[i], "0x") {
			t.Fatalf("addr2line output out of step at %q", lines[i])
		}
		i++
		var frames []Frame
		for i+1 < len(lines) && !strings.HasPrefix(lines[i], "0x") {
			fr := Frame{Function: lines[i]}
			pos := lines[i+1]
			if j := strings.Index(pos, " (discriminator"); j >= 0 {
				pos = pos[:j]
			}
			if j := strings.LastIndexByte(pos, ':'); j >= 0 {
				fr.File = pos[:j]
				fr.Line, _ = strconv.Atoi(pos[j+1:])
			}
			frames = append(frames, fr)
			i += 2
		}
		res = append(res, frames)
	}
	if len(res) != len(addrs) {
		t.Fatalf("addr2line returned %d results for %d addresses", len(res), len(addrs))
	}
	return res
}

func frameString(frames []Frame) string {
	var b strings.Builder
	for i, f := range frames {
		if i > 0 {
			b.WriteString(" <- ")
		}
		fmt.Fprintf(&b, "%s@%s:%d", f.Function, filepath.Base(f.File), f.Line)
	}
	return b.String()
}
