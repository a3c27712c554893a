package uprobe

import (
	"errors"
	"os"
	"testing"

	"trueprof/internal/testutil"
)

// classFixture has a function with a frame (push %rbp first: emulated)
// and a frameless leaf (mov first: single-stepped).
const classFixture = `
static volatile long sink;
static long n = 10;
__attribute__((noinline)) void framed(void) {
	volatile char frame[16];
	frame[0] = 0;
	for (long i = 0; i < n; i++)
		sink += i;
	__asm__ volatile("" ::"r"(frame));
}
__attribute__((noinline, optimize("omit-frame-pointer"))) void frameless(void) {
	for (long i = 0; i < n; i++)
		sink += i;
}
int main(void) { framed(); frameless(); return 0; }
`

// TestClassSite plans sites of each class on functions that give them,
// and refuses a class the function's code does not give.
func TestClassSite(t *testing.T) {
	bin := testutil.BuildC(t, t.TempDir(), "classes", classFixture, "-O1", "-fno-omit-frame-pointer")
	code, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		fn    string
		class SiteClass
		ok    bool
	}{
		{"framed", SiteClass{}, true},
		{"framed", SiteClass{RetInsn: true}, true},
		{"framed", SiteClass{Stepped: true}, false},
		{"frameless", SiteClass{Stepped: true}, true},
		{"frameless", SiteClass{Stepped: true, RetInsn: true}, true},
		{"frameless", SiteClass{}, false},
	} {
		s, err := ClassSite(bin, tc.fn, tc.class)
		if !tc.ok {
			if err == nil {
				t.Errorf("%s as %+v: got site %+v, want an error", tc.fn, tc.class, s)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s as %+v: %v", tc.fn, tc.class, err)
			continue
		}
		// push %rbp is one byte (0x55); a mov begins with its REX prefix.
		if s.Entry != s.StartOffset || s.Emulated != emulated(code[s.Entry:s.Entry+1]) {
			t.Errorf("%s as %+v: entry at %#x (start %#x), emulated %v: want the first instruction", tc.fn, tc.class, s.Entry, s.StartOffset, s.Emulated)
		}
		if s.Emulated == tc.class.Stepped || s.Return == tc.class.RetInsn {
			t.Errorf("%s as %+v: site %+v", tc.fn, tc.class, s)
		}
		if tc.class.RetInsn != (len(s.Exits) > 0) {
			t.Errorf("%s as %+v: exits %#x", tc.fn, tc.class, s.Exits)
		}
		for _, x := range s.Exits {
			if code[x] != 0xc3 {
				t.Errorf("%s: exit probe at %#x on byte %#x, want a RET (0xc3)", tc.fn, x, code[x])
			}
		}
	}
	if _, err := ClassSite(bin, "nosuch", SiteClass{}); !errors.Is(err, ErrNoMatch) {
		t.Errorf("a missing function: %v, want ErrNoMatch", err)
	}
}
