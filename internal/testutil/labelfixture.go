package testutil

import (
	"bufio"
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// LabelFixture is a Go program whose goroutines carry runtime/pprof
// labels and say which, the oracle for recording labels. Worker W (1 to
// 3) runs in pprof.Do(ctx, pprof.Labels("worker", "W")) and calls its
// own function main.spinW LabelFixtureCalls[W] times; worker 2 then adds
// a second label in a nested pprof.Do ("phase" "inner") around calls of
// main.spinInner, and worker 3 starts a goroutine inside its pprof.Do
// that inherits its labels and calls main.spinChild. It prints
//
//	labels G K=V,K=V     goroutine G carries these labels from now on
//
// (keys sorted; an empty list when pprof.Do ends and restores none),
// each printed by the goroutine right after it changed them, and "sum S"
// at the end. With GOROUTINE_FIXTURE_WAIT set it waits for a byte on
// standard input first, as GoroutineFixture does.
const LabelFixture = `package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
)

` + goidSource + `
var mu sync.Mutex

// say prints the labels the calling goroutine carries now.
func say(ctx context.Context) {
	var pairs []string
	pprof.ForLabels(ctx, func(k, v string) bool {
		pairs = append(pairs, k+"="+v)
		return true
	})
	sort.Strings(pairs)
	mu.Lock()
	fmt.Printf("labels %d %s\n", goid(), strings.Join(pairs, ","))
	mu.Unlock()
}

func work(n int) int {
	s := 0
	for i := 0; i < 3000000; i++ {
		s = s*31 + i + n
	}
	return s & 0xff
}

//go:noinline
func spin1(n int) int { return work(n) }

//go:noinline
func spin2(n int) int { return work(n) }

//go:noinline
func spin3(n int) int { return work(n) }

//go:noinline
func spinInner(n int) int { return work(n) }

//go:noinline
func spinChild(n int) int { return work(n) }

var calls = [4]int{0, 20, 30, 40}

func main() {
	if os.Getenv("GOROUTINE_FIXTURE_WAIT") != "" {
		var b [1]byte
		os.Stdin.Read(b[:])
	}
	runtime.GOMAXPROCS(2)
	spins := [4]func(int) int{nil, spin1, spin2, spin3}
	var wg sync.WaitGroup
	sums := make([]int, 5)
	for w := 1; w <= 3; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pprof.Do(context.Background(), pprof.Labels("worker", strconv.Itoa(w)), func(ctx context.Context) {
				say(ctx)
				for i := 0; i < calls[w]; i++ {
					sums[w] += spins[w](i)
					runtime.Gosched()
				}
				switch w {
				case 2:
					pprof.Do(ctx, pprof.Labels("phase", "inner"), func(ctx context.Context) {
						say(ctx)
						for i := 0; i < 10; i++ {
							sums[w] += spinInner(i)
						}
					})
					say(ctx)
				case 3:
					done := make(chan bool)
					go func() {
						say(ctx)
						for i := 0; i < 10; i++ {
							sums[4] += spinChild(i)
						}
						close(done)
					}()
					<-done
				}
			})
			say(context.Background())
		}()
	}
	wg.Wait()
	s := 0
	for _, v := range sums {
		s += v
	}
	fmt.Println("sum", s)
}
`

// LabelFixtureCalls is how many times LabelFixture's worker W calls
// main.spinW (index W); worker 2 also calls main.spinInner, and worker
// 3's child goroutine main.spinChild, LabelFixtureInner times.
var LabelFixtureCalls = [4]int{0, 20, 30, 40}

// LabelFixtureInner is the calls of main.spinInner and main.spinChild.
const LabelFixtureInner = 10

// LabelChange is a change of a goroutine's labels that a recorder saw:
// the pairs are "key=value", sorted.
type LabelChange struct {
	GoID  uint64
	Pairs []string
}

// CheckLabelFixture compares the label changes recorded during a run of
// LabelFixture, in time order, with the ones it printed: each
// goroutine's printed sets must be its recorded ones, in order (a
// recorder may see a set twice in a row, which changes nothing). It
// returns the goroutine id of each worker (index W) and, at index 4,
// that of worker 3's child.
func CheckLabelFixture(t testing.TB, out []byte, changes []LabelChange) [5]uint64 {
	t.Helper()
	var ids [5]uint64
	printed := map[uint64][]string{}
	var order []uint64
	sc := bufio.NewScanner(bytes.NewReader(out))
	sum := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 && f[0] == "sum" {
			sum = true
		}
		if len(f) < 2 || f[0] != "labels" {
			continue
		}
		var g uint64
		fmt.Sscan(f[1], &g)
		set := ""
		if len(f) > 2 {
			set = f[2]
		}
		if _, ok := printed[g]; !ok {
			order = append(order, g)
		}
		printed[g] = append(printed[g], set)
		var w int
		if _, err := fmt.Sscanf(set, "worker=%d", &w); err == nil && w >= 1 && w <= 3 && set == fmt.Sprintf("worker=%d", w) {
			if ids[w] == 0 {
				ids[w] = g
			} else if ids[w] != g && ids[4] == 0 {
				ids[4] = g
			}
		}
	}
	if !sum || ids[1] == 0 || ids[2] == 0 || ids[3] == 0 || ids[4] == 0 {
		t.Fatalf("the fixture's output is damaged (%v):\n%s", ids, out)
	}
	recorded := map[uint64][]string{}
	for _, c := range changes {
		set := strings.Join(c.Pairs, ",")
		r := recorded[c.GoID]
		if len(r) > 0 && r[len(r)-1] == set {
			continue
		}
		recorded[c.GoID] = append(r, set)
	}
	for _, g := range order {
		want := printed[g]
		got := recorded[g]
		// The child inherits its set, and ends without changing it.
		if !slices.Equal(got, want) {
			t.Errorf("goroutine %d: recorded label sets %q, the program set %q", g, got, want)
		}
	}
	t.Logf("%d label changes recorded; workers and child %v", len(changes), ids)
	return ids
}
