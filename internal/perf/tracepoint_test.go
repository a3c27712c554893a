package perf

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"trueprof/internal/testutil"

	"golang.org/x/sys/unix"
)

const softirqFormat = `name: softirq_entry
ID: 223
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:unsigned char common_flags;	offset:2;	size:1;	signed:0;
	field:unsigned char common_preempt_count;	offset:3;	size:1;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;

	field:unsigned int vec;	offset:8;	size:4;	signed:0;
	field:__data_loc char[] name;	offset:12;	size:4;	signed:0;
	field:char comm[16];	offset:16;	size:16;	signed:0;

print fmt: "vec=%u", REC->vec
`

func TestParseTracepointFormat(t *testing.T) {
	tp, err := parseTracepointFormat(softirqFormat)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]TracepointField{
		"common_type": {0, 2, false}, "common_flags": {2, 1, false}, "common_preempt_count": {3, 1, false},
		"common_pid": {4, 4, true}, "vec": {8, 4, false}, "name": {12, 4, false}, "comm": {16, 16, false},
	}
	if tp.ID != 223 || len(tp.Fields) != len(want) {
		t.Fatalf("parsed %+v", tp)
	}
	for k, v := range want {
		if tp.Fields[k] != v {
			t.Errorf("field %s: %+v, want %+v", k, tp.Fields[k], v)
		}
	}
	for _, bad := range []string{"name: x\nformat:\n", "ID: x\n", "ID: 3\n\tfield:int irq;\toffset:8;\tsize:4;\tsigned:1;\n", "ID: 3\n\tfield:unsigned short common_type;\toffset:z;\n"} {
		if _, err := parseTracepointFormat(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestUnescapeMountinfo(t *testing.T) {
	for in, want := range map[string]string{`/sys/kernel/tracing`: `/sys/kernel/tracing`, `/mnt/a\040b`: `/mnt/a b`, `/x\`: `/x\`} {
		if got := unescapeMountinfo(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

// irqTracepoints looks up the interrupt tracepoints, failing under
// TRUEPROF_REQUIRE_PERF when tracefs or the tracepoints are missing.
func irqTracepoints(t *testing.T) map[string]*Tracepoint {
	testutil.RequirePerf(t)
	tps := map[string]*Tracepoint{}
	for _, name := range []string{"irq_handler_entry", "irq_handler_exit", "softirq_entry", "softirq_exit"} {
		tp, err := LookupTracepoint("irq", name)
		if err != nil {
			testutil.Missing(t, err.Error())
		}
		tps[name] = tp
	}
	return tps
}

// TestTracepointIRQ opens the interrupt tracepoints on every CPU for all
// tasks, sends loopback UDP packets from this thread (the kernel runs
// the NET_RX softirq on the sender when the packet is queued) and checks
// that the samples decode, name their tracepoint, and attribute softirqs
// to this process.
func TestTracepointIRQ(t *testing.T) {
	tps := irqTracepoints(t)
	if tps["softirq_entry"].ID == tps["softirq_exit"].ID {
		t.Fatalf("entry and exit share id %d", tps["softirq_entry"].ID)
	}
	cpus, err := OnlineCPUs()
	if err != nil {
		t.Fatal(err)
	}
	var rings []*Ring
	var fds []int
	for _, cpu := range cpus {
		owner := -1
		for _, tp := range tps {
			fd := openTest(t, TracepointAttr(tp, TracepointOptions{Disabled: true}), -1, cpu)
			fds = append(fds, fd)
			shareRing(t, fd, &owner, &rings)
		}
	}
	for _, fd := range fds {
		if err := Enable(fd); err != nil {
			t.Fatal(err)
		}
	}
	sendLoopbackUDP(t, 200, 50*time.Millisecond)
	for _, fd := range fds {
		Disable(fd)
	}

	counts := map[string]int{}
	ownNetRX := 0
	for _, ring := range rings {
		var last uint64
		ring.Read(func(rec []byte) {
			var r Record
			if err := Decode(rec, TracepointSampleType, &r); err != nil {
				t.Error(err)
				return
			}
			if r.Type != RecordSample {
				return
			}
			if r.Time < last {
				t.Errorf("time went back in one CPU's ring: %d after %d", r.Time, last)
			}
			last = r.Time
			name := ""
			for n, tp := range tps {
				if v, ok := tp.Fields["common_type"].Uint(r.Raw); ok && v == tp.ID {
					name = n
				}
			}
			if name == "" {
				t.Errorf("sample of no known tracepoint: raw %x", r.Raw)
				return
			}
			counts[name]++
			if name == "softirq_entry" {
				vec, ok := tps[name].Fields["vec"].Uint(r.Raw)
				if !ok || vec >= 10 {
					t.Errorf("softirq vector %d %v", vec, ok)
				}
				if vec == 3 && int(r.PID) == os.Getpid() {
					ownNetRX++
				}
			}
		})
	}
	t.Logf("samples %v; NET_RX softirqs on this process: %d", counts, ownNetRX)
	if counts["softirq_entry"] == 0 || counts["softirq_exit"] == 0 {
		t.Errorf("no softirqs seen: %v", counts)
	}
	if ownNetRX == 0 {
		t.Error("no NET_RX softirq ran on this process while it sent loopback packets")
	}
}

// sendLoopbackUDP sends n datagrams to a loopback socket and reads them
// back, then idles for pause, so that softirqs run on this process's
// threads and timers fire.
func sendLoopbackUDP(t testing.TB, n int, pause time.Duration) {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	out, err := net.DialUDP("udp", nil, conn.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	buf := make([]byte, 512)
	for range n {
		if _, err := out.Write(buf); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(time.Second))
		if _, _, err := conn.ReadFromUDP(buf); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(pause)
}

// openTest opens an event for a test, which fails when perf events are
// not permitted only under TRUEPROF_REQUIRE_PERF, and closes it when the
// test ends.
func openTest(t testing.TB, attr *unix.PerfEventAttr, pid, cpu int) int {
	t.Helper()
	fd, err := Open(attr, pid, cpu, 0)
	if errors.Is(err, ErrPermission) {
		testutil.Missing(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// shareRing maps the ring of fd, the first event of its CPU (*owner <
// 0), or sends fd's records to the ring of *owner.
func shareRing(t testing.TB, fd int, owner *int, rings *[]*Ring) {
	t.Helper()
	if *owner >= 0 {
		if err := SetOutput(fd, *owner); err != nil {
			t.Fatal(err)
		}
		return
	}
	*rings = append(*rings, mapTest(t, fd, 64))
	*owner = fd
}

// mapTest maps fd's ring for a test and unmaps it when the test ends.
func mapTest(t testing.TB, fd, pages int) *Ring {
	t.Helper()
	ring, err := MapRing(fd, pages)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ring.Close() })
	return ring
}
