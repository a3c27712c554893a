package web

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"trueprof/internal/model"
	"trueprof/internal/perf"
	"trueprof/internal/record"
	"trueprof/internal/testutil"
	"trueprof/internal/trace"
)

// coverageFixture is a program whose source view has known coverage
// marks, written after each line: "|" executed, "#" not
// executed, none where the data cannot tell or the line has no code.
// Built at -O0, every statement has code. used and main are called:
// their entry basic blocks (up to the first jump) are executed, the
// rest is unknown without line samples; unused is probed and never
// called: every line with its code is not executed, its comment and
// blank lines and its declaration line (no code) have no mark.
const coverageFixture = `/* coverage fixture */
#include <stdlib.h>

static volatile long sink;

__attribute__((noinline)) void used(long n)
{ /* | */
	sink += n; /* | */
	/* a comment: no code */
	if (n > 100) /* | */
		sink *= 3;
	sink -= 1;
}

__attribute__((noinline)) void unused(long n)
{ /* # */
	sink += n; /* # */

	if (n > 100) /* # */
		sink *= 3; /* # */
	sink -= 1; /* # */
} /* # */

int main(int argc, char **argv)
{ /* | */
	used(argc); /* | */
	if (argc > 5) /* | */
		unused(argc);
	return 0;
}
`

// recordCoverage builds the fixture and records it with entry and exit
// uprobes on its three functions, without samples.
func recordCoverage(t *testing.T) (*model.Profile, string) {
	t.Helper()
	testutil.RequirePerf(t)
	dir := t.TempDir()
	bin := testutil.BuildC(t, dir, "cov", coverageFixture, "-O0")
	ev, err := perf.ParseEvent("cpu-clock")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "cov.trace")
	if _, err := record.Run(context.Background(), record.Config{
		Output: out, Event: ev, Freq: 999, Mode: trace.ModeNormal, SizeLimit: 64 << 20,
		Command: []string{bin}, Mech: "uprobe", Trace: []string{"main", "used", "unused"}, NoSampling: true, Log: os.Stderr,
	}); err != nil {
		t.Fatalf("recording the coverage fixture: %v", err)
	}
	p, err := model.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	return p, filepath.Join(dir, "cov.c")
}

// wantMarks reads the fixture's expected marks by line number.
func wantMarks() map[string]string {
	want := map[string]string{}
	for i, l := range strings.Split(coverageFixture, "\n") {
		switch {
		case strings.HasSuffix(l, "/* | */"):
			want[strconv.Itoa(i+1)] = "|"
		case strings.HasSuffix(l, "/* # */"):
			want[strconv.Itoa(i+1)] = "#"
		}
	}
	return want
}

// fixtureLine is the line of the fixture that starts with prefix.
func fixtureLine(t *testing.T, prefix string) string {
	for i, l := range strings.Split(coverageFixture, "\n") {
		if strings.HasPrefix(l, prefix) {
			return strconv.Itoa(i + 1)
		}
	}
	t.Fatalf("no line %q in the fixture", prefix)
	return ""
}

// TestBrowserSourceCoverage checks the coverage marks on a real
// instrumented recording, from the server and from the HTML file, for
// every line of the file: the DWARF line table says which lines have
// code, entry probes which functions ran, the entry block's
// instructions which of their lines certainly ran. The view opens at
// the function's declaration line.
func TestBrowserSourceCoverage(t *testing.T) {
	p, _ := recordCoverage(t)
	ctx := browser(t)
	want := wantMarks()
	for _, tc := range bothPages(t, p, "coverage") {
		// unused, never called, is in no view: the file's marks are the
		// same whichever of its functions is selected.
		for _, fn := range []string{"used", "main"} {
			run(t, ctx, tc.name+": source of "+fn, chromedp.Navigate(tc.url), waitFor(`body[data-ready="1"]`),
				click(fmt.Sprintf(`.vrow[data-name=%q]`, fn)), click(`#tabs button[data-tab="source"]`),
				waitFor(`#source[data-kind="source"] tr.focus`))
			marks := eval[map[string]string](t, ctx, `Object.fromEntries([...document.querySelectorAll("#source-table tbody tr")].map(r => [r.dataset.line, r.cells[0].textContent]).filter(([, m]) => m))`)
			if fmt.Sprint(marks) != fmt.Sprint(want) {
				t.Errorf("%s, %s selected: marks by line %v, want %v", tc.name, fn, marks, want)
			}
			focus := eval[string](t, ctx, `document.querySelector("#source tr.focus").dataset.line`)
			decl := fixtureLine(t, "int main(")
			if fn != "main" {
				decl = fixtureLine(t, "__attribute__((noinline)) void "+fn+"(")
			}
			if focus != decl {
				t.Errorf("%s: %s's source opens at line %s, want its declaration, line %s", tc.name, fn, focus, decl)
			}
			if fn == "used" {
				screenshot(t, ctx, tc.name+"-coverage-source")
			}
		}
	}
}
