package record

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"trueprof/internal/perf"
	"trueprof/internal/resolve"
	"trueprof/internal/trace"
	"trueprof/internal/uprobe"
)

// fakePlanner records what the data path reports to it.
type fakePlanner struct {
	mapped  []mappedReport
	entries []enteredReport
	stopped bool
}

type mappedReport struct {
	pid  uint32
	path string
	time uint64
}

type enteredReport struct {
	pid, module uint32
	off, time   uint64
}

func (f *fakePlanner) moduleMapped(pid uint32, path string, time uint64) error {
	f.mapped = append(f.mapped, mappedReport{pid, path, time})
	return nil
}

func (f *fakePlanner) entered(pid, module uint32, off, time uint64) error {
	f.entries = append(f.entries, enteredReport{pid, module, off, time})
	return nil
}

func (f *fakePlanner) stop()  { f.stopped = true }
func (f *fakePlanner) close() {}

// TestDataPathReportsToThePlanner runs the data path (session.process
// and processEvent) over synthetic kernel records and probe events with
// a fake planner: it must report each executable mapping and each entry
// of a uprobe-probed function, and place no probe itself (no call of the
// uprobe attach, no event source added).
func TestDataPathReportsToThePlanner(t *testing.T) {
	attached := 0
	defer func(f func(int, string, []uprobe.Site) (*uprobe.Set, error)) { attachUprobes = f }(attachUprobes)
	attachUprobes = func(int, string, []uprobe.Site) (*uprobe.Set, error) {
		attached++
		return nil, errors.New("probes attached outside the planner")
	}

	f, err := os.Create(filepath.Join(t.TempDir(), "t.trace"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := trace.NewWriter(f, &trace.Header{Event: "dummy", Clock: "CLOCK_MONOTONIC"}, trace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakePlanner{}
	s := &session{cfg: Config{Root: "main"}, log: io.Discard, w: w, mech: MechUprobe, planner: fake}
	s.res = resolve.New(w, io.Discard, resolve.Options{})

	const lib = "/nonexistent/libplanned.so"
	records := []perf.Record{
		{Type: perf.RecordComm, PID: 7, TID: 7, Time: 90, Comm: "prog"},
		{Type: perf.RecordMmap2, PID: 7, TID: 7, Time: 100, Addr: 0x7f0000000000, Len: 0x10000, Prot: syscall.PROT_READ | syscall.PROT_EXEC, Filename: lib},
		{Type: perf.RecordMmap2, PID: 7, TID: 7, Time: 110, Addr: 0x7f0000100000, Len: 0x10000, Prot: syscall.PROT_READ, Filename: "/nonexistent/data"},
		{Type: perf.RecordFork, PID: 7, PPID: 7, TID: 8, PTID: 7, Time: 120},
	}
	for i := range records {
		if err := s.process(&records[i]); err != nil {
			t.Fatalf("process %+v: %v", records[i], err)
		}
	}
	module, err := s.res.Module(lib)
	if err != nil {
		t.Fatal(err)
	}
	events := []instrEvent{
		{time: 200, pid: 7, tid: 8, kind: trace.EventEntry, module: module, addr: 0x1130},
		{time: 210, pid: 7, tid: 8, kind: trace.EventExit, module: module, addr: 0x1130},
		// A hook's event names an address, not a probed file offset.
		{time: 220, pid: 7, tid: 8, kind: trace.EventEntry, addr: 0x7f0000001130},
		{time: 230, pid: 7, tid: 8, kind: trace.EventEntry, module: module, addr: 0x1200},
	}
	for i := range events {
		if err := s.processEvent(&events[i]); err != nil {
			t.Fatalf("processEvent %+v: %v", events[i], err)
		}
	}

	if want := []mappedReport{{7, lib, 100}}; !slices.Equal(fake.mapped, want) {
		t.Errorf("mappings reported %v, want the executable one only: %v", fake.mapped, want)
	}
	if want := []enteredReport{{7, module, 0x1130, 200}, {7, module, 0x1200, 230}}; !slices.Equal(fake.entries, want) {
		t.Errorf("entries reported %v, want the uprobe entries: %v", fake.entries, want)
	}
	if attached != 0 || len(s.sources) != 0 {
		t.Errorf("the data path placed probes: %d attaches, %d sources", attached, len(s.sources))
	}
	if s.result.Events != 4 {
		t.Errorf("%d events written, want 4", s.result.Events)
	}
	s.detach()
	if !fake.stopped {
		t.Error("detach did not stop the planner")
	}
}

// TestOnlyThePlannerAttaches checks the package's source: uprobes for
// functions are attached in planner.go alone, through attachUprobes,
// which the test above replaces.
func TestOnlyThePlannerAttaches(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			var what string
			switch n := n.(type) {
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && x.Name == "uprobe" && n.Sel.Name == "Attach" {
					what = "uprobe.Attach"
				}
			case *ast.Ident:
				if n.Name == "attachUprobes" || n.Name == "attachModule" || n.Name == "placeModule" {
					what = n.Name
				}
			}
			if what != "" && name != "planner.go" {
				t.Errorf("%s: %s outside the planner", fset.Position(n.Pos()), what)
			}
			return true
		})
	}
}
