package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// wrapperEnv marks a trueprof process started as the exec wrapper of a
// launched target. Its value is the target's absolute path.
const wrapperEnv = "TRUEPROF_EXEC_WRAPPER"

func init() {
	// The exec wrapper must exec from the thread group leader. Per-process
	// kernel state that trueprof sets up on the wrapper's pid, the perf
	// events and the uprobe_multi pid filter, belongs to the leader's
	// task; an exec from another of the Go runtime's threads makes that
	// thread the new leader and leaves that state behind with the old
	// one. Init functions run on the main thread, and locking it here
	// keeps main, and so RunWrapper, there.
	if _, ok := os.LookupEnv(wrapperEnv); ok {
		runtime.LockOSThread()
	}
}

// RunWrapper must be called first thing in main. In the exec wrapper (a
// re-execution of trueprof itself, where there is no tiny one:
// tinyWrapper) it waits until the recorder has opened its events on this
// process, then execs the target, so that counting starts exactly at exec
// (the events use enable_on_exec) and none of trueprof's own start-up is
// profiled. In the holder of closing event
// descriptors (closer.go) it waits for the recorder, then exits. In any
// other process it returns.
func RunWrapper() {
	runHolder()
	path, ok := os.LookupEnv(wrapperEnv)
	if !ok {
		return
	}
	os.Unsetenv(wrapperEnv)
	// Fd 3 is a socket to the recorder. This process runs, so its exec
	// from the recorder is complete, also for the kernel's exec
	// tracepoint: one byte tells the recorder (target.running). The
	// recorder writes one byte when the events are open, or closes it
	// without writing when it gave up.
	go1 := os.NewFile(3, "trueprof-go")
	var b [1]byte
	// A recorder that gave up on it may have closed its end already:
	// the write fails then (EPIPE: Go takes SIGPIPE only for fds 1 and
	// 2), and the read below decides.
	_, _ = go1.Write(b[:])
	if n, _ := go1.Read(b[:]); n != 1 {
		os.Exit(127)
	}
	// A successful exec closes it; a failed one sends the errno, as the
	// tiny wrapper does (target.execErr).
	unix.CloseOnExec(3)
	err := unix.Exec(path, os.Args[1:], os.Environ())
	var errno [4]byte
	if e, ok := err.(syscall.Errno); ok {
		binary.LittleEndian.PutUint32(errno[:], uint32(e))
	}
	go1.Write(errno[:])
	os.Exit(127)
}

// target is a launched command, stopped in the wrapper until release.
type target struct {
	cmd  *exec.Cmd
	path string   // the target's executable, as the wrapper execs it
	gate *os.File // the recorder's end of the wrapper's socket
	ran  bool     // running returned
	// released is set by release; abort then leaves the socket to
	// readExec.
	released bool
	done     chan struct{}
	err      error // cmd.Wait's result, valid after done is closed
	// execErr is why the wrapper's exec of path failed, nil when it
	// did not; valid after done is closed.
	execErr  error
	execRead chan struct{} // closed when execErr is known
}

// launchOptions adjust how the target is started.
type launchOptions struct {
	stdout io.Writer  // the target's standard output; os.Stdout if nil
	files  []*os.File // inherited by the target as descriptors 4, 5, ...
	env    []string   // added to the target's environment
}

// launch starts the exec wrapper for argv. The process runs trueprof's
// code until release is called.
func launch(argv []string, o launchOptions) (*target, error) {
	if len(argv) == 0 {
		return nil, errors.New("no command to record")
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, err
	}
	if path, err = absPath(path); err != nil {
		return nil, err
	}
	// A socket, not a pipe: the wrapper says on it that it runs.
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("creating the exec wrapper's socket: %w", err)
	}
	r, w := os.NewFile(uintptr(fds[0]), "trueprof-wrapper"), os.NewFile(uintptr(fds[1]), "trueprof-gate")
	defer r.Close()
	start := func(cmd *exec.Cmd) error {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		if o.stdout != nil {
			cmd.Stdout = o.stdout
		}
		cmd.ExtraFiles = append([]*os.File{r}, o.files...)
		return cmd.Start()
	}
	var cmd *exec.Cmd
	err = errNoTinyWrapper
	if tiny := tinyWrapper(); tiny != "" {
		// It takes the target's path as its argv[0], the target's
		// argv after it.
		cmd = &exec.Cmd{Path: tiny, Args: append([]string{path}, argv...)}
		cmd.Env = append(os.Environ(), o.env...)
		err = start(cmd)
	}
	if err != nil {
		// No tiny wrapper, or one that could not be executed (a
		// security module, a sandbox): trueprof re-executed.
		self, err := os.Executable()
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("finding trueprof's own executable for the exec wrapper: %w", err)
		}
		cmd = exec.Command(self, argv...)
		cmd.Env = append(append(os.Environ(), o.env...), wrapperEnv+"="+path)
		if err := start(cmd); err != nil {
			w.Close()
			return nil, err
		}
	}
	t := &target{cmd: cmd, path: path, gate: w, done: make(chan struct{}), execRead: make(chan struct{})}
	go func() {
		t.err = cmd.Wait()
		// The wrapper has exited or exec'd and its exec is over: what
		// its end of the socket said is in.
		<-t.execRead
		close(t.done)
	}()
	return t, nil
}

// errNoTinyWrapper says that there is no tiny exec wrapper to start.
var errNoTinyWrapper = errors.New("no tiny exec wrapper")

// tinyWrapper is the path of the tiny exec wrapper (wrapperCode), ""
// without: it does what RunWrapper does in trueprof re-executed, whose
// Go start (3.5-4.5 ms of CPU) was on the start's critical path.
var tinyWrapper = tinyProgram("trueprof-exec", wrapperCode)

func absPath(p string) (string, error) {
	if len(p) > 0 && p[0] == '/' {
		return p, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return wd + "/" + p, nil
}

// pid is the target's process id (the wrapper's, which exec keeps).
func (t *target) pid() int { return t.cmd.Process.Pid }

// running waits until the wrapper runs trueprof's code. cmd.Start
// returns once the wrapper's exec closed its close-on-exec descriptors,
// before the exec is complete: the kernel's exec tracepoint, where the
// in-kernel counters take a launched target's base (perf.ThreadCounts
// Track with atExec), may fire later, and when it fired after Track, the
// base was taken at this exec instead of the target's and the wrapper's
// ~600 page faults were counted as the target main thread's.
func (t *target) running() error {
	if t.ran {
		return nil
	}
	var b [1]byte
	if n, err := t.gate.Read(b[:]); n != 1 {
		return fmt.Errorf("the exec wrapper ended before it ran: %v", err)
	}
	t.ran = true
	return nil
}

// release lets the wrapper exec the target.
func (t *target) release() error {
	_, err := t.gate.Write([]byte{1})
	t.released = true
	go t.readExec()
	return err
}

// readExec reads what the released wrapper says on its socket: nothing
// when its exec succeeds (the exec closes the wrapper's end), the errno
// when it fails, which the wrapper cannot explain itself (the tiny one
// has no way to print a path and an error), so that finish can.
func (t *target) readExec() {
	var b [4]byte
	if !t.ran {
		// Its word that it runs comes first (running did not take it).
		io.ReadFull(t.gate, b[:1])
	}
	if n, _ := io.ReadFull(t.gate, b[:]); n == len(b) {
		t.execErr = &os.PathError{Op: "exec", Path: t.path, Err: syscall.Errno(binary.LittleEndian.Uint32(b[:]))}
	}
	t.gate.Close()
	close(t.execRead)
}

// abort makes a wrapper that was never released exit; a released one
// is left to go on (stopTarget stops it).
func (t *target) abort() {
	if !t.released {
		t.gate.Close()
		close(t.execRead)
	}
	<-t.done
}

// exitCode is the target's exit status in shell convention: its code, or
// 128+signal when a signal killed it.
func (t *target) exitCode() int {
	var ee *exec.ExitError
	if errors.As(t.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	if t.err != nil {
		return -1
	}
	return 0
}
