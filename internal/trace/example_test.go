package trace_test

import (
	"bytes"
	"fmt"
	"io"
	"log"

	"trueprof/internal/trace"
)

func Example() {
	var file bytes.Buffer
	w, err := trace.NewWriter(&file, &trace.Header{Event: "cpu-clock", Clock: "CLOCK_MONOTONIC"}, trace.Options{})
	if err != nil {
		log.Fatal(err)
	}
	name, _ := w.Intern("main")
	fn, _ := w.Intern("main.main")
	w.Write(&trace.Comm{Time: 1000, PID: 42, TID: 42, Name: name})
	w.Write(&trace.Location{ID: 1, Address: 0x401000, Module: name, Lines: []trace.Line{{Function: fn}}})
	w.Write(&trace.StackNode{ID: 1, Location: 1})
	for i := range 3 {
		w.Write(&trace.Sample{Time: 2000 + uint64(i)*1000, PID: 42, TID: 42, Period: 1000, Stack: 1})
	}
	w.Write(&trace.End{Time: 5000, ExitCode: 0})
	if err := w.Close(); err != nil {
		log.Fatal(err)
	}

	r, err := trace.NewReader(&file)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("event:", r.Header().Event)
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		switch rec := rec.(type) {
		case *trace.Sample:
			fmt.Printf("%v t=%d tid=%d stack=%d\n", rec.Major(), rec.Time, rec.TID, rec.Stack)
		default:
			fmt.Println(rec.Major())
		}
	}
	// Output:
	// event: cpu-clock
	// String
	// String
	// Comm
	// Location
	// StackNode
	// Sample t=2000 tid=42 stack=1
	// Sample t=3000 tid=42 stack=1
	// Sample t=4000 tid=42 stack=1
	// End
}
