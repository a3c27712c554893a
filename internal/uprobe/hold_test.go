package uprobe

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"trueprof/internal/perf"
	"trueprof/internal/testutil"
)

// holdFixture calls f and g three times each once its standard input
// says go, and prints what they computed.
const holdFixture = `#include <stdio.h>
#include <unistd.h>
__attribute__((noipa)) long f(long i) { return i * 3 + 1; }
__attribute__((noipa)) long g(long i) { return i ^ 5; }
int main(void) {
	char c;
	if (read(0, &c, 1) != 1) return 1;
	long s = 0;
	for (long i = 0; i < 3; i++) s += f(i) + g(s);
	printf("%ld\n", s);
	return 0;
}
`

// procState is the state letter of process pid in /proc/PID/stat.
func procState(t *testing.T, pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	return s[strings.LastIndexByte(s, ')')+2]
}

// TestHold: the first entry of a site that holds stops the process, which
// stays stopped until resumed; after Release its entries no longer stop
// it, and the other site's never did. Every entry and exit is delivered,
// and the program's output is what it prints unprobed; the same with the
// BPF side loaded beforehand (AttachLoaded).
func TestHold(t *testing.T) {
	requireUprobes(t)
	t.Run("attach", func(t *testing.T) { testHold(t, false) })
	t.Run("loaded", func(t *testing.T) { testHold(t, true) })
}

func testHold(t *testing.T, loaded bool) {
	dir := t.TempDir()
	bin := testutil.BuildC(t, dir, "held", holdFixture, "-O2")
	cmd := exec.Command(bin)
	cmd.Stdin = strings.NewReader("x")
	want, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	sites, err := Plan(bin, []string{"f", "g"})
	if err != nil || len(sites) != 2 || sites[0].Function != "f" {
		t.Fatalf("plan: %+v, %v", sites, err)
	}
	sites[0].Hold = true
	cmd = exec.Command(bin)
	in, out := testutil.StartGated(t, cmd, bin)
	var set *Set
	if loaded {
		var l *Loaded
		if l, err = Load(); err != nil {
			t.Fatal(err)
		}
		set, err = AttachLoaded(l, cmd.Process.Pid, bin, sites)
	} else {
		set, err = Attach(cmd.Process.Pid, bin, sites)
	}
	if err != nil {
		t.Fatal(err)
	}
	poller := pollSet(t, set)
	in.Write([]byte{1})
	var held []Event
	entries, exits := map[string]int{}, map[string]int{}
	read := func() {
		set.Read(func(e Event) {
			if e.Held {
				held = append(held, e)
			}
			if e.Entry {
				entries[sites[e.Site].Function]++
			} else {
				exits[sites[e.Site].Function]++
			}
		})
	}
	// The held entry wakes the poll at once, not at a quarter of the ring.
	for deadline := time.Now().Add(5 * time.Second); len(held) == 0 && time.Now().Before(deadline); {
		if err := poller.Wait(1000); err != nil {
			t.Fatal(err)
		}
		read()
	}
	if len(held) != 1 || sites[held[0].Site].Function != "f" || held[0].TID != uint32(cmd.Process.Pid) {
		t.Fatalf("held entries %+v, want f's first", held)
	}
	for deadline := time.Now().Add(2 * time.Second); procState(t, cmd.Process.Pid) != 'T'; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("process state %c after a held entry, want T (stopped)", procState(t, cmd.Process.Pid))
		}
	}
	// Stopped means stopped: nothing else runs while it is held.
	time.Sleep(50 * time.Millisecond)
	read()
	if st := procState(t, cmd.Process.Pid); st != 'T' || entries["f"] != 1 || entries["g"] != 0 {
		t.Fatalf("state %c, entries %v while held", st, entries)
	}
	if err := set.Release(0); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	read()
	if len(held) != 1 {
		t.Errorf("%d held entries, want 1: a released site held again", len(held))
	}
	for _, fn := range []string{"f", "g"} {
		if entries[fn] != 3 || exits[fn] != 3 {
			t.Errorf("%s: %d entries, %d exits, want 3 and 3", fn, entries[fn], exits[fn])
		}
	}
	if out.String() != string(want) {
		t.Errorf("held output %q, unheld %q", out.String(), want)
	}
}

// TestAttachLoadedTooMany: a loaded set takes LoadedSites sites at most;
// more is an error, and the loaded side is freed.
func TestAttachLoadedTooMany(t *testing.T) {
	requireUprobes(t)
	l, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := AttachLoaded(l, os.Getpid(), "/bin/true", make([]Site, LoadedSites+1)); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("AttachLoaded of %d sites: %v", LoadedSites+1, err)
	}
	if l.events != nil || l.hold != nil {
		t.Error("the loaded side was not freed")
	}
}

// pairHoldFixture's first and second begin with a mov (stepped), so they
// are probed at their calls: first's call returns onto second's, one
// probe holding first's exit and second's entry.
const pairHoldFixture = `#include <stdio.h>
#include <unistd.h>
static volatile long sink;
void first(void) { sink += sink * 3; }
void second(void) { sink += sink * 5; }
void helper(void) { sink++; }
void pairs(void) { first(); second(); helper(); }
int main(void) {
	char c;
	if (read(0, &c, 1) != 1) return 1;
	for (int i = 0; i < 3; i++) pairs();
	printf("%ld\n", sink);
	return 0;
}
`

// TestHoldPair: a site that holds stops the process at an entry that
// shares its probe with another call's exit (kindPair): the exit comes
// first and does not hold, the entry holds, and after Release and
// SIGCONT every call is delivered.
func TestHoldPair(t *testing.T) {
	requireUprobes(t)
	bin := testutil.BuildC(t, t.TempDir(), "pairs", pairHoldFixture)
	sites, err := Plan(bin, []string{"first", "second", "pairs"})
	if err != nil {
		t.Fatal(err)
	}
	second := slices.IndexFunc(sites, func(s Site) bool { return s.Function == "second" })
	if second < 0 || len(sites[second].Calls) != 1 || len(siteOf(t, sites, "first").Calls) != 1 ||
		siteOf(t, sites, "first").Calls[0].Return != sites[second].Calls[0].Call {
		t.Fatalf("plan %+v: want first's call returning onto second's", sites)
	}
	sites[second].Hold = true
	cmd := exec.Command(bin)
	in, _ := testutil.StartGated(t, cmd, bin)
	set, err := Attach(cmd.Process.Pid, bin, sites)
	if err != nil {
		t.Fatal(err)
	}
	poller := pollSet(t, set)
	in.Write([]byte{1})
	var seq []string
	read := func() {
		set.Read(func(e Event) {
			ev := map[bool]string{true: "+", false: "-"}[e.Entry] + sites[e.Site].Function
			if e.Held {
				ev += " held"
			}
			seq = append(seq, ev)
		})
	}
	for deadline := time.Now().Add(5 * time.Second); !slices.Contains(seq, "+second held") && time.Now().Before(deadline); {
		if err := poller.Wait(1000); err != nil {
			t.Fatal(err)
		}
		read()
	}
	if got := strings.Join(seq, " "); got != "+pairs +first -first +second held" {
		t.Fatalf("events until the hold %q, want first's exit, then second's held entry", got)
	}
	for deadline := time.Now().Add(2 * time.Second); procState(t, cmd.Process.Pid) != 'T'; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("process state %c after a held entry, want T (stopped)", procState(t, cmd.Process.Pid))
		}
	}
	if err := set.Release(second); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	read()
	want := strings.Repeat("+pairs +first -first +second -second -pairs ", 3)
	want = strings.Replace(strings.TrimSpace(want), "+second", "+second held", 1)
	if got := strings.Join(seq, " "); got != want {
		t.Errorf("events %q, want %q", got, want)
	}
}

// pollSet returns a poller of set's rings; both are closed when the test
// ends.
func pollSet(t *testing.T, set *Set) *perf.Poller {
	t.Helper()
	t.Cleanup(func() { set.Close() })
	poller, err := perf.NewPoller(set.Fds())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { poller.Close() })
	return poller
}
