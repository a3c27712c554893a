package symbolize

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"trueprof/internal/testutil"
)

// readelfRule formats r the way readelf --debug-dump=frames-interp
// shows a register column.
func (r Rule) readelf() string {
	switch r.Kind {
	case RuleUnset, RuleUndefined:
		return "u"
	case RuleSame:
		return "s"
	case RuleOffset:
		return fmt.Sprintf("c%+d", r.Offset)
	case RuleValOffset:
		return fmt.Sprintf("v%+d", r.Offset)
	case RuleExpr:
		return "exp"
	case RuleValExpr:
		return "vexp"
	case RuleRegister:
		for name, n := range x86Regs {
			if n == int(r.Reg) {
				return fmt.Sprintf("r%d (%s)", r.Reg, name)
			}
		}
		return fmt.Sprintf("r%d", r.Reg)
	case RuleCFAExpr:
		return "exp"
	case RuleRegOffset:
		for name, n := range x86Regs {
			if n == int(r.Reg) {
				return fmt.Sprintf("%s%+d", name, r.Offset)
			}
		}
		return fmt.Sprintf("r%d%+d", r.Reg, r.Offset)
	}
	return "?"
}

// TestUnwindRowMatchesReadelf compares the CFA, return address and rbp
// columns of UnwindRow with readelf at the first byte of every row of
// every FDE of the C fixture, libc and libstdc++, expressions included.
func TestUnwindRowMatchesReadelf(t *testing.T) {
	libs := []string{cfaFixture(t, "-O2"), libcPath(t)}
	if p := filepath.Join(filepath.Dir(libs[1]), "libstdc++.so.6"); fileExists(p) {
		libs = append(libs, p)
	}
	for _, path := range libs {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f, off := openWithOffsets(t, path)
			var rows, exprs, rbpSaved, undefined int
			for _, fde := range readelfFrames(t, path) {
				for _, want := range fde.rows {
					if want.loc >= fde.hi {
						continue
					}
					got, err := f.UnwindRow(off(want.loc))
					if err != nil {
						if errors.Is(err, ErrUnsupported) {
							continue
						}
						t.Errorf("%#x: %v", want.loc, err)
						continue
					}
					wantRBP := want.rbp
					if wantRBP == "" {
						wantRBP = "u"
					}
					if g := got.CFA.readelf(); g != want.cfa {
						t.Errorf("%#x: CFA %s, readelf %s", want.loc, g, want.cfa)
					}
					if g := got.RA.readelf(); g != want.ra {
						t.Errorf("%#x: ra %s, readelf %s", want.loc, g, want.ra)
					}
					if g := got.RBP.readelf(); g != wantRBP {
						t.Errorf("%#x: rbp %s, readelf %s", want.loc, g, wantRBP)
					}
					rows++
					if got.CFA.Kind == RuleCFAExpr || got.RBP.Kind == RuleExpr {
						exprs++
					}
					if got.RBP.Kind == RuleOffset {
						rbpSaved++
					}
					if got.RA.Kind == RuleUndefined {
						undefined++
					}
				}
			}
			t.Logf("%d rows: %d with expressions, %d with rbp saved, %d with an undefined return address", rows, exprs, rbpSaved, undefined)
			if rows == 0 {
				t.Error("no row compared")
			}
		})
	}
}

// openWithOffsets opens path without its debug file, closed at the end
// of the test, and returns its vaddr to file offset mapping.
func openWithOffsets(t *testing.T, path string) (*File, func(uint64) uint64) {
	t.Helper()
	f, err := OpenFileOptions(path, Options{NoDebugFile: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, offsetsOf(t, path)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestUnwindRowSignalFrame checks libc's signal trampoline: an 'S' CIE,
// a CFA expression and the saved rbp and rip in the ucontext, which an
// unwinder evaluates to step from a handler to the interrupted code.
func TestUnwindRowSignalFrame(t *testing.T) {
	path := libcPath(t)
	f, err := OpenFileOptions(path, Options{NoDebugFile: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.cfaOnce.Do(f.loadCFA)
	var row UnwindRow
	found := false
	// libc is stripped of __restore_rt's name: find the 'S' FDE. Its
	// range starts at the nop before the trampoline, so a return
	// address into __restore_rt looked up at pc-1 lands in it.
	for _, fde := range f.cfa.fdes {
		if fde.cie.signal {
			row, err = f.cfa.row(fde.lo + 1)
			found = true
			break
		}
	}
	if !found {
		testutil.Missing(t, "libc without a signal frame FDE")
	}
	if err != nil {
		t.Fatal(err)
	}
	if row.CFA.Kind != RuleCFAExpr || row.RA.Kind != RuleExpr || row.RBP.Kind != RuleExpr {
		t.Fatalf("signal frame row = %+v, want expressions", row)
	}
	// A fake sigframe: rsp points at the ucontext's start minus nothing;
	// glibc's rules read rsp at +160, rbp at +120 and rip at +168.
	const sp = 0x7000
	mem := map[uint64]uint64{sp + 160: 0x9000, sp + 120: 0x9100, sp + 168: 0x401234}
	reg := func(n int) (uint64, bool) { return sp, n == dwarfRSP }
	read := func(a uint64) (uint64, bool) { v, ok := mem[a]; return v, ok }
	cfa, err := EvalExpr(row.CFA.Expr, nil, reg, read)
	if err != nil || cfa != 0x9000 {
		t.Fatalf("CFA = %#x, %v; want 0x9000", cfa, err)
	}
	for _, c := range []struct {
		name string
		r    Rule
		want uint64
	}{{"rip", row.RA, 0x401234}, {"rbp", row.RBP, 0x9100}} {
		at, err := EvalExpr(c.r.Expr, &cfa, reg, read)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if v, _ := read(at); v != c.want {
			t.Errorf("%s = %#x, want %#x", c.name, v, c.want)
		}
	}
}

// TestDebugFrame checks rows read from .debug_frame (gcc
// -fno-asynchronous-unwind-tables -g writes no .eh_frame for the code)
// against readelf, in the file itself and in a separate debug file found
// by build id.
func TestDebugFrame(t *testing.T) {
	requires(t, "gcc", "objcopy")
	path := build(t, "cfa_debug_frame",
		[]string{"gcc", "-O2", "-fno-asynchronous-unwind-tables", "-fno-exceptions", "-g", "-o", "$OUT.full", srcPath(t, "cfa.c")},
		[]string{"objcopy", "-R", ".eh_frame", "-R", ".eh_frame_hdr", "$OUT.full", "$OUT"},
		[]string{"objcopy", "--only-keep-debug", "$OUT.full", "$OUT.debug"},
		[]string{"objcopy", "--strip-debug", "-R", ".eh_frame", "-R", ".eh_frame_hdr", "$OUT.full", "$OUT.stripped"})
	stripped, err := OpenFileOptions(path+".stripped", Options{NoDebugFile: true})
	if err != nil {
		t.Fatal(err)
	}
	id := stripped.BuildID()
	stripped.Close()
	if len(id) == 0 {
		t.Fatal("the fixture has no build id")
	}
	dir := t.TempDir()
	h := fmt.Sprintf("%x", id)
	if err := os.MkdirAll(filepath.Join(dir, ".build-id", h[:2]), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(path+".debug", filepath.Join(dir, ".build-id", h[:2], h[2:]+".debug")); err != nil {
		t.Fatal(err)
	}
	fdes := readelfFrames(t, path)
	off := offsetsOf(t, path)
	for _, c := range []struct {
		name string
		path string
		opts Options
	}{
		{"in the file", path, Options{NoDebugFile: true}},
		{"in the debug file", path + ".stripped", Options{DebugDir: dir}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := OpenFileOptions(c.path, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if c.opts.DebugDir != "" && f.DebugPath() == "" {
				t.Fatal("the debug file was not found")
			}
			rows := 0
			for _, fde := range fdes {
				for _, want := range fde.rows {
					got, err := f.UnwindRow(off(want.loc))
					if err != nil {
						t.Errorf("%#x: %v", want.loc, err)
						continue
					}
					if g := got.CFA.readelf(); g != want.cfa {
						t.Errorf("%#x: CFA %s, readelf %s", want.loc, g, want.cfa)
					}
					if g := got.RA.readelf(); g != want.ra {
						t.Errorf("%#x: ra %s, readelf %s", want.loc, g, want.ra)
					}
					rows++
				}
			}
			if rows < 10 {
				t.Errorf("only %d rows compared", rows)
			}
		})
	}
}
