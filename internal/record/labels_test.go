package record

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"trueprof/internal/model"
	"trueprof/internal/testutil"
)

// recordLabelFixture records testutil.LabelFixture with cfg, checks the
// label changes against what it printed, and returns the profile and a
// function giving the labels ("k=v,k=v") of the goroutine thread tid ran
// at a time.
func recordLabelFixture(t *testing.T, cfg Config) (*model.Profile, func(tid uint32, at uint64) string) {
	t.Helper()
	bin := testutil.BuildGo(t, t.TempDir(), "labelfix", testutil.LabelFixture)
	var out bytes.Buffer
	cfg.Command, cfg.Stdout = []string{bin}, &out
	_, p := recordCmd(t, cfg)
	var changes []testutil.LabelChange
	for _, l := range p.Labels {
		var pairs []string
		for _, pair := range l.Pairs {
			pairs = append(pairs, pair.Key+"="+pair.Value)
		}
		changes = append(changes, testutil.LabelChange{GoID: l.GoID, Pairs: pairs})
	}
	testutil.CheckLabelFixture(t, out.Bytes(), changes)
	sw, idx := switches(p), p.GoLabels()
	pid := p.Processes[0].PID
	return p, func(tid uint32, at uint64) string {
		var pairs []string
		for _, l := range idx.At(pid, testutil.GoroutineAt(sw, tid, at), at) {
			pairs = append(pairs, l.Key+"="+l.Value)
		}
		return strings.Join(pairs, ",")
	}
}

// labelsOf is the labels LabelFixture's functions run with.
var labelsOf = map[string]string{
	"main.spin1":     "worker=1",
	"main.spin2":     "worker=2",
	"main.spin3":     "worker=3",
	"main.spinInner": "phase=inner,worker=2",
	"main.spinChild": "worker=3",
}

// TestLabelsSampling samples the fixture: the samples in each worker's
// function carry that worker's labels.
func TestLabelsSampling(t *testing.T) {
	p, labelsAt := recordLabelFixture(t, Config{})
	got := map[string]map[string]int{}
	for _, s := range p.Samples {
		for _, fn := range stackNames(p, s) {
			if _, ok := labelsOf[fn]; ok {
				if got[fn] == nil {
					got[fn] = map[string]int{}
				}
				got[fn][labelsAt(s.TID, s.Time)]++
			}
		}
	}
	t.Logf("samples per function and labels: %v", got)
	for fn, want := range labelsOf {
		n, wrong := 0, 0
		for l, c := range got[fn] {
			n += c
			if l != want {
				wrong += c
			}
		}
		if n < 5 || wrong > n/50 {
			t.Errorf("%s: %d samples, %d without labels %s: %v", fn, n, wrong, want, got[fn])
		}
	}
}

// TestLabelsUprobes counts the fixture's calls with uprobes: every call
// carries the labels of the goroutine that made it.
func TestLabelsUprobes(t *testing.T) {
	var fns []string
	for fn := range labelsOf {
		fns = append(fns, fn)
	}
	slices.Sort(fns)
	p, labelsAt := recordLabelFixture(t, Config{Trace: fns, NoSampling: true})
	got := map[string]int{}
	for _, e := range p.Events {
		if e.Entry {
			fr := p.Locations[e.Function].Frames
			got[fmt.Sprintf("%s %s", fr[len(fr)-1].Function, labelsAt(e.TID, e.Time))]++
		}
	}
	want := map[string]int{}
	for fn, l := range labelsOf {
		n := testutil.LabelFixtureInner
		if w := strings.TrimPrefix(fn, "main.spin"); len(w) == 1 {
			n = testutil.LabelFixtureCalls[w[0]-'0']
		}
		want[fn+" "+l] = n
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("calls by function and labels:\ngot  %v\nwant %v", got, want)
	}
}
