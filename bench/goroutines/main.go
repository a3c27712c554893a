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
	"flag"
	"fmt"
	"log"
	"strconv"

	"trueprof/bench/internal/benchutil"
	"trueprof/internal/model"
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
	fx := benchutil.BuildGoFixture(dir, "pingpong", fixture, strconv.Itoa(*trips), strconv.Itoa(*procs))
	c := fx.Compare(*runs, func(p *model.Profile) int { return len(p.GoIDs) })
	fmt.Printf("%d round trips, GOMAXPROCS=%d, medians of %d runs\n", *trips, *procs, *runs)
	fmt.Printf("plain            %8.1f ms\n", benchutil.MS(c.Plain))
	fmt.Printf("sampling         %8.1f ms  %d records lost in all runs\n", benchutil.MS(c.Sampled), c.LostSampling)
	fmt.Printf("with goroutines  %8.1f ms  %d switches recorded (%.0f per second), %d records lost in all runs\n",
		benchutil.MS(c.Followed), c.Count, float64(c.Count)/c.Followed.Seconds(), c.Lost)
	fmt.Printf("cost per switch  %8.0f ns (with goroutines - sampling) / switches\n", float64(c.Followed-c.Sampled)/float64(c.Count))
}
