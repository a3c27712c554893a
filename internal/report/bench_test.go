package report

import (
	"testing"

	"trueprof/internal/model"
	"trueprof/internal/model/modeltest"
)

// BenchmarkPrepare groups a million samples taken round-robin on 64
// threads of 8 processes, a few distinct stacks each.
func BenchmarkPrepare(b *testing.B) {
	b.Run("thread", func(b *testing.B) { benchmarkPrepare(b, false) })
	b.Run("goroutine", func(b *testing.B) { benchmarkPrepare(b, true) })
}

func benchmarkPrepare(b *testing.B, byGoroutine bool) {
	rb := modeltest.New()
	for pid := uint32(100); pid < 108; pid++ {
		for tid := pid * 100; tid < pid*100+8; tid++ {
			rb.Thread(pid, tid, "t")
		}
	}
	stacks := []string{"main;f;g", "main;f;h", "main;g>i", "main;f;g;h"}
	for _, s := range stacks {
		rb.Add(100, 10000, s, 1) // interns the stacks
	}
	p := rb.Profile()
	ids := make([]uint32, len(stacks))
	for i := range stacks {
		ids[i] = p.Samples[i].Stack
	}
	p.Samples = p.Samples[:0]
	const n = 1_000_000
	for i := range n {
		th := p.Threads[i%len(p.Threads)]
		t := 2_000_000_000 + uint64(i)*1000
		p.Samples = append(p.Samples, model.Sample{Time: t, PID: th.PID, TID: th.TID, Period: 1000, Stack: ids[i%len(ids)]})
		if byGoroutine && i%64 < len(p.Threads) && i%97 == 0 {
			p.GoIDs = append(p.GoIDs, model.GoID{Time: t, PID: th.PID, TID: th.TID, GoID: uint64(i % 13)})
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if d := prepare(source{p: p}, byGoroutine); d.Total.Samples != n {
			b.Fatal(d.Total.Samples)
		}
	}
}
