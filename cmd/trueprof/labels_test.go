package main

import (
	"encoding/json"
	"maps"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"trueprof/internal/testutil"
)

// TestLabelFilter records testutil.LabelFixture with sampling and probes
// on its workers' functions, and reports with --label: worker=2 keeps
// exactly worker 2's calls and samples (its nested pprof.Do's too), and
// the threads view by goroutine shows each goroutine's labels.
func TestLabelFilter(t *testing.T) {
	testutil.RequirePerf(t)
	dir := t.TempDir()
	bin := testutil.BuildGo(t, dir, "labelfix", testutil.LabelFixture)
	tr := filepath.Join(dir, "t.trace")
	args := []string{"record", "-o", tr}
	for _, fn := range []string{"main.spin1", "main.spin2", "main.spin3", "main.spinInner", "main.spinChild"} {
		args = append(args, "--trace", fn)
	}
	if out, err := exec.Command(trueprof(), append(args, "--", bin)...).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	report := func(args ...string) []byte {
		t.Helper()
		out, err := exec.Command(trueprof(), append([]string{"report", "-i", tr}, args...)...).Output()
		if err != nil {
			t.Fatalf("report %v: %v", args, err)
		}
		return out
	}
	// Calls per function (flat view of the traced calls).
	calls := func(args ...string) map[string]uint64 {
		var flat struct {
			Functions []struct {
				Name  string `json:"name"`
				Calls uint64 `json:"calls"`
			} `json:"functions"`
		}
		if err := json.Unmarshal(report(append([]string{"--view", "flat", "--format", "json"}, args...)...), &flat); err != nil {
			t.Fatal(err)
		}
		out := map[string]uint64{}
		for _, f := range flat.Functions {
			if strings.HasPrefix(f.Name, "main.spin") {
				out[f.Name] = f.Calls
			}
		}
		return out
	}
	inner := uint64(testutil.LabelFixtureInner)
	for _, c := range []struct {
		labels []string
		want   map[string]uint64
	}{
		{nil, map[string]uint64{"main.spin1": 20, "main.spin2": 30, "main.spin3": 40, "main.spinInner": inner, "main.spinChild": inner}},
		{[]string{"worker=2"}, map[string]uint64{"main.spin2": 30, "main.spinInner": inner}},
		{[]string{"worker=2", "phase=in*"}, map[string]uint64{"main.spinInner": inner}},
		{[]string{"worker=3"}, map[string]uint64{"main.spin3": 40, "main.spinChild": inner}},
		{[]string{"worker=1", "worker=3"}, map[string]uint64{"main.spin1": 20, "main.spin3": 40, "main.spinChild": inner}},
	} {
		var args []string
		for _, l := range c.labels {
			args = append(args, "--label", l)
		}
		if got := calls(args...); !maps.Equal(got, c.want) {
			t.Errorf("--label %v: calls %v, want %v", c.labels, got, c.want)
		}
	}
	// The samples (tprof counts them) of worker 2 only, in a sampling
	// recording.
	sampled := filepath.Join(dir, "s.trace")
	if out, err := exec.Command(trueprof(), "record", "-o", sampled, "--", bin).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	out, err := exec.Command(trueprof(), "report", "-i", sampled, "--view", "tprof", "--label", "worker=2").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range []string{"main.spin1", "main.spin3", "main.spinChild"} {
		if strings.Contains(string(out), fn) {
			t.Errorf("tprof --label worker=2 shows %s:\n%s", fn, out)
		}
	}
	if !strings.Contains(string(out), "main.spin2") || !strings.Contains(string(out), "main.spinInner") {
		t.Errorf("tprof --label worker=2 lacks main.spin2:\n%s", out)
	}
	// The pprof export tags samples with the labels of their time: go
	// tool pprof's -tagfocus keeps as many samples as --label does.
	prof := filepath.Join(dir, "s.pb.gz")
	if out, err := exec.Command(trueprof(), "export", "-i", sampled, "--format", "pprof", "-o", prof).CombinedOutput(); err != nil {
		t.Fatalf("export: %v\n%s", err, out)
	}
	total := func(b []byte) string {
		m := regexp.MustCompile(`(?m)^Samples:\s+(\d+)|Total samples = (\d+)`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("no sample total in:\n%s", b)
		}
		return string(m[1]) + string(m[2])
	}
	gopprof, err := exec.Command("go", "tool", "pprof", "-top", "-tagfocus", "worker=^2$", prof).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof: %v\n%s", err, gopprof)
	}
	kept := regexp.MustCompile(`Showing nodes accounting for (\d+),`).FindSubmatch(gopprof)
	if kept == nil || string(kept[1]) != total(out) || total(gopprof) == total(out) {
		t.Errorf("go tool pprof -tagfocus worker=^2$ keeps %q of %s samples, report --label worker=2 %s:\n%s", kept, total(gopprof), total(out), gopprof)
	}
	// Goroutine rows carry their labels.
	var threads struct {
		Threads []struct {
			Goroutine *uint64           `json:"goroutine"`
			Name      string            `json:"name"`
			Labels    map[string]string `json:"labels"`
			Events    uint64            `json:"events"`
		} `json:"threads"`
	}
	if err := json.Unmarshal(report("--view", "threads", "--by", "goroutine", "--format", "json"), &threads); err != nil {
		t.Fatal(err)
	}
	found := map[string]int{}
	for _, th := range threads.Threads {
		if th.Labels != nil {
			found[th.Labels["worker"]+"/"+th.Labels["phase"]]++
			if !strings.HasSuffix(th.Name, "}") {
				t.Errorf("goroutine row %q does not show its labels", th.Name)
			}
		}
	}
	if want := map[string]int{"1/": 1, "2/inner": 1, "3/": 2}; !maps.Equal(found, want) {
		t.Errorf("labelled goroutines %v, want %v", found, want)
	}
	if err := json.Unmarshal(report("--view", "threads", "--by", "goroutine", "--format", "json", "--label", "worker=3"), &threads); err != nil {
		t.Fatal(err)
	}
	if len(threads.Threads) != 2 {
		t.Errorf("--label worker=3: %d goroutine rows, want the worker and its child: %+v", len(threads.Threads), threads.Threads)
	}
	if tree := string(report("--view", "tree", "--by", "goroutine", "--label", "worker=2")); !strings.Contains(tree, "{phase=inner, worker=2}") {
		t.Errorf("tree by goroutine does not name the goroutine's labels:\n%s", tree)
	}
	if out, err := exec.Command(trueprof(), "report", "-i", tr, "--label", "worker").CombinedOutput(); err == nil {
		t.Errorf("--label without a value accepted:\n%s", out)
	}
}
