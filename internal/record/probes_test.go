package record

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"trueprof/internal/testutil"
)

// TestMechUprobeForkNote: a probed target that forks is told, once, that
// its children are not probed, while its own calls are counted.
func TestMechUprobeForkNote(t *testing.T) {
	bin := testutil.BuildC(t, t.TempDir(), "forker", `
#include <sys/wait.h>
#include <unistd.h>
__attribute__((noinline)) int work(int i) { return i * 3; }
int main(void) {
	int s = 0;
	for (int i = 0; i < 2; i++) {
		pid_t p = fork();
		if (p == 0) { s += work(i); _exit(s & 1); }
		waitpid(p, 0, 0);
		s += work(i);
	}
	return s == 3 ? 0 : 1;
}`)
	const note = "the target forked a process: uprobes probe the target's process only, so the calls of its children are not counted"
	var log bytes.Buffer
	_, p := recordCmd(t, Config{Command: []string{bin}, Trace: []string{"work"}, NoSampling: true, Log: &log, Stdout: io.Discard})
	if n := strings.Count(log.String(), note); n != 1 {
		t.Errorf("log says %d times that children are not probed, want once:\n%s", n, log.String())
	}
	if n := entries(p)["work"]; n != 2 {
		t.Errorf("work: %d calls of the parent, want 2", n)
	}
}
