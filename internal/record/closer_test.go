package record

import (
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"os"
	"testing"
	"time"
	"trueprof/internal/testutil"

	"golang.org/x/sys/unix"
)

// TestTinyELF checks the tiny holder's executable as debug/elf reads it:
// one loadable segment, the whole file, with the entry at the code.
func TestTinyELF(t *testing.T) {
	code := []byte{0x0f, 0x05} // syscall
	f, err := elf.NewFile(bytes.NewReader(tinyELF(code)))
	if err != nil {
		t.Fatal(err)
	}
	if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_X86_64 || f.Type != elf.ET_EXEC || len(f.Progs) != 1 {
		t.Fatalf("%v %v %v, %d segments", f.Class, f.Machine, f.Type, len(f.Progs))
	}
	p := f.Progs[0]
	if p.Type != elf.PT_LOAD || p.Off != 0 || p.Vaddr != tinyBase || p.Filesz != 64+56+2 || p.Memsz != p.Filesz || p.Flags != elf.PF_R|elf.PF_X {
		t.Errorf("segment %+v", p.ProgHeader)
	}
	b, _ := io.ReadAll(p.Open())
	if f.Entry != tinyBase+64+56 || !bytes.Equal(b[f.Entry-tinyBase:], code) {
		t.Errorf("entry %#x: %x", f.Entry, b[f.Entry-tinyBase:])
	}
}

// TestHolder hands the write end of a pipe to a holder as the events
// are handed (closeEventFDs): it keeps it, and the teardown lock, while
// its standard input is open, and lets both go once that closes; for
// the tiny holder and for trueprof re-executed.
func TestHolder(t *testing.T) {
	for _, c := range []struct {
		name string
		path func() string
	}{
		{"tiny", tinyHolder},
		{"re-executed", func() string { return "" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "tiny" && (holderCode == nil || tinyHolder() == "") {
				testutil.Missing(t, "no tiny holder here (tiny.go: x86-64, an executable memfd, a dumpable process)")
			}
			defer func(old func() string) { tinyHolder = old }(tinyHolder)
			tinyHolder = c.path
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			gate := startHolder([]*os.File{w})
			if gate == nil {
				t.Fatal("no holder started")
			}
			w.Close()
			r.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			var b [1]byte
			if _, err := r.Read(b[:]); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("the pipe read %v with the holder's input open: want it held", err)
			}
			lock, err := openTeardownLock()
			if err != nil {
				t.Fatal(err)
			}
			defer lock.Close()
			if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
				t.Error("the teardown lock is free with the holder's input open")
				unix.Flock(int(lock.Fd()), unix.LOCK_UN)
			}
			gate.Close()
			WaitTeardowns()
			r.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := r.Read(b[:]); err != io.EOF {
				t.Errorf("the pipe read %v once the holder's input closed: want EOF", err)
			}
		})
	}
}
