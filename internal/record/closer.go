package record

import (
	"io"
	"os"
	"os/exec"
	"sync"

	"trueprof/internal/perf"
)

// holderEnv marks a trueprof process started to hold the recorder's perf
// event descriptors while the kernel tears them down (closeEventFDs).
const holderEnv = "TRUEPROF_EVENT_HOLDER"

// holderReady is set when this program's main called RunWrapper, so that
// a re-execution of it becomes a holder; a program that does not (a test
// binary without it in TestMain) would run itself again instead.
var holderReady bool

// runHolder is the holder's whole life: it keeps the descriptors it
// inherited until the recorder closes the pipe on its standard input,
// then exits, and the kernel closes them as it exits. RunWrapper calls
// it; in any other process it returns.
func runHolder() {
	if _, ok := os.LookupEnv(holderEnv); !ok {
		holderReady = true
		return
	}
	io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// closeEventFDs disables and closes perf event descriptors without
// making the recording wait for their teardown. Freeing the last event
// of a tracepoint waits for RCU grace periods, one tracepoint after the
// other under the kernel's event_mutex: 35-44 ms each in a VM, so the
// four interrupt tracepoints added 120-140 ms to the end of every
// recording, whether the descriptors were closed one at a time or in
// parallel. The descriptors are handed to a holder process (trueprof
// re-executed, runHolder) that inherits them: the recorder's own closes
// are then not the last ones and return at once, and the waits happen
// when the holder exits, which nobody waits for (a goroutine reaps it if
// the recorder lives on). Where the holder cannot be started they close
// here, in parallel, at most closers at a time (an attached process with
// many threads has an event per thread and CPU).
func closeEventFDs(fds []int) {
	if len(fds) == 0 {
		return
	}
	for _, fd := range fds {
		perf.Disable(fd)
	}
	files := make([]*os.File, len(fds))
	for i, fd := range fds {
		files[i] = os.NewFile(uintptr(fd), "perf-event")
	}
	if gate := startHolder(files); gate != nil {
		for _, f := range files {
			f.Close()
		}
		gate.Close() // the holder exits: its copies are now the last
		return
	}
	const closers = 32
	var wg sync.WaitGroup
	sem := make(chan struct{}, closers)
	for _, f := range files {
		sem <- struct{}{}
		wg.Go(func() {
			f.Close()
			<-sem
		})
	}
	wg.Wait()
}

// startHolder starts a holder process inheriting files and returns the
// write end of its standard input, whose closing lets it exit; nil when
// it could not be started.
func startHolder(files []*os.File) *os.File {
	if !holderReady {
		return nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), holderEnv+"=1")
	// Standard output and error are /dev/null: a caller that reads this
	// process's output must not wait for the holder's exit.
	cmd.Stdin = r
	cmd.ExtraFiles = files
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil
	}
	go cmd.Wait() // no zombie if this process lives on
	return w
}
