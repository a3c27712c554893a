package unwind

import (
	"encoding/binary"
	"os"
	"testing"

	"trueprof/internal/symbolize"
)

// libcCode is a Code over libc's real CFI rows, pc taken as a file
// offset, with the fake program's functions above them.
type libcCode struct {
	f     *symbolize.File
	calls int
}

func (c *libcCode) Row(pc uint64) (symbolize.UnwindRow, Kind, error) {
	c.calls++
	if pc < 0x1000 {
		return symbolize.UnwindRow{}, KindUnmapped, nil
	}
	if row, kind, err := code.Row(pc); kind != KindUnmapped {
		return row, kind, err
	}
	row, err := c.f.UnwindRow(pc)
	return row, KindFile, err
}

// FuzzWalk walks random stacks from random registers through libc's
// rows: every walk ends within MaxFrames steps, without a panic.
func FuzzWalk(f *testing.F) {
	const libc = "/lib/x86_64-linux-gnu/libc.so.6"
	if _, err := os.Stat(libc); err != nil {
		f.Skip("no libc at " + libc)
	}
	lf, err := symbolize.OpenFile(libc)
	if err != nil {
		f.Fatal(err)
	}
	defer lf.Close()
	seed := make([]byte, 512)
	for i := 0; i+8 <= len(seed); i += 16 {
		binary.LittleEndian.PutUint64(seed[i:], uint64(0x29000+i*64))
		binary.LittleEndian.PutUint64(seed[i+8:], stackTop+uint64(i)+64)
	}
	f.Add(uint64(0x29d90), uint64(stackTop+64), seed, true, false)
	f.Add(uint64(fnLeaf), uint64(0), seed, false, true)
	f.Fuzz(func(t *testing.T, ip, bp uint64, data []byte, complete, dwarf bool) {
		c := &libcCode{f: lf}
		mode := ModeAuto
		if dwarf {
			mode = ModeDWARF
		}
		kernel := []uint64{ip, ip ^ 1, fnGo}
		frames, reason := Walk(c, Regs{IP: ip, SP: stackTop, BP: bp, BPValid: true},
			Stack{SP: stackTop, Data: data, Complete: complete}, kernel, mode, nil)
		if len(frames) > MaxFrames || c.calls > MaxFrames {
			t.Fatalf("%d frames, %d lookups (reason %q)", len(frames), c.calls, reason)
		}
		if len(frames) == 0 || frames[0].PC != ip || !frames[0].Exact {
			t.Fatalf("first frame %+v, want the exact IP %#x", frames, ip)
		}
	})
}
