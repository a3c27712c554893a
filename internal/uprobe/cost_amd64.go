package uprobe

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"trueprof/internal/trace"
)

// Addresses of the probed functions of cost_amd64.s.
var costPushPC, costMovPC uintptr

// costLoop calls the function at fn n times (n > 0).
//
//go:noescape
func costLoop(fn uintptr, n int)

// Cost measures the per-hit cost of an entry probe on an emulated and a
// non-emulated instruction on this machine (ns). It probes two functions
// of trueprof's own executable, push %rbp and mov %edi,%edx, through
// Attach, so it needs the same privileges, and returns the smallest extra
// time per call over a few runs.
func Cost() (emulated, stepped float64, err error) {
	// Emulated hits cost about 1 µs and stepped ones over 10 µs here.
	if emulated, err = hitCost(costPushPC, 0, false, 20000); err != nil {
		return 0, 0, err
	}
	if stepped, err = hitCost(costMovPC, 0, false, 1000); err != nil {
		return 0, 0, err
	}
	return emulated, stepped, nil
}

// hitCost probes the instruction at pc+delta of this process (with a
// uretprobe too if ret) and returns the extra ns per call of the function
// at pc.
func hitCost(pc, delta uintptr, ret bool, n int) (float64, error) {
	path, off, err := selfOffset(pc)
	if err != nil {
		return 0, err
	}
	run := func() time.Duration {
		best := time.Duration(1<<63 - 1)
		for range 3 {
			t := time.Now()
			costLoop(pc, n)
			best = min(best, time.Since(t))
		}
		return best
	}
	base := run()
	site := Site{Function: "cost", Entry: off + uint64(delta), Return: ret}
	set, err := Attach(os.Getpid(), path, []Site{site})
	if err != nil {
		return 0, err
	}
	defer set.Close()
	probed := run()
	hits := set.Read(func(Event) {})
	if want := 3 * n; !ret && hits != want || ret && hits != 2*want {
		return 0, fmt.Errorf("uprobe: cost measurement saw %d probe hits for %d calls", hits, 3*n)
	}
	return float64(probed-base) / float64(n), nil
}

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
func SiteCosts() (trace.SiteCosts, error) {
	var c trace.SiteCosts
	var err error
	if c.EntryEmulated, c.EntryStepped, err = Cost(); err != nil {
		return c, err
	}
	// costMov's RET is at +2.
	if c.ExitRetInsn, err = hitCost(costMovPC, 2, false, 1000); err != nil {
		return c, err
	}
	both, err := hitCost(costPushPC, 0, true, 20000)
	if err != nil {
		return c, err
	}
	c.ExitReturn = max(both-c.EntryEmulated, 0)
	return c, nil
}
