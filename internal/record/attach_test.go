package record

import (
	"bufio"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"trueprof/internal/calltree"
	"trueprof/internal/testutil"
)

// serverFixture is a server whose three threads loop handle() -> work()
// -> usleep(100), never recursively, until its standard input closes.
// Each thread then prints its number of loops and a checksum of what work
// returned, which the loop count determines: probes that corrupted a
// return value or a return address change it.
const serverFixture = `
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
static volatile int stop;
__attribute__((noinline)) long work(long i) { return i * i + 1; }
__attribute__((noinline)) long handle(long i) { long r = work(i) + 1; usleep(100); return r; }
struct result { long n, sum; };
static void *serve(void *arg) {
	struct result *r = arg;
	while (!stop) {
		r->sum += handle(r->n);
		r->n++;
	}
	return 0;
}
int main(void) {
	pthread_t th[3];
	struct result res[3] = {{0, 0}};
	for (int i = 0; i < 3; i++) pthread_create(&th[i], 0, serve, &res[i]);
	printf("ready\n");
	fflush(stdout);
	char c;
	while (read(0, &c, 1) > 0) {}
	stop = 1;
	for (int i = 0; i < 3; i++) {
		pthread_join(th[i], 0);
		printf("%ld %ld\n", res[i].n, res[i].sum);
	}
	return 0;
}
`

// TestUprobeAttachRepeatedly attaches to a running multi-threaded server
// twenty times in a row: a call entered while the probes were being
// placed must not stay open and make every later call nest under it. No
// node may be recursive, each thread's calls of handle and of work agree
// but for the calls open at either end, and the server computes what it
// computes without probes.
func TestUprobeAttachRepeatedly(t *testing.T) {
	testutil.RequirePerf(t)
	cmd, finish := startServer(t)

	for i := range 20 {
		_, p := recordCmd(t, Config{PID: cmd.Process.Pid, Duration: 300 * time.Millisecond, Trace: []string{"work", "handle"}})
		r, err := calltree.Build(p, calltree.Options{})
		if err != nil {
			t.Fatal(err)
		}
		threads := 0
		for _, pr := range r.Processes {
			for _, th := range pr.Threads {
				calls := map[string]uint64{}
				if n := recursive(&th.Root, calls); n != "" {
					t.Errorf("attach %d: thread %d: %s is recursive: the tree is corrupted", i, th.TID, n)
				}
				if calls["handle"] == 0 && calls["work"] == 0 {
					continue
				}
				threads++
				// A thread may be inside handle when the probes come on
				// (a work call without its handle) and when they come off
				// (a handle call without its work).
				if h, w := calls["handle"], calls["work"]; h+1 < w || w+1 < h || h < 100 {
					t.Errorf("attach %d: thread %d: %d calls of handle, %d of work", i, th.TID, h, w)
				}
			}
		}
		if threads != 3 {
			t.Errorf("attach %d: calls on %d threads, want 3", i, threads)
		}
		// Every call counted ends at its exit or, at most two a thread,
		// when the probes came off. Exits of calls entered while the
		// probes went on or came off are left out: about 1,000 came in
		// when the detach counted exits until the exit probes were gone.
		if rp := r.Repairs; rp.Popped != 0 || rp.Unclosed != 0 || rp.Detached > 6 || rp.Unmatched > 30 {
			t.Errorf("attach %d: repairs %+v", i, rp)
		}
		if t.Failed() {
			break
		}
	}

	finish()
}

// startServer starts serverFixture and waits for it to be ready;
// finish ends it and checks what each of its threads computed.
func startServer(t *testing.T) (cmd *exec.Cmd, finish func()) {
	bin := testutil.BuildC(t, t.TempDir(), "server", serverFixture, "-pthread")
	cmd = exec.Command(bin)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	out := bufio.NewReader(stdout)
	if line, err := out.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("server said %q, %v", line, err)
	}
	return cmd, func() {
		stdin.Close()
		rest, err := io.ReadAll(out)
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("server: %v\n%s", err, rest)
		}
		lines := strings.Split(strings.TrimSpace(string(rest)), "\n")
		if len(lines) != 3 {
			t.Fatalf("server printed %q", rest)
		}
		for _, line := range lines {
			var n, sum int64
			if _, err := fmt.Sscan(line, &n, &sum); err != nil {
				t.Fatalf("server printed %q: %v", line, err)
			}
			// handle(i) returns i*i + 2: the sum over i < n.
			if want := (n-1)*n*(2*n-1)/6 + 2*n; sum != want || n == 0 {
				t.Errorf("server thread: %d loops summed to %d, want %d: the probes changed what it computed", n, sum, want)
			}
		}
	}
}

// recursive adds the calls of each function under n to calls and returns
// the name of the first node with a recursion level, or "".
func recursive(n *calltree.Node, calls map[string]uint64) string {
	found := ""
	if n.Recursion > 0 {
		found = n.Name
	}
	calls[n.Name] += n.Calls
	for i := range n.Children {
		if f := recursive(&n.Children[i], calls); found == "" {
			found = f
		}
	}
	return found
}
