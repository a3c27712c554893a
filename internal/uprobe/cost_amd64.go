package uprobe

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"trueprof/internal/trace"
)

// Addresses of the functions of cost_amd64.s: one never probed, four
// probed one way each.
var costPlainPC, costPushPC, costPushRetPC, costMovPC, costMovRetPC uintptr

// costLoop calls the function at fn n times (n > 0).
//
//go:noescape
func costLoop(fn uintptr, n int)

// costRounds is how many times SiteCosts times each function. The
// functions take turns within a round, so a busy moment of the machine
// slows every class alike instead of one class's whole measurement (a
// return probe's exit, the difference of two classes, came out 0 when
// its two terms were timed a second apart on a loaded machine). Loops
// are short (1-2 ms) and many, so that some run within one time slice.
const costRounds = 40

// selfOffset returns the file this process maps at pc and pc's offset in
// it. The path is /proc/self/exe when pc is in the executable, which
// works even if the file was replaced since.
func selfOffset(pc uintptr) (string, uint64, error) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	exe, _ := os.Readlink("/proc/self/exe")
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		lo, hi, _ := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		pgoff, err3 := strconv.ParseUint(fields[2], 16, 64)
		if err1 != nil || err2 != nil || err3 != nil || uint64(pc) < start || uint64(pc) >= end {
			continue
		}
		path := strings.Join(fields[5:], " ")
		if path == exe || strings.HasSuffix(path, " (deleted)") {
			path = "/proc/self/exe"
		}
		return path, uint64(pc) - start + pgoff, nil
	}
	if err := sc.Err(); err != nil {
		return "", 0, err
	}
	return "", 0, errors.New("uprobe: cost functions not found in /proc/self/maps")
}

// SiteCosts measures the cost of one hit of each class of probe site on
// this machine (ns): an entry probe on an emulated instruction (push
// %rbp) and on one the kernel single-steps (mov), a return probe's exit
// (a uretprobe's trampoline, beyond its entry probe) and a uprobe on a
// RET instruction (single-stepped). Calibration stores them so that
// reports charge each probed function the cost of its own sites.
//
// It probes five small functions of trueprof's own executable through
// Attach, so it needs the same privileges, times a loop of calls to each
// costRounds times in turn on the thread's CPU clock, and takes each
// function's fastest loop.
func SiteCosts() (trace.SiteCosts, error) {
	type fn struct {
		pc    uintptr
		delta uintptr // offset of the probed instruction; -1: not probed
		ret   bool
		n     int // calls per loop: emulated hits cost about 1 µs, stepped ones over 10 µs
	}
	const (
		plain = iota
		push
		pushRet
		mov
		movRet
	)
	fns := []fn{
		plain:   {costPlainPC, ^uintptr(0), false, 2000},
		push:    {costPushPC, 0, false, 2000},
		pushRet: {costPushRetPC, 0, true, 2000},
		mov:     {costMovPC, 0, false, 100},
		movRet:  {costMovRetPC, 2, false, 100},
	}
	var path string
	var sites []Site
	want := 0
	for _, f := range fns {
		if f.delta == ^uintptr(0) {
			continue
		}
		p, off, err := selfOffset(f.pc)
		if err != nil {
			return trace.SiteCosts{}, err
		}
		path = p
		sites = append(sites, Site{Function: "cost", Entry: off + uint64(f.delta), Return: f.ret})
		if f.ret {
			want += 2 * f.n * costRounds
		} else {
			want += f.n * costRounds
		}
	}
	set, err := Attach(os.Getpid(), path, sites)
	if err != nil {
		return trace.SiteCosts{}, err
	}
	defer set.Close()
	best := make([]float64, len(fns))
	for i := range best {
		best[i] = math.Inf(1)
	}
	// The thread's CPU clock, which includes the probes' kernel time but
	// not the time other tasks ran while this one waited.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu := func() float64 {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
			panic(err) // every Linux since 2.6.12 has it
		}
		return float64(ts.Nano())
	}
	hits := 0
	for range costRounds {
		for i, f := range fns {
			t := cpu()
			costLoop(f.pc, f.n)
			best[i] = min(best[i], (cpu()-t)/float64(f.n))
		}
		// Drain after every round: a round's hits fit the ring, seven do not.
		hits += set.Read(func(Event) {})
	}
	if hits != want {
		return trace.SiteCosts{}, fmt.Errorf("uprobe: cost measurement saw %d probe hits, want %d", hits, want)
	}
	emulated := max(best[push]-best[plain], 0)
	return trace.SiteCosts{
		EntryEmulated: emulated,
		EntryStepped:  max(best[mov]-best[plain], 0),
		ExitReturn:    max(best[pushRet]-best[push], 0),
		ExitRetInsn:   max(best[movRet]-best[plain], 0),
		// An exit where a call returns is a hit on an emulated
		// instruction, as the push's: its split around the timestamp
		// is the in-run calibration's to measure.
		ExitCallSite: emulated,
	}, nil
}
