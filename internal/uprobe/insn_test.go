package uprobe

import (
	"bufio"
	"bytes"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"trueprof/internal/symbolize"
	"trueprof/internal/testutil"
)

// vectorFixture's loops compile to VEX and EVEX instructions of every
// operand form under -O3 -march=x86-64-v4: register and memory operands,
// SIB bytes, 8- and 32-bit displacements, RIP-relative constants and
// immediates (shuffles, compares, blends).
const vectorFixture = `#include <stdio.h>
#include <string.h>
float a[4096], b[4096], c[4096];
double d[4096];
int ia[4096], ib[4096];
const float k[8] = {1, 2, 3, 4, 5, 6, 7, 8};
void axpy(float s, int n) { for (int i = 0; i < n; i++) c[i] = s * a[i] + b[i] * k[i & 7]; }
void minmax(int n) { for (int i = 0; i < n; i++) ia[i] = ia[i] > ib[i] ? ia[i] - ib[i] : ib[i] << 3; }
float dot(int n) { float s = 0; for (int i = 0; i < n; i++) s += a[i] * b[i]; return s; }
void conv(int n) { for (int i = 0; i < n; i++) d[i] = (double)ia[i] * 0.5 + (float)ib[i]; }
void shuf(int n) { for (int i = 0; i + 1 < n; i += 2) { float t = a[i]; a[i] = a[i + 1]; a[i + 1] = t; } }
int count(const char *s, int n) { int m = 0; for (int i = 0; i < n; i++) m += s[i] == 'x'; return m; }
void clear(int n) { memset(ib, 0, n * sizeof ib[0]); }
int main(int argc, char **argv) {
	int n = argc * 1000;
	axpy(2, n); minmax(n); conv(n); shuf(n); clear(argc);
	printf("%f %d\n", dot(n), count(argv[0], strlen(argv[0])));
	return 0;
}
`

// TestDecodeVEX: decodeFunc finds the instruction boundaries objdump
// finds, all of them and no other, in code full of VEX and EVEX instructions, which x86asm does not
// decode.
func TestDecodeVEX(t *testing.T) {
	objdump := testutil.RequireCommand(t, "objdump")
	for _, march := range []string{"x86-64-v3", "x86-64-v4"} {
		bin := testutil.BuildC(t, t.TempDir(), "vector", vectorFixture, "-O3", "-march="+march)
		out, err := exec.Command(objdump, "-d", "--no-show-raw-insn", bin).Output()
		if err != nil {
			t.Fatal(err)
		}
		// objdump's boundaries: every "  addr:\tinsn" line.
		want := map[uint64]bool{}
		vex := 0
		for sc := bufio.NewScanner(bytes.NewReader(out)); sc.Scan(); {
			addr, insn, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":\t")
			if a, err := strconv.ParseUint(addr, 16, 64); ok && err == nil {
				want[a] = true
				if strings.HasPrefix(insn, "v") {
					vex++
				}
			}
		}
		f, err := symbolize.OpenFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, fn := range []string{"axpy", "minmax", "dot", "conv", "shuf", "count", "main"} {
			var sym symbolize.Function
			for _, s := range f.Functions() {
				if s.Name == fn {
					sym = s
				}
			}
			code, err := f.Code(sym.Addr, sym.Size)
			if err != nil {
				t.Fatal(err)
			}
			ins, err := decodeFunc(code)
			if err != nil {
				t.Errorf("%s %s: %v", march, fn, err)
				continue
			}
			got := map[uint64]bool{}
			for _, in := range ins {
				got[sym.Addr+uint64(in.off)] = true
				if !want[sym.Addr+uint64(in.off)] {
					t.Errorf("%s %s: an instruction at %#x, where objdump has none", march, fn, sym.Addr+uint64(in.off))
				}
			}
			for a := range want {
				if a >= sym.Addr && a < sym.Addr+sym.Size && !got[a] {
					t.Errorf("%s %s: objdump has an instruction at %#x, decodeFunc none", march, fn, a)
				}
			}
		}
		if vex < 50 {
			t.Errorf("%s: %d VEX instructions in the fixture: the test shows little", march, vex)
		}
	}
}

// TestDecodeFuncBound: a function of more one-byte instructions than
// maxFuncInsns is refused, not decoded into hundreds of megabytes.
func TestDecodeFuncBound(t *testing.T) {
	ins, err := decodeFunc(bytes.Repeat([]byte{0x90}, maxFuncInsns+1))
	if err == nil || len(ins) > maxFuncInsns {
		t.Errorf("%d nops: %d instructions, error %v; want an error", maxFuncInsns+1, len(ins), err)
	}
	if ins, err := decodeFunc(bytes.Repeat([]byte{0x90}, 1000)); err != nil || len(ins) != 1000 {
		t.Errorf("1000 nops: %d instructions, error %v", len(ins), err)
	}
}

// TestDecodeSystem: the register-only instructions x86asm does not
// decode, as objdump shows them in libgcc, libstdc++ and glibc, decode
// to their lengths, and a code sequence of them all to its boundaries.
func TestDecodeSystem(t *testing.T) {
	seq := [][]byte{
		{0xf3, 0x48, 0x0f, 0x1e, 0xc8}, // rdsspq %rax
		{0xf3, 0x48, 0x0f, 0xae, 0xe9}, // incsspq %rcx
		{0x0f, 0xc7, 0xfa},             // rdseed %edx
		{0x48, 0x0f, 0xc7, 0xf8},       // rdseed %rax
		{0x0f, 0x01, 0xee},             // rdpkru
		{0x0f, 0x01, 0xef},             // wrpkru
		{0xc3},                         // ret
	}
	var code []byte
	for _, b := range seq {
		code = append(code, b...)
	}
	ins, err := decodeFunc(code)
	if err != nil || len(ins) != len(seq) {
		t.Fatalf("decodeFunc: %d instructions, %v; want %d", len(ins), err, len(seq))
	}
	for i, in := range ins {
		if in.len != len(seq[i]) {
			t.Errorf("% x: length %d, want %d", seq[i], in.len, len(seq[i]))
		}
	}
	if _, err := decodeFunc([]byte{0xc4, 0xe0, 0x78, 0x77, 0xc3}); err == nil {
		t.Error("c4 e0 78 77 (VEX opcode map 0: no such instruction) decoded")
	}
}
