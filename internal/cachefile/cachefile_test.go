package cachefile

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWrite writes a file twice, with different permissions, and checks
// its contents and mode and that no temporary file is left; a write into
// a missing directory fails and leaves nothing.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cache.json")
	for _, tc := range []struct {
		data string
		perm os.FileMode
	}{{"first", 0o600}, {"second, longer", 0o644}} {
		if err := Write(path, []byte(tc.data), tc.perm); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != tc.data || fi.Mode().Perm() != tc.perm {
			t.Errorf("file holds %q with mode %v; want %q, %v", b, fi.Mode().Perm(), tc.data, tc.perm)
		}
	}
	if err := Write(filepath.Join(dir, "missing", "x.json"), []byte("x"), 0o644); err == nil {
		t.Error("a write into a missing directory succeeded")
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 1 {
		t.Errorf("the directory holds %v (%v); want only cache.json", ents, err)
	}
}

// TestDirRefusesSharedDirectory: a cache directory that others can write
// (one planted in /tmp, say) is refused, and a fresh one is made private
// to its user.
func TestDirRefusesSharedDirectory(t *testing.T) {
	base := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", base)
	dir, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(base, "trueprof"); dir != want {
		t.Errorf("Dir() = %s, want %s", dir, want)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := Dir(); err == nil {
		t.Error("a cache directory writable by everyone was accepted")
	}
}

// TestDirRefusesSharedFallback: without a home or XDG_CACHE_HOME the
// directory is made under the temporary directory, whose per-user base
// another user may have planted: it is refused.
func TestDirRefusesSharedFallback(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "")
	dir, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Dir(dir)
	if filepath.Dir(base) != tmp {
		t.Fatalf("Dir() = %s, want one under %s", dir, tmp)
	}
	if err := os.Chmod(base, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := Dir(); err == nil {
		t.Error("a fallback base writable by everyone was accepted")
	}
}
