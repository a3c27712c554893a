package perf

import (
	"errors"
	"os/exec"
	"testing"

	"trueprof/internal/testutil"

	"golang.org/x/sys/unix"
)

// TestCounterRead counts the page faults of a shell and of the children
// it forks, one of which allocates an 8 MiB buffer, with CounterAttr
// events on every CPU: each child's exit writes a RecordRead per CPU
// with its own count, and reading the descriptors gives the total of
// all. (Without KeepWithThread the kernel may move the shell's events to
// a child, whose count then goes unreported: not tested, not used.)
func TestCounterRead(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequireCommand(t, "dd")
	cmd := exec.Command("sh", "-c", "read x; (dd if=/dev/zero of=/dev/null bs=8M count=1 2>/dev/null; true); echo $x >/dev/null")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	cpus, err := OnlineCPUs()
	if err != nil {
		t.Fatal(err)
	}
	ev, _ := ParseEvent("page-faults")
	attr := CounterAttr(ev, CounterOptions{Kernel: true, KeepWithThread: true})
	ids := map[uint64]bool{}
	// Kernels before 6.12 reject inherit with PERF_SAMPLE_READ.
	if fd, err := Open(attr, cmd.Process.Pid, cpus[0], 0); errors.Is(err, unix.EINVAL) {
		testutil.Missing(t, "no KeepWithThread on this kernel: "+err.Error())
	} else if err == nil {
		unix.Close(fd)
	}
	var fds []int
	var rings []*Ring
	for _, cpu := range cpus {
		fd := openTest(t, attr, cmd.Process.Pid, cpu)
		fds = append(fds, fd)
		rings = append(rings, mapTest(t, fd, 8))
		id, err := EventID(fd)
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = true
		if err := Enable(fd); err != nil {
			t.Fatal(err)
		}
	}
	stdin.Write([]byte("go\n"))
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}

	perTask := map[uint32]uint64{}
	reads := 0
	for _, ring := range rings {
		ring.Read(func(rec []byte) {
			var r Record
			if err := Decode(rec, SampleType, &r); err != nil {
				t.Error(err)
				return
			}
			if r.Type != RecordRead {
				t.Errorf("unexpected record type %d", r.Type)
				return
			}
			if !ids[r.ID] {
				t.Errorf("read record with id %d, not one of the events' %v", r.ID, ids)
			}
			reads++
			perTask[r.TID] += r.Value
		})
	}
	var total uint64
	for _, fd := range fds {
		v, id, err := ReadCounter(fd)
		if err != nil || !ids[id] {
			t.Fatalf("read: %d %d %v", v, id, err)
		}
		total += v
	}
	var children uint64
	for tid, v := range perTask {
		if int(tid) == cmd.Process.Pid {
			t.Errorf("the shell, which holds the descriptors' events, wrote a read record")
		}
		children += v
	}
	t.Logf("read records %d, per task %v, total %d", reads, perTask, total)
	if len(perTask) == 0 || reads%len(cpus) != 0 {
		t.Fatalf("%d read records for %d CPUs: %v", reads, len(cpus), perTask)
	}
	// dd touches its 8 MiB buffer: 2048 pages.
	if children < 2048 {
		t.Errorf("children's page faults %d, want at least 2048", children)
	}
	if total <= children {
		t.Errorf("total %d not above the children's %d: the shell's own faults are missing", total, children)
	}
}
