package symbolize

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// goidProg is testdata/goid built with the given linker flags: a program
// that checks a runtime.g.goid offset against the ids runtime.Stack
// prints.
func goidProg(t testing.TB, name, ldflags string) string {
	requires(t, "go")
	mod := filepath.Join(fixtureDir, "goid-src")
	return build(t, name,
		[]string{"mkdir", "-p", mod},
		[]string{"cp", srcPath(t, "goid/main.go"), srcPath(t, "goid/getg_amd64.s"), mod},
		[]string{"sh", "-c", "printf 'module goid\\ngo 1.22\\n' > " + filepath.Join(mod, "go.mod")},
		[]string{"go", "build", "-C", mod, "-ldflags=" + ldflags, "-o", "$OUT", "."},
	)
}

func TestReadGoLayout(t *testing.T) {
	path := goidProg(t, "goid", "")
	l, err := ReadGoLayout(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(l.Version, "go1.") && !strings.HasPrefix(l.Version, "devel") {
		t.Errorf("Version %q", l.Version)
	}
	if l.GoID <= 0 || l.Labels <= 0 || l.Labels == l.GoID {
		t.Errorf("layout %+v", l)
	}
	// The program reads its goroutines' ids at the offset and compares
	// them with what runtime.Stack says.
	out, err := exec.Command(path, strconv.FormatInt(l.GoID, 10)).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Errorf("goid at offset %d: %v: %s", l.GoID, err, out)
	}
	// The check itself can fail: the next word is not the id.
	if out, err := exec.Command(path, strconv.FormatInt(l.GoID+8, 10)).CombinedOutput(); err == nil {
		t.Errorf("offset %d passed the check: %s", l.GoID+8, out)
	}
}

func TestReadGoLayoutErrors(t *testing.T) {
	if _, err := ReadGoLayout(goidProg(t, "goid.nodwarf", "-w")); !errors.Is(err, ErrNoGoDWARF) {
		t.Errorf("-ldflags=-w: %v, want ErrNoGoDWARF", err)
	}
	if _, err := ReadGoLayout(cProg(t)); !errors.Is(err, ErrNotGo) {
		t.Errorf("C program: %v, want ErrNotGo", err)
	}
	for v, want := range map[string]bool{"go1.16.15": false, "go1.17": true, "go1.26.0": true, "go1.9": false, "devel go1.27-abc": true} {
		if got := registerABI(v); got != want {
			t.Errorf("registerABI(%q) = %v", v, got)
		}
	}
}
