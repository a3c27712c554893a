package benchutil

import (
	"context"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"trueprof/internal/calibrate/calfit"
	"trueprof/internal/model"
	"trueprof/internal/perf"
	"trueprof/internal/record"
)

// GoFixture is a Go program that times its own loop and prints the
// nanoseconds first, built once: the benchmarks of what following a Go
// target costs compare its loop plain, sampled, and sampled with
// goroutines followed.
type GoFixture struct {
	dir  string
	Argv []string // the binary and its arguments
}

// BuildGoFixture builds the Go source src (package main, module name)
// in dir, to run with args.
func BuildGoFixture(dir, name, src string, args ...string) *GoFixture {
	mod := filepath.Join(dir, "src")
	os.MkdirAll(mod, 0o755)
	os.WriteFile(filepath.Join(mod, "main.go"), []byte(src), 0o644)
	os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module "+name+"\n\ngo 1.22\n"), 0o644)
	bin := filepath.Join(dir, name)
	Run("go", "build", "-C", mod, "-o", bin, ".")
	return &GoFixture{dir: dir, Argv: append([]string{bin}, args...)}
}

// loop parses the fixture's timing of its loop from its output.
func loop(out string) time.Duration {
	f := strings.Fields(out)
	if len(f) == 0 {
		log.Fatalf("fixture output %q", out)
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		log.Fatalf("fixture output %q", out)
	}
	return time.Duration(ns)
}

// Plain runs the fixture unrecorded and returns its loop's time.
func (g *GoFixture) Plain() time.Duration { return loop(Output(g.Argv...)) }

// Record records the fixture, sampling cpu-clock, with goroutines (and
// labels) followed unless noGoroutines, and returns its loop's time,
// the recording and the records it lost.
func (g *GoFixture) Record(noGoroutines bool) (time.Duration, *model.Profile, uint64) {
	ev, err := perf.ParseEvent("cpu-clock")
	if err != nil {
		log.Fatal(err)
	}
	var out strings.Builder
	trace := filepath.Join(g.dir, "t.trace")
	res, err := record.Run(context.Background(), record.Config{
		Output: trace, Event: ev, Command: g.Argv, Stdout: &out, NoGoroutines: noGoroutines,
	})
	if err != nil {
		log.Fatal(err)
	}
	p, err := model.Open(trace)
	if err != nil {
		log.Fatal(err)
	}
	return loop(out.String()), p, res.Lost
}

// Comparison is the medians of runs of a GoFixture: plain, sampled, and
// sampled with goroutines followed, with what count found in the last
// kind of recording, and the records lost in all runs of each.
type Comparison struct {
	Plain, Sampled, Followed time.Duration
	Count                    int
	LostSampling, Lost       uint64
}

// Compare runs the fixture runs times each way.
func (g *GoFixture) Compare(runs int, count func(*model.Profile) int) Comparison {
	var c Comparison
	var plain, sampled, followed []time.Duration
	var counts []int
	for range runs {
		plain = append(plain, g.Plain())
		d, _, l := g.Record(true)
		sampled = append(sampled, d)
		c.LostSampling += l
		d, p, l := g.Record(false)
		followed = append(followed, d)
		counts = append(counts, count(p))
		c.Lost += l
	}
	c.Plain, c.Sampled, c.Followed, c.Count = calfit.Median(plain), calfit.Median(sampled), calfit.Median(followed), calfit.Median(counts)
	return c
}
