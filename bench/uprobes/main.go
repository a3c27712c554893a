// Command uprobes compares the two ways trueprof could place many uprobes
// and prints what each costs on this machine:
//
//   - one perf_event_open descriptor per probe through the uprobe PMU
//     (entry and uretprobe for each function), per thread (pid, cpu -1)
//     and per CPU with inherit, which a launched target needs because the
//     kernel refuses to map the ring of an inherited per-thread event;
//   - one BPF uprobe_multi link for all entries and one for all
//     uretprobes (uprobe.Attach).
//
// It also prints the per-hit cost of a probe (uprobe.SiteCosts) and the time a
// fully probed run of the fixture takes.
//
// Usage (as root, from the repository root):
//
//	go run ./bench/uprobes [-n 5000] [-pmu 500]
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"trueprof/internal/perf"
	"trueprof/internal/testutil"
	"trueprof/internal/uprobe"
)

func main() {
	n := flag.Int("n", 5000, "functions to probe (each gets an entry probe and a uretprobe)")
	nPMU := flag.Int("pmu", 500, "functions to probe through per-probe PMU descriptors, whose closing is slow")
	flag.Parse()
	log.SetFlags(0)

	dir, err := os.MkdirTemp("", "trueprof-bench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "many")
	if err := os.WriteFile(bin+".c", []byte(testutil.ManyFunctionsC(*n)), 0o644); err != nil {
		log.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-O1", "-fno-omit-frame-pointer", "-o", bin, bin+".c").CombinedOutput(); err != nil {
		log.Fatalf("gcc: %v\n%s", err, out)
	}
	t := time.Now()
	sites, err := uprobe.Plan(bin, []string{"f[0-9]*"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("plan: %d functions in %v\n", len(sites), time.Since(t).Round(time.Millisecond))

	cmd := exec.Command(bin)
	in, err := cmd.StdinPipe()
	if err != nil {
		log.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	defer cmd.Process.Kill()
	time.Sleep(100 * time.Millisecond) // let it exec and block on stdin
	pid := cmd.Process.Pid

	cpus, err := perf.OnlineCPUs()
	if err != nil {
		log.Fatal(err)
	}
	share := min(len(sites), *nPMU)
	pmu(bin, sites[:share], "PMU per thread (pid, cpu -1)", []int{-1}, pid, false)
	pmu(bin, sites[:share], "PMU per CPU with inherit", cpus, pid, true)

	t = time.Now()
	set, err := uprobe.Attach(pid, bin, sites)
	if err != nil {
		log.Fatal(err)
	}
	attach := time.Since(t)
	fmt.Printf("BPF uprobe_multi: %d probes attached in %v (2 links, 1 ring descriptor)\n", 2*len(sites), attach.Round(time.Millisecond))
	t = time.Now()
	in.Write([]byte{1})
	if err := cmd.Wait(); err != nil {
		log.Fatal(err)
	}
	run := time.Since(t)
	events := set.Read(func(uprobe.Event) {})
	t = time.Now()
	if err := set.Close(); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("BPF uprobe_multi: probed run %v, %d events, %d lost; detached in %v\n",
		run.Round(time.Millisecond), events, set.Lost(), time.Since(t).Round(time.Millisecond))

	c, err := uprobe.SiteCosts()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("per hit: entry %.2f µs on an emulated instruction (push %%rbp), %.2f µs single-stepped (mov %%edi,%%edx); exit %.2f µs through a uretprobe, %.2f µs on a RET\n",
		c.EntryEmulated/1000, c.EntryStepped/1000, c.ExitReturn/1000, c.ExitRetInsn/1000)
}

// pmu opens an entry probe and a uretprobe per site through the uprobe
// PMU on each of cpus, then closes them, and prints the times.
func pmu(bin string, sites []uprobe.Site, what string, cpus []int, pid int, inherit bool) {
	var fds []int
	t := time.Now()
	for _, s := range sites {
		for _, ret := range []bool{false, true} {
			for _, cpu := range cpus {
				fd, err := perf.OpenUprobe(perf.Uprobe{Path: bin, Offset: s.Entry, Return: ret}, pid, cpu,
					perf.UprobeOptions{Sample: true, Inherit: inherit})
				if err != nil {
					log.Fatalf("%s: after %d descriptors: %v", what, len(fds), err)
				}
				fds = append(fds, fd)
			}
		}
	}
	open := time.Since(t)
	// Closing a uprobe event waits for an RCU tasks-trace grace period
	// (tens of ms): time a few closes one by one, then close the rest
	// from many threads at once so that they share grace periods.
	const serial = 20
	t = time.Now()
	for _, fd := range fds[:serial] {
		perf.Close(fd)
	}
	perClose := time.Since(t) / serial
	t = time.Now()
	var wg sync.WaitGroup
	rest := make(chan int)
	for range 256 {
		wg.Go(func() {
			for fd := range rest {
				perf.Close(fd)
			}
		})
	}
	for _, fd := range fds[serial:] {
		rest <- fd
	}
	close(rest)
	wg.Wait()
	parallel := time.Since(t)
	per := open / time.Duration(len(fds))
	fmt.Printf("%s: %d functions, %d descriptors opened in %v (%v each)\n", what, len(sites), len(fds), open.Round(time.Millisecond), per.Round(time.Microsecond))
	fmt.Printf("    closing: %v each one by one (%v for 10,000 probes); the other %d from 256 threads in %v\n",
		perClose.Round(time.Millisecond), (perClose * 10000 * time.Duration(len(cpus))).Round(time.Second), len(fds)-serial, parallel.Round(time.Millisecond))
}
