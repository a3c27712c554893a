package record

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"trueprof/internal/cachefile"
	"trueprof/internal/perf"
)

// holderEnv marks a trueprof process started to hold the recorder's perf
// event descriptors while the kernel tears them down (closeEventFDs).
const holderEnv = "TRUEPROF_EVENT_HOLDER"

// holderReady is set when this program's main called RunWrapper, so that
// a re-execution of it becomes a holder; a program that does not (a test
// binary without it in TestMain) would run itself again instead.
var holderReady bool

// runHolder is the holder's whole life where there is no tiny one
// (holderCode): it keeps the descriptors it inherited (holderEnv's value
// of them, from fd 4) until the recorder closes the pipe on its standard
// input, then closes them, each close waiting for its teardown, and
// exits, which releases the teardown lock it inherited as fd 3
// (lockTeardown). RunWrapper calls it; in any other process it returns.
func runHolder() {
	v, ok := os.LookupEnv(holderEnv)
	if !ok {
		holderReady = true
		return
	}
	io.Copy(io.Discard, os.Stdin)
	n, _ := strconv.Atoi(v)
	for fd := 4; fd < 4+n; fd++ {
		unix.Close(fd)
	}
	os.Exit(0)
}

// tinyHolder is the path of the tiny holder (holderCode), "" without.
var tinyHolder = tinyProgram("trueprof-holder", holderCode)

// The teardown lock is a file that every holder keeps a shared flock on
// until the kernel has torn its events down. Opening a tracepoint, or
// reading its format, waits for the kernel's event_mutex, which a
// teardown holds for 35-44 ms a tracepoint: a recording started right
// after another waits for the lock first (WaitTeardowns), where it can
// give up at once, instead of in the kernel, where the close of a
// session whose target had already exited waited 60-70 ms for the
// opening of an interrupt tracepoint in 2 of 6 back-to-back recordings.

// openTeardownLock opens the teardown lock file, in trueprof's cache
// directory.
func openTeardownLock() (*os.File, error) {
	dir, err := cachefile.Dir()
	if err != nil {
		return nil, err
	}
	return os.OpenFile(filepath.Join(dir, "teardown.lock"), os.O_RDONLY|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
}

// lockTeardown returns the teardown lock file with a shared lock taken,
// for a holder to inherit; nil when it cannot be had.
func lockTeardown() *os.File {
	f, err := openTeardownLock()
	if err != nil {
		return nil
	}
	if unix.Flock(int(f.Fd()), unix.LOCK_SH) != nil {
		f.Close()
		return nil
	}
	return f
}

// WaitTeardowns waits until no holder holds the teardown lock: an
// exclusive lock taken and dropped. It waits in an interruptible
// flock, so a process that exits meanwhile is not held up. Without the
// lock file it returns at once.
func WaitTeardowns() {
	f, err := openTeardownLock()
	if err != nil {
		return
	}
	unix.Flock(int(f.Fd()), unix.LOCK_EX)
	f.Close()
}

// closeEventFDs disables and closes perf event descriptors without
// making the recording wait for their teardown. Freeing the last event
// of a tracepoint waits for RCU grace periods, one tracepoint after the
// other under the kernel's event_mutex: 35-44 ms each in a VM, so the
// four interrupt tracepoints added 120-140 ms to the end of every
// recording, whether the descriptors were closed one at a time or in
// parallel. The descriptors are handed to a holder process (startHolder)
// that inherits them: the recorder's own closes
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
// it could not be started. The holder is the tiny one (tinyHolder) where
// it runs, else trueprof re-executed (runHolder), whose Go start, at the
// end of every recording, took CPU from the recorder's close and exit:
// 4.8 ms against 3.5 with the tiny holder (medians of 12 interleaved
// recordings of 200,000 hooked calls).
func startHolder(files []*os.File) *os.File {
	// Fd 3 is the teardown lock (or /dev/null without it), which the
	// holder releases by exiting once it closed the events, fds 4 on.
	lock := lockTeardown()
	if lock == nil {
		var err error
		if lock, err = os.Open(os.DevNull); err != nil {
			return nil
		}
	}
	defer lock.Close()
	extra := append([]*os.File{lock}, files...)
	if path := tinyHolder(); path != "" {
		cmd := &exec.Cmd{Path: path, Args: []string{"trueprof-holder"}, ExtraFiles: extra}
		if w := runHolderCmd(cmd); w != nil {
			return w
		}
	}
	if !holderReady {
		return nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), holderEnv+"="+strconv.Itoa(len(files)))
	cmd.ExtraFiles = extra
	return runHolderCmd(cmd)
}

// runHolderCmd starts the holder cmd with a pipe on its standard input
// and returns the pipe's write end; nil when it could not be started.
func runHolderCmd(cmd *exec.Cmd) *os.File {
	r, w, err := os.Pipe()
	if err != nil {
		return nil
	}
	// Standard output and error are /dev/null: a caller that reads this
	// process's output must not wait for the holder's exit.
	cmd.Stdin = r
	err = cmd.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil
	}
	go cmd.Wait() // no zombie if this process lives on
	return w
}
