package testutil

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"
)

// StartGated starts cmd, a program that waits for input on its standard
// input before doing anything, so that a test can attach to it first,
// and returns the pipe that releases it and its standard output. When
// runs is not empty it returns once the process runs that executable
// (Start returns before exec). The process is killed when the test ends.
func StartGated(t testing.TB, cmd *exec.Cmd, runs string) (io.WriteCloser, *bytes.Buffer) {
	t.Helper()
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out := &bytes.Buffer{}
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	if runs != "" {
		WaitExec(t, cmd.Process.Pid, runs)
	}
	return in, out
}

// WaitExec waits until process pid runs the executable bin, and a little
// longer for the dynamic loader to map it.
func WaitExec(t testing.TB, pid int, bin string) {
	t.Helper()
	for range 500 {
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); exe == bin {
			time.Sleep(20 * time.Millisecond)
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("pid %d never ran %s", pid, bin)
}
