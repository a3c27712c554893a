// Command goprog is a fixture for symbolize tests, built by the tests with
// "go build" and "go build -ldflags=-s -w".
package main

import (
	"fmt"
	"os"
)

// add is small enough to be inlined into work.
func add(a, b int) int {
	return a*b + (a ^ b) // L:add
}

//go:noinline
func work(n int) int {
	s := 0
	for i := 0; i < n; i++ { // L:work-loop
		s = add(s, i) // L:work-call
	}
	return s
}

func main() {
	fmt.Println(work(len(os.Args) * 1000))
}
