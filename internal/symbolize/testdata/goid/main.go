// Command goid checks a goroutine-id offset against the runtime: given
// the offset of runtime.g.goid, it reads each of its goroutines' ids
// through its own g pointer and compares them with the ids
// runtime.Stack prints, and says "ok" when every one matches.
package main

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"unsafe"
)

// getg returns the running goroutine's g (getg_amd64.s).
func getg() unsafe.Pointer

// stackID is the goroutine id runtime.Stack prints: "goroutine 7 [...".
func stackID() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b, _ = bytes.CutPrefix(b, []byte("goroutine "))
	b, _, _ = bytes.Cut(b, []byte(" "))
	id, _ := strconv.ParseUint(string(b), 10, 64)
	return id
}

func main() {
	off, err := strconv.Atoi(os.Args[1])
	if err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	check := func() error {
		want := stackID()
		got := *(*uint64)(unsafe.Add(getg(), off))
		if got != want || want == 0 {
			return fmt.Errorf("goroutine %d: read %d at offset %d", want, got, off)
		}
		return nil
	}
	errs := make([]error, 8)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Add(1)
		go func(i int) { defer wg.Done(); errs[i] = check() }(i)
	}
	wg.Wait()
	errs = append(errs, check())
	for _, err := range errs {
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
	}
	fmt.Println("ok")
}
