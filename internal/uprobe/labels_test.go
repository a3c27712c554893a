package uprobe

import (
	"cmp"
	"errors"
	"slices"
	"testing"

	"trueprof/internal/symbolize"
	"trueprof/internal/testutil"
)

// TestLabels follows the labels of a running Go program and checks them
// against the label sets its goroutines print: set by pprof.Do, added
// by a nested pprof.Do, restored when it returns, and inherited by a
// goroutine started inside one.
func TestLabels(t *testing.T) {
	requireUprobes(t)
	var l *Labels
	var changes []LabelChange
	pid := 0
	out := runFixture(t, testutil.LabelFixture, func(p int, bin string, layout symbolize.GoLayout) (ring *ring, err error) {
		if ls := layout.LabelSet; ls.Size != 32 || ls.Key == ls.Value {
			t.Errorf("label layout %+v", ls)
		}
		pid = p
		l, err = AttachLabels(pid, bin, layout)
		if err != nil {
			return nil, err
		}
		return &l.ring, nil
	}, func() {
		l.Read(func(c LabelChange) {
			if c.PID != uint32(pid) || c.Truncated {
				t.Errorf("change %+v", c)
			}
			changes = append(changes, c)
		})
	})
	defer l.Close()
	if n := l.Lost(); n > 0 {
		t.Errorf("%d changes lost", n)
	}
	slices.SortStableFunc(changes, func(a, b LabelChange) int { return cmp.Compare(a.Time, b.Time) })
	var got []testutil.LabelChange
	for _, c := range changes {
		var pairs []string
		for _, p := range c.Pairs {
			pairs = append(pairs, p.Key+"="+p.Value)
		}
		got = append(got, testutil.LabelChange{GoID: c.GoID, Pairs: pairs})
	}
	testutil.CheckLabelFixture(t, out, got)
}

// TestLabelsNeedSetProfLabel refuses a Go binary that sets no labels.
func TestLabelsNeedSetProfLabel(t *testing.T) {
	bin := testutil.BuildGo(t, t.TempDir(), "nolabels", "package main\n\nfunc main() {}\n")
	if _, err := labelSites(bin); !errors.Is(err, ErrNoLabels) {
		t.Errorf("%v, want ErrNoLabels", err)
	}
}
