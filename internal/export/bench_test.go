package export

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
	"trueprof/internal/trace"
)

// BenchmarkPPROFStream measures the streamed pprof export of a sampling
// trace (1M samples of 4 threads over 63 stacks: the samples grouped in
// one pass, no tree replayed) and of a hook trace (modeltest.WriteCalls,
// 600k events: the trees replayed in one pass).
func BenchmarkPPROFStream(b *testing.B) {
	dir := b.TempDir()
	samples := filepath.Join(dir, "samples.trace")
	w := modeltest.NewTraceFile(b, samples, &trace.Header{Event: "cpu-clock", Freq: 999}, "main", "a", "b", "c", "d", "e", "f", "g")
	for k := uint32(1); k <= 63; k++ {
		w.Write(&trace.StackNode{ID: k, Parent: k / 2, Location: 1 + k%8})
	}
	w.Write(&trace.Comm{Time: 1000, PID: 7, TID: 7, Name: w.Intern("app"), Exec: true})
	for tid := uint32(8); tid < 11; tid++ {
		w.Write(&trace.Fork{Time: 1001, PID: 7, PPID: 7, TID: tid, PTID: 7})
	}
	now := uint64(2000)
	for i := range 1_000_000 {
		now += 250
		w.Write(&trace.Sample{Time: now, PID: 7, TID: uint32(7 + i%4), Period: 1_001_001, Stack: uint32(1 + (i*7)%63)})
	}
	w.Close(now + 10)
	var calls bytes.Buffer
	if err := modeltest.WriteCalls(&calls, 100_000); err != nil {
		b.Fatal(err)
	}
	hooks := filepath.Join(dir, "hooks.trace")
	if err := os.WriteFile(hooks, calls.Bytes(), 0o644); err != nil {
		b.Fatal(err)
	}
	for _, bench := range []struct{ name, path string }{{"samples=1M", samples}, {"events=600k", hooks}} {
		b.Run(bench.name, func(b *testing.B) {
			s, err := model.OpenStream(bench.path)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if err := PPROFStream(io.Discard, s, model.Filter{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
