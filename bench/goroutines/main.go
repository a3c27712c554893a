// Command goroutines measures what following goroutines costs a Go
// target: the fixture passes a value back and forth between two
// goroutines over unbuffered channels (two goroutine switches a round
// trip) and times its own loop. It is run plain, recorded with sampling
// alone (record.Config.NoGoroutines), and recorded with goroutines; the
// difference of the last two, divided by the switches the trace holds,
// is the cost of one switch.
//
// Usage (root, from the repository root):
//
//	go run ./bench/goroutines [-runs 5] [-trips 500000] [-procs 1]
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"trueprof/bench/internal/benchutil"
	"trueprof/internal/model"
	"trueprof/internal/perf"
	"trueprof/internal/record"
)

const fixture = `package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"
)

func main() {
	trips, _ := strconv.Atoi(os.Args[1])
	procs, _ := strconv.Atoi(os.Args[2])
	runtime.GOMAXPROCS(procs)
	ping, pong := make(chan int), make(chan int)
	go func() {
		for v := range ping {
			pong <- v + 1
		}
	}()
	start := time.Now()
	v := 0
	for i := 0; i < trips; i++ {
		ping <- v
		v = <-pong
	}
	fmt.Println(time.Since(start).Nanoseconds(), v)
}
`

func main() {
	record.RunWrapper()
	runs := flag.Int("runs", 5, "repetitions (medians are reported)")
	trips := flag.Int("trips", 500000, "round trips between the two goroutines")
	procs := flag.Int("procs", 1, "the fixture's GOMAXPROCS")
	flag.Parse()
	log.SetFlags(0)
	dir, cleanup := benchutil.Workdir("trueprof-goroutines-")
	defer cleanup()
	src := filepath.Join(dir, "src")
	os.MkdirAll(src, 0o755)
	os.WriteFile(filepath.Join(src, "main.go"), []byte(fixture), 0o644)
	os.WriteFile(filepath.Join(src, "go.mod"), []byte("module pingpong\n\ngo 1.22\n"), 0o644)
	bin := filepath.Join(dir, "pingpong")
	benchutil.Run("go", "build", "-C", src, "-o", bin, ".")
	argv := []string{bin, strconv.Itoa(*trips), strconv.Itoa(*procs)}
	ev, err := perf.ParseEvent("cpu-clock")
	if err != nil {
		log.Fatal(err)
	}

	// loop parses the fixture's own timing of its loop.
	loop := func(out string) time.Duration {
		ns, err := strconv.ParseInt(strings.Fields(out)[0], 10, 64)
		if err != nil {
			log.Fatalf("fixture output %q", out)
		}
		return time.Duration(ns)
	}
	recorded := func(noGoroutines bool) (time.Duration, int, uint64) {
		var out strings.Builder
		trace := filepath.Join(dir, "t.trace")
		res, err := record.Run(context.Background(), record.Config{
			Output: trace, Event: ev, Command: argv, Stdout: &out, NoGoroutines: noGoroutines,
		})
		if err != nil {
			log.Fatal(err)
		}
		p, err := model.Open(trace)
		if err != nil {
			log.Fatal(err)
		}
		return loop(out.String()), len(p.GoIDs), res.Lost
	}
	var plain, sampled, followed []time.Duration
	var switches []int
	var lost, lostSampling uint64
	for range *runs {
		plain = append(plain, loop(benchutil.Output(argv...)))
		d, _, l := recorded(true)
		sampled = append(sampled, d)
		lostSampling += l
		d, n, l := recorded(false)
		followed = append(followed, d)
		switches = append(switches, n)
		lost += l
	}
	p, s, f, n := benchutil.Median(plain), benchutil.Median(sampled), benchutil.Median(followed), benchutil.Median(switches)
	fmt.Printf("%d round trips, GOMAXPROCS=%d, medians of %d runs\n", *trips, *procs, *runs)
	fmt.Printf("plain            %8.1f ms\n", ms(p))
	fmt.Printf("sampling         %8.1f ms  %d records lost in all runs\n", ms(s), lostSampling)
	fmt.Printf("with goroutines  %8.1f ms  %d switches recorded (%.0f per second), %d records lost in all runs\n",
		ms(f), n, float64(n)/f.Seconds(), lost)
	fmt.Printf("cost per switch  %8.0f ns (with goroutines - sampling) / switches\n", float64(f-s)/float64(n))
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
