package perf

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"trueprof/internal/testutil"

	"golang.org/x/sys/unix"
)

func TestParseFormatBit(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want uint
		ok   bool
	}{
		{"config:0", 0, true},
		{"config:63", 63, true},
		{"config:32-63", 0, false},
		{"config1:0", 0, false},
		{"", 0, false},
	} {
		got, err := parseFormatBit(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseFormatBit(%q) = %d, %v", tt.in, got, err)
		}
	}
}

func TestReadUprobePMU(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := readUprobePMU(dir); !errors.Is(err, ErrNotSupported) {
		t.Errorf("no PMU: %v, want ErrNotSupported", err)
	}
	os.MkdirAll(filepath.Join(dir, "format"), 0o755)
	os.WriteFile(filepath.Join(dir, "type"), []byte("11\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "format/retprobe"), []byte("config:3\n"), 0o644)
	typ, bit, err := readUprobePMU(dir)
	if err != nil || typ != 11 || bit != 3 {
		t.Errorf("got type %d bit %d, %v; want 11, 3", typ, bit, err)
	}
}

// uprobeFixture calls fib 177 times (fib(10)) after a byte on stdin.
const uprobeFixture = `#include <stdio.h>
#include <unistd.h>
int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
int main(void) {
	char c;
	if (read(0, &c, 1) < 0) return 1;
	printf("%d\n", fib(10));
	return 0;
}
`

// fileOffset returns the file offset of symbol name in the ELF file.
func fileOffset(t *testing.T, path, name string) uint64 {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name != name {
			continue
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && s.Value >= p.Vaddr && s.Value < p.Vaddr+p.Filesz {
				return s.Value - p.Vaddr + p.Off
			}
		}
	}
	t.Fatalf("%s: no symbol %s", path, name)
	return 0
}

// TestUprobeCounts probes fib with a counting entry probe, a counting
// return probe and a sampling entry probe, and checks all three see the
// 177 calls of fib(10).
func TestUprobeCounts(t *testing.T) {
	testutil.RequirePerf(t)
	if _, _, err := UprobeType(); err != nil {
		testutil.Missing(t, err.Error())
	}
	bin := testutil.BuildC(t, t.TempDir(), "fib", uprobeFixture)
	off := fileOffset(t, bin, "fib")
	cmd := exec.Command(bin)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for _, u := range []Uprobe{{bin, off, false}, {bin, off, true}} {
		fd, err := OpenUprobe(u, pid, -1, UprobeOptions{})
		if errors.Is(err, ErrPermission) {
			testutil.Missing(t, err.Error())
		}
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
	}
	in.Write([]byte{1})
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"entry", "return"} {
		var b [8]byte
		if _, err := unix.Read(fds[i], b[:]); err != nil {
			t.Fatal(err)
		}
		if n := binary.NativeEndian.Uint64(b[:]); n != 177 {
			t.Errorf("%s probe counted %d hits of fib, want 177", name, n)
		}
	}
}

func TestUprobeBadOffset(t *testing.T) {
	testutil.RequirePerf(t)
	if _, _, err := UprobeType(); err != nil {
		testutil.Missing(t, err.Error())
	}
	_, err := OpenUprobe(Uprobe{Path: "/nonexistent/file", Offset: 0x1000}, 0, -1, UprobeOptions{})
	if err == nil {
		t.Fatal("uprobe on a missing file opened")
	}
	if errors.Is(err, ErrPermission) {
		testutil.Missing(t, err.Error())
	}
	t.Log(err)
}
