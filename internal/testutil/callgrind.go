package testutil

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Callgrind runs argv under valgrind --tool=callgrind (the exact-count
// oracle) with stdin as its input, and returns the number of calls of
// each function, recursion levels (fib'2) merged.
func Callgrind(t testing.TB, stdin io.Reader, argv ...string) map[string]int {
	t.Helper()
	valgrind := RequireCommand(t, "valgrind")
	out := filepath.Join(t.TempDir(), "callgrind.out")
	cmd := exec.Command(valgrind, append([]string{"--tool=callgrind", "--callgrind-out-file=" + out,
		"--compress-strings=no", "--compress-pos=no"}, argv...)...)
	cmd.Stdin = stdin
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("valgrind: %v\n%s", err, b)
	}
	return CallgrindCalls(t, out)
}

// CallgrindCalls parses a callgrind output file written with
// --compress-strings=no: the calls= lines, summed per callee.
func CallgrindCalls(t testing.TB, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	calls := map[string]int{}
	callee := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "cfn="); ok {
			callee, _, _ = strings.Cut(v, "'")
		} else if v, ok := strings.CutPrefix(line, "calls="); ok {
			n, err := strconv.Atoi(strings.Fields(v)[0])
			if err != nil {
				t.Fatalf("%s: %q: %v", path, line, err)
			}
			calls[callee] += n
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return calls
}
