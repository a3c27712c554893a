package perf

import (
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
	kinds := map[uint64]string{}
	var fds []int
	var rings []*Ring
	for _, cpu := range cpus {
		owner := -1
		for _, name := range []string{"page-faults", "cpu-migrations"} {
			ev, _ := ParseEvent(name)
			fd := openTest(t, CounterAttr(ev, CounterOptions{Kernel: true}), cmd.Process.Pid, cpu)
			fds = append(fds, fd)
			shareRing(t, fd, &owner, &rings)
			id, err := EventID(fd)
			if err != nil {
				t.Fatal(err)
			}
			kinds[id] = name
		}
	}
	for _, fd := range fds {
		if err := Enable(fd); err != nil {
			t.Fatal(err)
		}
	}
	stdin.Write([]byte("go\n"))
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}

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
