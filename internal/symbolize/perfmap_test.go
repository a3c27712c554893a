package symbolize

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// appendFile appends s to path, as a JIT appends to its map.
func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestPerfMap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perf-1234.map")
	appendFile(t, path, "1000 100 LazyCompile:~foo app.js:1\n0x2000 0x40 bar\n3000 10 par")
	m, err := OpenPerfMap(path, os.Getuid())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	type want struct {
		addr  uint64
		name  string
		start uint64
		ok    bool
	}
	check := func(stage string, wants []want) {
		t.Helper()
		for _, w := range wants {
			name, start, ok := m.Resolve(w.addr)
			if name != w.name || start != w.start || ok != w.ok {
				t.Errorf("%s: Resolve(%#x) = %q, %#x, %v; want %q, %#x, %v", stage, w.addr, name, start, ok, w.name, w.start, w.ok)
			}
		}
	}
	check("initial", []want{
		{0x1000, "LazyCompile:~foo app.js:1", 0x1000, true},
		{0x10ff, "LazyCompile:~foo app.js:1", 0x1000, true},
		{0x1100, "", 0, false},
		{0x203f, "bar", 0x2000, true},
		{0x3000, "", 0, false}, // unterminated line not read yet
	})

	// The JIT finishes the line, then recompiles into part of foo's range.
	appendFile(t, path, "tial\n1080 20 foo_optimized\n")
	if err := m.Update(); err != nil {
		t.Fatal(err)
	}
	check("after update", []want{
		{0x3005, "partial", 0x3000, true},
		{0x1000, "LazyCompile:~foo app.js:1", 0x1000, true},
		{0x1090, "foo_optimized", 0x1080, true},
		{0x10a0, "LazyCompile:~foo app.js:1", 0x1000, true},
	})
	if m.Len() != 4 {
		t.Errorf("Len() = %d, want 4", m.Len())
	}

	// Malformed lines are skipped and reported with their line number;
	// good lines around them still count.
	appendFile(t, path, "zzzz 10 bad\n4000 10 good\n")
	err = m.Update()
	var de *DecodeError
	if !errors.As(err, &de) || de.Offset != 5 || !errors.Is(err, ErrFormat) {
		t.Errorf("Update() = %v, want a DecodeError at line 5", err)
	}
	check("after malformed", []want{{0x4001, "good", 0x4000, true}})
}

func TestPerfMapLines(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		wantErr bool
	}{
		{"plain", "7f00 10 foo\n", false},
		{"prefixed", "0x7f00 0x10 foo\n", false},
		{"spaces in name", "7f00 10 foo bar (baz)\n", false},
		{"blank", "\n", false},
		{"no name", "7f00 10\n", true},
		{"zero size", "7f00 0 foo\n", true},
		{"overflow", "ffffffffffffffff 10 foo\n", true},
		{"bad size", "7f00 1g foo\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "perf.map")
			appendFile(t, path, tt.line)
			m, err := OpenPerfMap(path, os.Getuid())
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			err = m.Update() // reports what the first read skipped
			if (err != nil) != tt.wantErr {
				t.Errorf("err = %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

// TestTrust checks the ownership rule shared by perf maps and jitdumps.
func TestTrust(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "perf-1.map")
	appendFile(t, good, "1000 10 foo\n")
	link := filepath.Join(dir, "perf-2.map")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "perf-3.map")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	uid := os.Getuid()
	tests := []struct {
		name string
		path string
		uid  int
		want error // nil: trusted
	}{
		{"own regular file", good, uid, nil},
		{"other user's file", good, uid + 1000, ErrUntrusted},
		{"symlink to own file", link, uid, ErrUntrusted},
		{"fifo does not block", fifo, uid, ErrUntrusted},
		{"directory", dir, uid, ErrUntrusted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := OpenPerfMap(tt.path, tt.uid)
			if m != nil {
				m.Close()
			}
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Errorf("OpenPerfMap: %v, want %v", err, tt.want)
			}
			j, err := OpenJitDump(tt.path, tt.uid)
			if j != nil {
				j.Close()
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("OpenJitDump: %v, want %v", err, tt.want)
			}
		})
	}

	// A file really owned by another user (needs root to create).
	other := filepath.Join(dir, "perf-4.map")
	appendFile(t, other, "1000 10 foo\n")
	if err := os.Chown(other, 12345, 12345); err != nil {
		t.Logf("cannot chown (not root): %v", err)
		return
	}
	if _, err := OpenPerfMap(other, uid); !errors.Is(err, ErrUntrusted) {
		t.Errorf("file of uid 12345 opened as uid %d: %v", uid, err)
	}
	m, err := OpenPerfMap(other, 12345)
	if err != nil {
		t.Errorf("file of uid 12345 rejected for uid 12345: %v", err)
	} else {
		m.Close()
	}
}
