package model

import (
	"errors"
	"path"
	"strings"
	"testing"
)

func TestMatcher(t *testing.T) {
	worker := &Thread{PID: 1, TID: 2, Name: "worker-1", Names: []string{"main", "worker-1"}}
	io := &Thread{PID: 1, TID: 3, Name: "io"}
	other := &Thread{PID: 7, TID: 8, Name: "worker-2"}
	for _, tc := range []struct {
		name   string
		f      Filter
		keep   []*Thread // of worker, io, other
		String string
	}{
		{"zero", Filter{}, []*Thread{worker, io, other}, ""},
		{"pid", Filter{PID: 1, HasPID: true}, []*Thread{worker, io}, "pid 1"},
		{"pid 0 is a pid", Filter{HasPID: true}, nil, "pid 0"},
		{"tid", Filter{TID: 3, HasTID: true}, []*Thread{io}, "tid 3"},
		{"thread glob", Filter{Thread: "worker-*"}, []*Thread{worker, other}, `thread "worker-*"`},
		{"an earlier name", Filter{Thread: "main"}, []*Thread{worker}, `thread "main"`},
		{"thread number is a tid", Filter{Thread: "8"}, []*Thread{other}, `thread "8"`},
		{"pid and thread", Filter{PID: 7, HasPID: true, Thread: "worker-*", Labels: []string{"k=v"}}, []*Thread{other}, `pid 7 thread "worker-*" label "k=v"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := tc.f.Compile()
			if err != nil {
				t.Fatal(err)
			}
			for round := 0; round < 2; round++ { // the second answers from the cache
				var got []*Thread
				for _, th := range []*Thread{worker, io, other} {
					if m.Thread(th.PID, th.TID, th) {
						got = append(got, th)
					}
					if m.Thread(th.PID, th.TID, th) != tc.f.Match(th.PID, th.TID, th) {
						t.Errorf("Matcher.Thread and Filter.Match disagree on %s", th.Name)
					}
				}
				if len(got) != len(tc.keep) {
					t.Fatalf("round %d: kept %d threads, want %d", round, len(got), len(tc.keep))
				}
				for i := range got {
					if got[i] != tc.keep[i] {
						t.Errorf("round %d: kept %s, want %s", round, got[i].Name, tc.keep[i].Name)
					}
				}
			}
			if s := tc.f.String(); s != tc.String {
				t.Errorf("String() = %q, want %q", s, tc.String)
			}
			if m.Filter().String() != tc.String {
				t.Errorf("Matcher.Filter() is not the compiled filter")
			}
		})
	}
	// An unknown incarnation matches by tid only.
	m, _ := Filter{Thread: "worker-*"}.Compile()
	if m.Thread(1, 2, nil) {
		t.Error("a glob matched a thread the trace does not know")
	}
	m, _ = Filter{Thread: "2"}.Compile()
	if !m.Thread(1, 2, nil) {
		t.Error("a tid did not match a thread the trace does not know")
	}
}

func TestMatcherLabels(t *testing.T) {
	pairs := []LabelPair{{"worker", "2"}, {"tenant", "acme"}, {"tenant", "beta"}}
	for _, tc := range []struct {
		labels []string
		want   bool
	}{
		{nil, true},
		{[]string{"worker=2"}, true},
		{[]string{"worker=[0-9]"}, true},
		{[]string{"worker=3"}, false},
		{[]string{"worker=3", "worker=2"}, true},     // ORed within a key
		{[]string{"worker=2", "tenant=b*"}, true},    // ANDed across keys, any value of a key
		{[]string{"worker=2", "tenant=zeta"}, false}, // one key fails
		{[]string{"region=*"}, false},                // a key the goroutine lacks
		{[]string{"tenant=", "worker=*"}, false},     // an empty value matches only ""
		{[]string{"worker=*", "tenant=acme"}, true},
	} {
		m, err := Filter{Labels: tc.labels}.Compile()
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Labels(pairs); got != tc.want {
			t.Errorf("%q: Labels = %v, want %v", tc.labels, got, tc.want)
		}
	}
	if m, _ := (Filter{}).Compile(); !m.Labels(nil) || m.LabelMatcher() != nil {
		t.Error("the zero filter does not keep every goroutine")
	}
}

func TestFilterCompileErrors(t *testing.T) {
	for _, tc := range []struct {
		f    Filter
		want error
	}{
		{Filter{Thread: "[a-"}, path.ErrBadPattern},
		{Filter{Labels: []string{"novalue"}}, ErrBadLabel},
		{Filter{Labels: []string{"=v"}}, ErrBadLabel},
		{Filter{Labels: []string{"k=[a-"}}, ErrBadLabel},
	} {
		if _, err := tc.f.Compile(); !errors.Is(err, tc.want) {
			t.Errorf("%v: Compile() = %v, want %v", tc.f, err, tc.want)
		}
	}
	if _, err := (Filter{Labels: []string{"k=[a-"}}).Compile(); !errors.Is(err, path.ErrBadPattern) {
		t.Errorf("a bad label glob does not wrap path.ErrBadPattern: %v", err)
	}
}

func TestLabelMap(t *testing.T) {
	if LabelMap(nil) != nil {
		t.Error("LabelMap(nil) is not nil")
	}
	m := LabelMap([]LabelPair{{"a", "1"}, {"b", "2"}, {"a", "3"}})
	if len(m) != 2 || m["a"] != "1,3" || m["b"] != "2" {
		t.Errorf("LabelMap = %v", m)
	}
}

// TestFilterCheck: a filter that keeps nothing of the trace is an error
// that lists what the trace has; one that keeps something is not.
func TestFilterCheck(t *testing.T) {
	p := &Profile{
		Threads: []*Thread{{PID: 1, TID: 1, Name: "prog"}, {PID: 1, TID: 2, Name: "worker-1", Names: []string{"prog", "worker-1"}}},
		Labels:  []Labels{{PID: 1, GoID: 5, Pairs: []LabelPair{{"tenant", "acme"}, {"job", "sync"}}}, {PID: 1, GoID: 6, Pairs: []LabelPair{{"tenant", "zeta"}}}},
	}
	for _, tc := range []struct {
		name string
		f    Filter
		err  string // "" when the filter keeps something
	}{
		{"zero", Filter{}, ""},
		{"thread", Filter{Thread: "worker-*"}, ""},
		{"pid", Filter{PID: 1, HasPID: true}, ""},
		{"tid", Filter{TID: 2, HasTID: true}, ""},
		{"label", Filter{Labels: []string{"tenant=a*"}}, ""},
		{"labels of two keys", Filter{Labels: []string{"tenant=acme", "job=sync"}}, ""},
		{"thread nomatch", Filter{Thread: "nomatch*"}, `no thread of the trace matches thread "nomatch*"; threads: prog (pid 1 tid 1), worker-1 (pid 1 tid 2)`},
		{"pid nomatch", Filter{PID: 42, HasPID: true}, `no thread of the trace matches pid 42; threads: prog`},
		{"tid of another pid", Filter{PID: 1, HasPID: true, TID: 9, HasTID: true}, `matches pid 1 tid 9;`},
		{"label nomatch", Filter{Labels: []string{"tenant=b*"}}, `no goroutine of the trace carries label "tenant=b*"; labels carried: job=sync, tenant=acme, tenant=zeta`},
		{"labels never together", Filter{Labels: []string{"tenant=zeta", "job=sync"}}, `carries label "tenant=zeta" label "job=sync"`},
		{"label of another pid", Filter{PID: 1, HasPID: true, Labels: []string{"tenant=acme"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.f.Check(p)
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("Check = %v, want nil", err)
			case tc.err != "" && (!errors.Is(err, ErrNoMatch) || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("Check = %v, want ErrNoMatch saying %q", err, tc.err)
			}
		})
	}
	if err := (Filter{Labels: []string{"k=v"}}).Check(&Profile{}); err == nil || !strings.HasSuffix(err.Error(), "labels carried: none") {
		t.Errorf("a trace without labels: Check = %v", err)
	}
	many := &Profile{}
	for i := range 25 {
		many.Threads = append(many.Threads, &Thread{PID: 1, TID: uint32(i + 1), Name: "t"})
	}
	if err := (Filter{Thread: "x"}).Check(many); err == nil || !strings.HasSuffix(err.Error(), "and 5 more") {
		t.Errorf("25 threads: Check = %v, want the first 20 and 5 more", err)
	}
}
