package testutil

import (
	_ "embed"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The runtime fixtures: one JVM program and one node program serve every
// test that records a JIT runtime (record's late JIT names and loss tests,
// the corpus).
var (
	//go:embed testdata/Work.java
	workJava []byte
	//go:embed testdata/work.js
	workJS []byte
)

// Workload is what a runtime fixture does each round.
type Workload string

const (
	// Compute sorts, counts words in a hash map and builds strings: code
	// the JIT compiles early, so most samples land in compiled code that
	// only the runtime's perf map names.
	Compute Workload = "compute"
	// Alloc allocates: buffers outside the heap fault in fresh pages as
	// they are filled (hundreds of thousands of page faults a second),
	// and small objects keep the JIT and the garbage collector busy.
	Alloc Workload = "alloc"
)

// javaHome is Debian's openjdk-17-jdk-headless (what .ci/run installs);
// the path is explicit because java on PATH may be another JDK.
const javaHome = "/usr/lib/jvm/java-17-openjdk-amd64"

// jvmFlags make the JVM write /tmp/perf-PID.map as it exits and keep
// frame pointers in compiled code (docs/recording.md, "JIT runtimes").
var jvmFlags = []string{"-XX:+UnlockDiagnosticVMOptions", "-XX:+DumpPerfMapAtExit", "-XX:+PreserveFramePointer"}

// JVMProgram compiles the JVM fixture (testdata/Work.java) with javac
// into a directory of the test's and returns the command line that runs
// workload w with the flags users are told to give (jvmFlags), for amount:
// a number of rounds ("160", the same work in every run) or of seconds
// ("2s"). The command line may be run any number of times; the perf maps
// its processes leave behind are removed when the test ends
// (RemovingPerfMaps).
func JVMProgram(t testing.TB, w Workload, amount string) []string {
	t.Helper()
	javac := RequireFile(t, filepath.Join(javaHome, "bin/javac"), "openjdk-17-jdk-headless")
	dir := t.TempDir()
	src := filepath.Join(dir, "Work.java")
	if err := os.WriteFile(src, workJava, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(javac, "-d", dir, src).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	argv := append([]string{filepath.Join(javaHome, "bin/java")}, jvmFlags...)
	return RemovingPerfMaps(t, append(argv, "-cp", dir, "Work", string(w), amount))
}

// NodeProgram returns the command line that runs the node fixture
// (testdata/work.js, written into a directory of the test's) under node
// --perf-basic-prof, for workload w and amount as JVMProgram's. The V8
// log that --perf-basic-prof also writes (by default into the working
// directory) goes into that directory, a file per process. The perf maps
// are removed when the test ends, as JVMProgram's.
func NodeProgram(t testing.TB, w Workload, amount string) []string {
	t.Helper()
	node := RequireCommand(t, "node")
	dir := t.TempDir()
	src := filepath.Join(dir, "work.js")
	if err := os.WriteFile(src, workJS, 0o644); err != nil {
		t.Fatal(err)
	}
	return RemovingPerfMaps(t, []string{node, "--perf-basic-prof", "--logfile=" + filepath.Join(dir, "v8.log"), src, string(w), amount})
}

// RemovingPerfMaps returns a command line that runs argv through a shell
// which notes its process id before exec'ing argv (exec keeps the id),
// and removes, when the test ends, /tmp/perf-PID.map of every process
// so noted: a JIT runtime leaves its map behind for profilers to read,
// and /tmp is shared with other tests' and users' processes, whose maps
// stay. The command line may be run any number of times, at once too.
func RemovingPerfMaps(t testing.TB, argv []string) []string {
	t.Helper()
	pids := filepath.Join(t.TempDir(), "pids")
	// Registered after t.TempDir's own cleanup, so it runs before the
	// directory goes.
	t.Cleanup(func() {
		b, _ := os.ReadFile(pids)
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				os.Remove("/tmp/perf-" + strconv.Itoa(pid) + ".map")
			}
		}
	})
	return append([]string{"/bin/sh", "-c", `echo $$ >>"$0" && exec "$@"`, pids}, argv...)
}
