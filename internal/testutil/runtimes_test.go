package testutil

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestRemovingPerfMaps: when a test ends, the perf maps of every run of
// a command line made by RemovingPerfMaps are gone, and a map of a
// process not run through it (this test's own pid's) stays.
func TestRemovingPerfMaps(t *testing.T) {
	other := fmt.Sprintf("/tmp/perf-%d.map", os.Getpid())
	if err := os.WriteFile(other, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(other)
	var written []string
	t.Run("runs", func(t *testing.T) {
		argv := RemovingPerfMaps(t, []string{"/bin/sh", "-c", `: >/tmp/perf-$$.map && echo $$`})
		for range 2 {
			out, err := exec.Command(argv[0], argv[1:]...).Output()
			if err != nil {
				t.Fatalf("%q: %v", argv, err)
			}
			path := fmt.Sprintf("/tmp/perf-%s.map", strings.TrimSpace(string(out)))
			if _, err := os.Stat(path); err != nil {
				t.Fatalf("the run wrote no map: %v", err)
			}
			written = append(written, path)
		}
	})
	if len(written) != 2 {
		t.Fatalf("maps written: %q", written)
	}
	for _, path := range written {
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			os.Remove(path)
			t.Errorf("%s left behind (%v)", path, err)
		}
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another process's map: %v", err)
	}
}
