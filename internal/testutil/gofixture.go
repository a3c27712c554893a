package testutil

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// BuildGo builds Go source (package main, standard library only) into
// dir/name with go build and the given flags, and returns the binary
// path. The build ignores the caller's workspace and GOFLAGS, so the
// fixture is what its source says.
func BuildGo(t testing.TB, dir, name, src string, flags ...string) string {
	t.Helper()
	goBin := RequireCommand(t, "go")
	mod := filepath.Join(dir, name+"-src")
	if err := os.MkdirAll(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mod, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module "+name+"\n\ngo 1.23\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, name)
	cmd := exec.Command(goBin, append(append([]string{"build"}, flags...), "-o", bin, ".")...)
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=", "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", flags, err, out)
	}
	return bin
}

// GoroutineFixture is a Go program whose goroutines say which they are
// and where they ran, the oracle for following goroutines across
// threads. With GOMAXPROCS=2, Workers goroutines each call main.spin
// Rounds times, and between calls block on a channel, sleep on a timer,
// yield (runtime.Gosched) or block in a raw nanosleep system call (which
// makes the runtime hand their P to another thread), so they move
// between threads. It prints:
//
//	goid W G         worker W is goroutine G (as runtime.Stack says)
//	seen G TID NS    goroutine G ran on thread TID at CLOCK_MONOTONIC NS
//	sum S            the work's result, always GoroutineFixtureSum
//
// plus "collector G" for the goroutine the workers send to, "main G" for
// the main goroutine, and "coroutine G" for the goroutine of an iter.Pull
// coroutine that the main goroutine then switches to and from 20 times
// (also with "seen" lines). With GOROUTINE_FIXTURE_WAIT set in its
// environment it waits for a byte on standard input before starting, so
// probes can be attached first.
const GoroutineFixture = `package main

import (
	"bytes"
	"fmt"
	"iter"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

const workers, rounds = 6, 40

` + goidSource + `
// seen returns the thread running the goroutine and a time at which it
// did, or false if the goroutine moved meanwhile.
func seen() (tid int, ns int64, ok bool) {
	var ts syscall.Timespec
	tid = syscall.Gettid()
	syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, 1, uintptr(unsafe.Pointer(&ts)), 0) // CLOCK_MONOTONIC
	return tid, ts.Nano(), syscall.Gettid() == tid
}

//go:noinline
func spin(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s = s*31 + i
	}
	return s & 0xffff
}

func main() {
	if os.Getenv("GOROUTINE_FIXTURE_WAIT") != "" {
		var b [1]byte
		os.Stdin.Read(b[:])
	}
	runtime.GOMAXPROCS(2)
	var mu sync.Mutex
	var lines []string
	say := func(format string, args ...any) {
		mu.Lock()
		lines = append(lines, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	say("main %d", goid())
	results := make(chan int)
	total := make(chan int)
	go func() {
		say("collector %d", goid())
		s := 0
		for v := range results {
			s += v
		}
		total <- s
	}()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := goid()
			say("goid %d %d", w, id)
			for r := 0; r < rounds; r++ {
				v := spin(2000000 + 1000*w + r)
				if tid, ns, ok := seen(); ok {
					say("seen %d %d %d", id, tid, ns)
				}
				results <- v
				switch r % 4 {
				case 0:
					time.Sleep(300 * time.Microsecond)
				case 1:
					runtime.Gosched()
				case 2:
					ts := syscall.NsecToTimespec(int64(time.Millisecond))
					syscall.Syscall(syscall.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
				}
			}
		}()
	}
	wg.Wait()
	close(results)
	sum := <-total
	// A coroutine switches goroutines without the scheduler.
	next, stop := iter.Pull(func(yield func(int) bool) {
		id := goid()
		say("coroutine %d", id)
		for i := 0; ; i++ {
			if tid, ns, ok := seen(); ok {
				say("seen %d %d %d", id, tid, ns)
			}
			if !yield(i) {
				return
			}
		}
	})
	me := goid()
	for i := 0; i < 20; i++ {
		next()
		if tid, ns, ok := seen(); ok {
			say("seen %d %d %d", me, tid, ns)
		}
	}
	stop()
	for _, l := range lines {
		fmt.Println(l)
	}
	fmt.Println("sum", sum)
}
`

// goidSource is the fixtures' function that returns the calling
// goroutine's id, as runtime.Stack prints it (it needs bytes, runtime
// and strconv).
const goidSource = `func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b, _ = bytes.CutPrefix(b, []byte("goroutine "))
	b, _, _ = bytes.Cut(b, []byte(" "))
	id, _ := strconv.ParseUint(string(b), 10, 64)
	return id
}
`

// GoroutineFixtureWorkers and GoroutineFixtureRounds are GoroutineFixture's
// worker goroutines and the calls of main.spin each makes; GoroutineFixtureSum
// is the sum it prints when its work ran unharmed.
const (
	GoroutineFixtureWorkers = 6
	GoroutineFixtureRounds  = 40
	GoroutineFixtureSum     = 8078664
)

// GoSwitch is a goroutine switch a recorder saw: from Time, thread TID
// runs goroutine GoID.
type GoSwitch struct {
	Time uint64
	TID  uint32
	GoID uint64
}

// GoroutineAt returns the goroutine thread tid ran at time t according to
// switches, sorted by time, or 0 if the thread had not switched yet.
func GoroutineAt(switches []GoSwitch, tid uint32, t uint64) uint64 {
	i, _ := slices.BinarySearchFunc(switches, t+1, func(s GoSwitch, t uint64) int {
		if s.Time < t {
			return -1
		}
		return 1
	})
	for i--; i >= 0; i-- {
		if switches[i].TID == tid {
			return switches[i].GoID
		}
	}
	return 0
}

// CheckGoroutineFixture compares the switches recorded during a run of
// GoroutineFixture, sorted by time, with what the run printed: its
// output is whole, every worker's goroutine id is among the switches,
// every "seen" line's thread was running that goroutine at that time by
// the switches, and some worker ran on more than one thread. It returns
// the workers' goroutine ids.
func CheckGoroutineFixture(t testing.TB, out []byte, switches []GoSwitch) []uint64 {
	t.Helper()
	var workers []uint64
	seen, wrong := 0, 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	sum := -1
	for sc.Scan() {
		var w, tid int
		var g, ns uint64
		line := sc.Text()
		scan := func(format string, args ...any) bool {
			_, err := fmt.Sscanf(line, format, args...)
			return err == nil
		}
		switch {
		case scan("goid %d %d", &w, &g):
			workers = append(workers, g)
		case scan("seen %d %d %d", &g, &tid, &ns):
			seen++
			if got := GoroutineAt(switches, uint32(tid), ns); got != g {
				wrong++
				if wrong <= 5 {
					t.Errorf("goroutine %d ran on thread %d at %d, but the switches say goroutine %d", g, tid, ns, got)
				}
			}
		default:
			scan("sum %d", &sum)
		}
	}
	if sum != GoroutineFixtureSum || len(workers) != GoroutineFixtureWorkers {
		t.Errorf("the fixture's output is damaged: sum %d, %d workers:\n%s", sum, len(workers), out)
	}
	if wrong > 0 {
		t.Errorf("%d of %d observed threads disagree with the switches", wrong, seen)
	}
	threads := map[uint64]map[uint32]bool{}
	for _, s := range switches {
		if threads[s.GoID] == nil {
			threads[s.GoID] = map[uint32]bool{}
		}
		threads[s.GoID][s.TID] = true
	}
	migrated := 0
	for _, g := range workers {
		switch n := len(threads[g]); {
		case n == 0:
			t.Errorf("worker goroutine %d: no switch to it recorded", g)
		case n > 1:
			migrated++
		}
	}
	if migrated == 0 {
		t.Errorf("no worker goroutine was seen on more than one thread")
	}
	t.Logf("%d switches; %d workers, %d of them on several threads; %d observations agree", len(switches), len(workers), migrated, seen-wrong)
	return workers
}

// SleepersGo runs 8 goroutines, each calling worker, which calls mid
// 2000 times, which calls leaf 10 times and sleeps every 50th call: the
// goroutines park inside mid (time.Sleep, runtime.gopark, runtime.mcall)
// and resume, often on another thread. It prints the sum of the results.
const SleepersGo = `package main

import (
	"fmt"
	"sync"
	"time"
)

//go:noinline
func leaf(i int) int { return i*3 + 1 }

//go:noinline
func mid(i int) int {
	s := 0
	for k := 0; k < 10; k++ {
		s += leaf(i + k)
	}
	if i%50 == 0 {
		time.Sleep(100 * time.Microsecond)
	}
	return s
}

//go:noinline
func worker(n int, out chan<- int) {
	s := 0
	for i := 0; i < n; i++ {
		s += mid(i)
	}
	out <- s
}

func main() {
	out := make(chan int, 8)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() { defer wg.Done(); worker(2000, out) }()
	}
	wg.Wait()
	close(out)
	t := 0
	for v := range out {
		t += v
	}
	fmt.Println(t)
}
`
