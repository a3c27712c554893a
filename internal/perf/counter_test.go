package perf

import (
	"io"
	"os/exec"
	"testing"

	"trueprof/internal/testutil"
)

// TestCounterSamples counts the page faults and migrations of a shell and
// of the children it forks, one of which allocates an 8 MiB buffer, with
// CounterAttr events on every CPU sharing one ring per CPU: every sample
// names its event and its thread.
func TestCounterSamples(t *testing.T) {
	testutil.RequirePerf(t)
	cmd, stdin := startFaulting(t)
	fds, rings := openCounterKinds(t, cmd.Process.Pid)
	kinds := map[uint64]string{}
	for kind, kfds := range fds {
		for _, fd := range kfds {
			id, err := EventID(fd)
			if err != nil {
				t.Fatal(err)
			}
			kinds[id] = counterKindNames[kind]
		}
	}
	enableAll(t, fds)
	runFaulting(t, cmd, stdin)

	faults := map[uint32]int{}
	for _, ring := range rings {
		ring.Read(func(rec []byte) {
			var r Record
			if err := Decode(rec, CounterSampleType, &r); err != nil {
				t.Error(err)
				return
			}
			if r.Type != RecordSample {
				t.Errorf("record type %d", r.Type)
				return
			}
			switch kinds[r.ID] {
			case "page-faults":
				faults[r.PID]++
			case "":
				t.Errorf("sample of id %d, not one of the events' %v", r.ID, kinds)
			}
		})
	}
	t.Logf("page faults per process: %v", faults)
	if len(faults) < 2 || faults[uint32(cmd.Process.Pid)] == 0 {
		t.Errorf("page faults of the shell and its children: %v", faults)
	}
	// dd touches its 8 MiB buffer: 2048 pages.
	most := 0
	for _, n := range faults {
		most = max(most, n)
	}
	if most < 2048 {
		t.Errorf("page faults %v: none has the 2048 of dd's buffer", faults)
	}
}

// startFaulting starts a shell that, once runFaulting lets it, forks a
// child that allocates an 8 MiB buffer (dd): 2048 page faults at least.
func startFaulting(t *testing.T) (*exec.Cmd, io.WriteCloser) {
	t.Helper()
	testutil.RequireCommand(t, "dd")
	cmd := exec.Command("sh", "-c", "read x; (dd if=/dev/zero of=/dev/null bs=8M count=1 2>/dev/null; true); echo $x >/dev/null")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	return cmd, stdin
}

// runFaulting lets the shell of startFaulting run and waits for it.
func runFaulting(t *testing.T, cmd *exec.Cmd, stdin io.WriteCloser) {
	t.Helper()
	stdin.Write([]byte("go\n"))
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
}

// counterKindNames are the events openCounterKinds opens.
var counterKindNames = [2]string{"page-faults", "cpu-migrations"}

// openCounterKinds opens a CounterAttr event of each of
// counterKindNames on pid and every CPU, sharing one ring per CPU, and
// returns them by kind.
func openCounterKinds(t *testing.T, pid int) (fds [2][]int, rings []*Ring) {
	t.Helper()
	cpus, err := OnlineCPUs()
	if err != nil {
		t.Fatal(err)
	}
	for _, cpu := range cpus {
		owner := -1
		for kind, name := range counterKindNames {
			ev, _ := ParseEvent(name)
			fd := openTest(t, CounterAttr(ev, CounterOptions{Kernel: true}), pid, cpu)
			shareRing(t, fd, &owner, &rings)
			fds[kind] = append(fds[kind], fd)
		}
	}
	return fds, rings
}

// enableAll enables the events of openCounterKinds.
func enableAll(t *testing.T, fds [2][]int) {
	t.Helper()
	for _, fd := range append(fds[0], fds[1]...) {
		if err := Enable(fd); err != nil {
			t.Fatal(err)
		}
	}
}
