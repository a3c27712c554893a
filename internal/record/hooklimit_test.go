package record

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"trueprof/internal/calltree"
	"trueprof/internal/model"
	"trueprof/internal/testutil"
	"trueprof/internal/trace"
)

// TestHookSizeLimit records 12,000,002 events of the dense load with
// --size 2M in normal and wrap mode: the trace stays within 2.2 MB and
// every event is kept, counted as lost by the limit, or counted as
// dropped.
func TestHookSizeLimit(t *testing.T) {
	const mids = 2_000_000
	const limit = 2 << 20
	bin := testutil.BuildC(t, t.TempDir(), "calls", testutil.CallsC, "-O1", "-fno-inline", "-finstrument-functions")
	for _, mode := range []trace.Mode{trace.ModeNormal, trace.ModeWrap} {
		t.Run(string(mode), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "trueprof.trace")
			_, p := recordCmd(t, Config{Command: []string{bin, strconv.Itoa(mids)}, Mech: "hook", NoSampling: true,
				Mode: mode, SizeLimit: limit, Output: out})
			st, err := os.Stat(out)
			if err != nil {
				t.Fatal(err)
			}
			var dropped uint64
			for _, a := range p.Adjusts {
				dropped += a.Dropped
			}
			lost := p.Lost.Size + p.Lost.Wrap
			total := uint64(6*mids + 2)
			t.Logf("%s: %d bytes, %d events kept, lost by size %d, by wrap %d, dropped %d",
				mode, st.Size(), len(p.Events), p.Lost.Size, p.Lost.Wrap, dropped)
			if st.Size() > 2_200_000 {
				t.Errorf("trace of %d bytes for --size %d: want at most 2.2 MB", st.Size(), limit)
			}
			if lost == 0 {
				t.Fatal("no loss counted: the limit did not bound the events")
			}
			if (mode == trace.ModeNormal) != (p.Lost.Size > 0) || (mode == trace.ModeWrap) != (p.Lost.Wrap > 0) {
				t.Errorf("%s mode counted its loss as size %d, wrap %d", mode, p.Lost.Size, p.Lost.Wrap)
			}
			if got := uint64(len(p.Events)) + lost + dropped; got != total {
				t.Errorf("kept %d + lost %d + dropped %d = %d, want the %d events made", len(p.Events), lost, dropped, got, total)
			}
			if mode == trace.ModeWrap {
				checkWrapSuffix(t, p)
			}
		})
	}
}

// checkWrapSuffix checks that a wrapped recording of the dense load kept
// each thread's most recent events as whole calls: replayed per thread
// on a shadow stack, the only exits without their entry are those of the
// calls open where the trace was cut (the thread's function, mid and
// leaf: at most 3), the last event kept is the exit of the thread's
// outermost function (main's, or the function it started with, one of
// outer), and the report counts exactly those cut calls.
func checkWrapSuffix(t *testing.T, p *model.Profile, outer ...string) {
	t.Helper()
	stacks := map[uint32][]uint32{}
	last := map[uint32]model.Event{}
	cut := map[uint32]int{}
	for _, e := range p.Events {
		st := stacks[e.TID]
		switch {
		case e.Entry:
			st = append(st, e.Function)
		case len(st) > 0 && st[len(st)-1] == e.Function:
			st = st[:len(st)-1]
		default:
			cut[e.TID]++
		}
		stacks[e.TID], last[e.TID] = st, e
	}
	var cuts uint64
	for tid, n := range cut {
		if n > 3 {
			t.Errorf("thread %d: %d exits without their entry: want at most the 3 calls open at the cut", tid, n)
		}
		cuts += uint64(n)
	}
	for tid, e := range last {
		f := p.Locations[e.Function].Frames
		if e.Entry || len(stacks[tid]) != 0 || !slices.Contains(append(outer, "main"), f[len(f)-1].Function) {
			t.Errorf("thread %d: the last event kept is %s's (entry %v), not the exit of %v, or %d calls are left open: not the most recent events",
				tid, f[len(f)-1].Function, e.Entry, append(outer, "main"), len(stacks[tid]))
		}
	}
	r, err := calltree.Build(p, calltree.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Repairs.Unmatched != cuts {
		t.Errorf("report counts %d unmatched exits, the trace holds %d calls cut by the wrap", r.Repairs.Unmatched, cuts)
	}
}

// twoThreadsC is a load of two threads one after the other: early makes
// argv[1] mid calls, then waits, quiet, while late makes four times as
// many; early returns last. 6n + 24n + 6 events.
const twoThreadsC = `#include <pthread.h>
#include <semaphore.h>
#include <stdlib.h>
volatile long sink;
long leaf(long x) { return x * 3 + 1; }
long mid(long x) { return leaf(x) + leaf(x + 1); }
static long n;
static sem_t worked, finish;
void *early(void *arg) {
	long s = 0;
	for (long i = 0; i < n; i++)
		s += mid(i);
	sink = s;
	sem_post(&worked);
	sem_wait(&finish);
	return 0;
}
void *late(void *arg) {
	long s = 0;
	for (long i = 0; i < 4 * n; i++)
		s += mid(i);
	sink = s;
	return 0;
}
int main(int argc, char **argv) {
	pthread_t a, b;
	n = atol(argv[1]);
	sem_init(&worked, 0, 0);
	sem_init(&finish, 0, 0);
	pthread_create(&a, 0, early, 0);
	sem_wait(&worked);
	pthread_create(&b, 0, late, 0);
	pthread_join(b, 0);
	sem_post(&finish);
	pthread_join(a, 0);
	return 0;
}
`

// TestHookWrapPerThread records twoThreadsC in wrap mode with a budget
// far below its events: the thread that went quiet before the other's
// burst keeps its own last calls (a global time window would keep none
// of them), both threads keep whole calls but those open at their cut,
// and kept plus lost events add up to those made.
func TestHookWrapPerThread(t *testing.T) {
	const n = 1_000_000
	bin := testutil.BuildC(t, t.TempDir(), "twothreads", twoThreadsC, "-finstrument-functions", "-pthread")
	_, p := recordCmd(t, Config{Command: []string{bin, strconv.Itoa(n)}, Mech: "hook", NoSampling: true,
		Mode: trace.ModeWrap, SizeLimit: 1 << 20})
	var dropped uint64
	for _, a := range p.Adjusts {
		dropped += a.Dropped
	}
	mids := map[uint32]int{}     // kept mid entries per thread
	outer := map[uint32]string{} // the function of each thread's last event
	for _, e := range p.Events {
		f := p.Locations[e.Function].Frames
		name := f[len(f)-1].Function
		if e.Entry && name == "mid" {
			mids[e.TID]++
		}
		outer[e.TID] = name
	}
	t.Logf("%d events kept, %d lost by wrap, %d dropped; mid entries kept per thread %v, last functions %v",
		len(p.Events), p.Lost.Wrap, dropped, mids, outer)
	if p.Lost.Wrap == 0 {
		t.Fatal("nothing lost: the budget did not bound the events")
	}
	if got := uint64(len(p.Events)) + p.Lost.Wrap + dropped; got != 30*n+6 {
		t.Errorf("kept %d + lost %d + dropped %d = %d, want the %d events made", len(p.Events), p.Lost.Wrap, dropped, got, 30*n+6)
	}
	for _, fn := range []string{"early", "late"} {
		var tid uint32
		for id, name := range outer {
			if name == fn {
				tid = id
			}
		}
		if tid == 0 || mids[tid] == 0 {
			t.Errorf("thread of %s (%d) kept %d of its mid calls: want its most recent ones", fn, tid, mids[tid])
		}
	}
	checkWrapSuffix(t, p, "early", "late")
}
