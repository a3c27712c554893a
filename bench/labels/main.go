// Command labels measures what recording runtime/pprof labels costs a Go
// target: the fixture sets its goroutine's labels to one of two label
// sets, alternately (pprof.SetGoroutineLabels, the call pprof.Do makes
// twice), and times its own loop. It is run plain, recorded with sampling
// alone (record.Config.NoGoroutines: no goroutines, no labels), and
// recorded with goroutines and labels; the difference of the last two,
// divided by the label changes the trace holds, is the cost of one
// change.
//
// Usage (root, from the repository root):
//
//	go run ./bench/labels [-runs 5] [-changes 200000] [-labels 2]
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
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"time"
)

func main() {
	changes, _ := strconv.Atoi(os.Args[1])
	n, _ := strconv.Atoi(os.Args[2])
	var ctxs [2]context.Context
	for i := range ctxs {
		var kv []string
		for k := 0; k < n; k++ {
			kv = append(kv, "key"+strconv.Itoa(k), "value-"+strconv.Itoa(i))
		}
		ctxs[i] = pprof.WithLabels(context.Background(), pprof.Labels(kv...))
	}
	start := time.Now()
	for i := 0; i < changes; i++ {
		pprof.SetGoroutineLabels(ctxs[i&1])
	}
	fmt.Println(time.Since(start).Nanoseconds())
}
`

func main() {
	record.RunWrapper()
	runs := flag.Int("runs", 5, "repetitions (medians are reported)")
	changes := flag.Int("changes", 200000, "label changes")
	labels := flag.Int("labels", 2, "labels in each set")
	flag.Parse()
	log.SetFlags(0)
	dir, cleanup := benchutil.Workdir("trueprof-labels-")
	defer cleanup()
	fx := benchutil.BuildGoFixture(dir, "labels", fixture, strconv.Itoa(*changes), strconv.Itoa(*labels))
	c := fx.Compare(*runs, func(p *model.Profile) int { return len(p.Labels) })
	fmt.Printf("%d label changes of %d labels each, medians of %d runs\n", *changes, *labels, *runs)
	fmt.Printf("plain            %8.1f ms\n", benchutil.MS(c.Plain))
	fmt.Printf("sampling         %8.1f ms\n", benchutil.MS(c.Sampled))
	fmt.Printf("with labels      %8.1f ms  %d changes recorded, %d records lost in all runs\n", benchutil.MS(c.Followed), c.Count, c.Lost)
	fmt.Printf("cost per change  %8.0f ns (with labels - sampling) / changes made\n", float64(c.Followed-c.Sampled)/float64(*changes))
}
