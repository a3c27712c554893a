package trace

import (
	"fmt"
	"math/rand/v2"
)

// recorderStream returns what a recorder writes for a realistic
// profile: strings, modules, threads, a few hundred locations and stack
// nodes, then n cpu-clock samples about 1 ms apart from two threads,
// with occasional other records mixed in, and an End record. It is
// deterministic.
func recorderStream(n int) []Record {
	rng := rand.New(rand.NewPCG(1, 2))
	var recs []Record
	str := func(s string) uint32 {
		id := uint32(0)
		for _, r := range recs {
			if _, ok := r.(*String); ok {
				id++
			}
		}
		recs = append(recs, &String{ID: id + 1, Text: s})
		return id + 1
	}
	const pid = 41234
	t := uint64(1_000_000_000_000)
	exe := str("/usr/bin/app")
	libc := str("/usr/lib/x86_64-linux-gnu/libc.so.6")
	recs = append(recs,
		&Comm{Time: t, PID: pid, TID: pid, Name: str("app"), Exec: true},
		&Module{Time: t, PID: pid, TID: pid, Start: 0x400000, Len: 0x20000, Prot: 5, Path: exe, BuildID: []byte("0123456789abcdef0123")},
		&Module{Time: t + 10, PID: pid, TID: pid, Start: 0x7f0000000000, Len: 0x200000, PgOff: 0x28000, Prot: 5, Path: libc},
		&Fork{Time: t + 20, PID: pid, PPID: pid, TID: pid + 1, PTID: pid},
		&Comm{Time: t + 21, PID: pid, TID: pid + 1, Name: str("worker")},
	)
	const nloc = 200
	for i := 1; i <= nloc; i++ {
		fn := str(fmt.Sprintf("pkg.function%d", i))
		recs = append(recs, &Location{ID: uint32(i), Address: 0x401000 + uint64(i)*64, Module: exe, Offset: 0x1000 + uint64(i)*64,
			Lines: []Line{{Function: fn, File: exe, Line: uint32(10 + i)}}})
	}
	// A tree of stacks: each new node extends a random earlier one.
	const nstack = 400
	for i := 1; i <= nstack; i++ {
		recs = append(recs, &StackNode{ID: uint32(i), Parent: uint32(rng.IntN(i)), Location: uint32(1 + rng.IntN(nloc))})
	}
	for i := range n {
		t += 1_000_000 + uint64(rng.IntN(20_000)) - 10_000
		tid := uint32(pid + rng.IntN(2))
		recs = append(recs, &Sample{Time: t, PID: pid, TID: tid, CPU: tid - pid + uint32(rng.IntN(2))*2,
			Period: 1_000_000, Stack: uint32(1 + rng.IntN(nstack))})
		if i%5000 == 4999 {
			recs = append(recs, &Lost{Time: t, Kind: LostKernel, Count: uint64(rng.IntN(10))}, &Throttle{Time: t})
		}
	}
	recs = append(recs, &Exit{Time: t, PID: pid, PPID: 1, TID: pid, PTID: 1}, &End{Time: t + 1, ExitCode: 0, Reason: str("exited")})
	return recs
}
