package model

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"trueprof/internal/trace"
)

// threadRecords returns the records of n threads of procs processes in
// a random order of ids: each forked or, one in three, named and then
// exec'ed (its start time set late), and one in four exiting, its tid
// reused by a new incarnation after.
func threadRecords(n, procs int, r *rand.Rand) []trace.Record {
	var rs []trace.Record
	now := uint64(1000)
	for _, i := range r.Perm(n) {
		pid := uint32(100 + i%procs)
		tid := pid + uint32(i/procs)*uint32(procs)
		now += 10
		if i%3 == 0 {
			// Seen first without a start time, which its exec sets.
			rs = append(rs, &trace.Comm{Time: now, PID: pid, TID: tid, Name: 1},
				&trace.Comm{Time: now + 1, PID: pid, TID: tid, Name: 1, Exec: true})
		} else {
			rs = append(rs, &trace.Fork{Time: now, PID: pid, TID: tid, PPID: pid, PTID: pid})
		}
		if i%4 == 0 {
			rs = append(rs, &trace.Exit{Time: now + 2, PID: pid, TID: tid, PPID: pid, PTID: pid},
				&trace.Fork{Time: now + 3, PID: pid, TID: tid, PPID: pid, PTID: pid})
		}
	}
	return rs
}

// TestTablesThreadOrder holds Tables' threads and processes to Load's
// order after every record, and to Load's profile of the same records at
// the end.
func TestTablesThreadOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, procs := range []int{1, 3, 50} {
		rs := append([]trace.Record{&trace.String{ID: 1, Text: "app"}}, threadRecords(200, procs, r)...)
		tb := NewTables(trace.Header{Command: []string{"app"}}, func(*Record) {})
		for i, rec := range rs {
			if _, err := tb.Add(rec); err != nil {
				t.Fatal(err)
			}
			p := tb.Profile()
			if !slices.IsSortedFunc(p.Threads, threadOrder) {
				t.Fatalf("%d processes: threads out of order after record %d", procs, i)
			}
			if !slices.IsSortedFunc(p.Processes, func(a, b *Process) int { return int(a.PID) - int(b.PID) }) {
				t.Fatalf("%d processes: processes out of order after record %d", procs, i)
			}
		}
		data := writeTraceOf(t, &trace.Header{Command: []string{"app"}}, func(w *trace.Writer) []trace.Record {
			name := intern(t, w, "app")
			for _, rec := range rs {
				if c, ok := rec.(*trace.Comm); ok {
					c.Name = name
				}
			}
			return rs[1:]
		})
		loaded, err := Load(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := threadList(tb.Profile()), threadList(loaded); got != want {
			t.Errorf("%d processes: Tables' threads\n%s\nLoad's\n%s", procs, got, want)
		}
		if got, want := len(tb.Profile().Processes), len(loaded.Processes); got != want {
			t.Errorf("%d processes: Tables has %d processes, Load %d", procs, got, want)
		}
	}
}

// threadList prints p's threads, one pid/tid/start a line.
func threadList(p *Profile) string {
	var b bytes.Buffer
	for _, th := range p.Threads {
		fmt.Fprintf(&b, "%d/%d@%d\n", th.PID, th.TID, th.Start)
	}
	return b.String()
}

// BenchmarkTablesThreads adds the records of 10,000 threads, in one
// process and in 10,000, to Tables: the cost of a thread must not grow
// with the threads already there.
func BenchmarkTablesThreads(b *testing.B) {
	for _, procs := range []int{1, 10_000} {
		rs := threadRecords(10_000, procs, rand.New(rand.NewPCG(1, 2)))
		b.Run(fmt.Sprintf("processes=%d", procs), func(b *testing.B) {
			for b.Loop() {
				tb := NewTables(trace.Header{Command: []string{"app"}}, func(*Record) {})
				tb.l.strings[1] = "app"
				for _, rec := range rs {
					if _, err := tb.Add(rec); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(rs)), "ns/record")
		})
	}
}
