package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"time"

	"trueprof/internal/model"
	"trueprof/internal/perf"
	"trueprof/internal/trace"
)

// Tracepoint ids and raw data of the pairing test: the common fields,
// then the vector at offset 8, as the kernel lays them out.
const (
	testHardEntry = 10 + iota
	testHardExit
	testSoftEntry
	testSoftExit
)

func testIRQState() irqState {
	vec := perf.TracepointField{Offset: 8, Size: 4}
	return irqState{
		common: perf.TracepointField{Offset: 0, Size: 2},
		points: map[uint64]irqPoint{
			testHardEntry: {kind: trace.IRQHard, vector: vec},
			testHardExit:  {kind: trace.IRQHard, exit: true, vector: vec},
			testSoftEntry: {kind: trace.IRQSoft, vector: vec},
			testSoftExit:  {kind: trace.IRQSoft, exit: true, vector: vec},
		},
		running: map[uint32][]irqRunning{},
	}
}

func irqSample(time uint64, cpu, tid uint32, point uint16, vec uint32) perf.Record {
	raw := make([]byte, 16)
	binary.LittleEndian.PutUint16(raw, point)
	binary.LittleEndian.PutUint32(raw[8:], vec)
	return perf.Record{Type: perf.RecordSample, Time: time, CPU: cpu, PID: tid, TID: tid, Raw: raw}
}

// TestIRQPairing feeds interrupt samples to the pairing and checks the
// IRQ records: nested handlers counted once, other tasks' interrupts and
// pairs broken by losses left out.
func TestIRQPairing(t *testing.T) {
	var buf bytes.Buffer
	w, err := trace.NewWriter(&buf, &trace.Header{}, trace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := &session{w: w, log: io.Discard, irq: testIRQState()}
	s.threads.add(10, 10, true)
	recs := []perf.Record{
		// A hard interrupt inside a softirq, on the target.
		irqSample(100, 0, 10, testSoftEntry, 1),
		irqSample(110, 0, 10, testHardEntry, 36),
		irqSample(130, 0, 10, testHardExit, 36),
		irqSample(200, 0, 10, testSoftExit, 1),
		// Another task's interrupt.
		irqSample(100, 1, 99, testHardEntry, 36),
		irqSample(150, 1, 99, testHardExit, 36),
		// An exit without its entry.
		irqSample(300, 0, 10, testSoftExit, 3),
		// Records lost between entry and exit.
		irqSample(400, 0, 10, testHardEntry, 36),
		{Type: perf.RecordLost, Time: 450, CPU: 0, Lost: 2, Raw: irqLost},
		irqSample(460, 0, 10, testHardExit, 36),
		// An entry whose exit was lost, then a whole interrupt.
		irqSample(500, 0, 10, testHardEntry, 36),
		irqSample(600, 0, 10, testHardEntry, 37),
		irqSample(610, 0, 10, testHardExit, 37),
		// A softirq whose exit was lost, then another.
		irqSample(700, 1, 10, testSoftEntry, 3),
		irqSample(800, 1, 10, testSoftEntry, 9),
		irqSample(850, 1, 10, testSoftExit, 9),
		irqSample(900, 1, 10, testSoftExit, 3),
	}
	for i := range recs {
		if done, err := s.track(&recs[i]); !done || err != nil {
			t.Fatalf("record %d: done %v, %v", i, done, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	p, err := model.Load(&buf)
	if err != nil {
		t.Fatal(err)
	}
	want := []model.IRQ{
		{Time: 130, PID: 10, TID: 10, CPU: 0, Vector: 36, Duration: 20},
		{Time: 200, PID: 10, TID: 10, CPU: 0, Soft: true, Vector: 1, Duration: 80},
		{Time: 610, PID: 10, TID: 10, CPU: 0, Vector: 37, Duration: 10},
		{Time: 850, PID: 10, TID: 10, CPU: 1, Soft: true, Vector: 9, Duration: 50},
	}
	if len(p.IRQs) != len(want) {
		t.Fatalf("IRQs %+v, want %+v", p.IRQs, want)
	}
	for i := range want {
		if p.IRQs[i] != want[i] {
			t.Errorf("IRQ %d: %+v, want %+v", i, p.IRQs[i], want[i])
		}
	}
	if p.Lost.Kernel != 2 {
		t.Errorf("lost %+v, want the 2 records the kernel lost", p.Lost)
	}
}

// TestAdoptIRQ checks how the loop takes the interrupt tracepoints opened
// beside the target's start: not before they are open unless it must
// wait, with a word when they were enabled well after the target's
// release, and without them (said once) when they could not be opened.
func TestAdoptIRQ(t *testing.T) {
	const since = uint64(1_000_000_000)
	opened := []event{{fd: -1}}
	for _, tc := range []struct {
		name    string
		open    bool // the opening is done
		wait    bool
		at      uint64
		err     error
		adopted bool
		said    string
	}{
		{name: "still opening", open: false, wait: false},
		{name: "in time", open: true, at: since + uint64(irqLate)/2, adopted: true},
		{name: "late", open: true, at: since + 50_000_000, adopted: true, said: "interrupts recorded from 50 ms after the target started"},
		{name: "waited for at the end", open: true, wait: true, at: since + 7_000_000, adopted: true, said: "from 7 ms"},
		{name: "failed", open: true, err: io.ErrUnexpectedEOF, said: "interrupts not recorded: unexpected EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log bytes.Buffer
			o := &irqOpening{done: make(chan struct{}), st: testIRQState(), opened: opened, err: tc.err, at: tc.at}
			if tc.open {
				close(o.done)
			}
			s := &session{log: &log, irqOpening: o}
			s.adoptIRQ(since, tc.wait)
			if got := s.irqOpening == nil; got != tc.open {
				t.Errorf("taken: %v, want %v", got, tc.open)
			}
			if got := len(s.events) == 1 && s.irq.points != nil; got != tc.adopted {
				t.Errorf("adopted: %v, want %v (events %v)", got, tc.adopted, s.events)
			}
			if tc.said == "" && log.Len() > 0 || !bytes.Contains(log.Bytes(), []byte(tc.said)) {
				t.Errorf("said %q, want %q", log.String(), tc.said)
			}
		})
	}
}

// TestAbandonIRQ checks that recording stopped while the interrupt
// tracepoints are still opening says once that no interrupt was recorded
// and leaves them for the session's close.
func TestAbandonIRQ(t *testing.T) {
	var log bytes.Buffer
	o := &irqOpening{done: make(chan struct{})}
	s := &session{log: &log, irqOpening: o}
	s.abandonIRQ()
	s.abandonIRQ()
	if n := bytes.Count(log.Bytes(), []byte("interrupts not recorded")); n != 1 {
		t.Errorf("said %d times: %q", n, log.String())
	}
	if s.irqOpening != o {
		t.Error("the opening was dropped: close could not close its events")
	}
	log.Reset()
	s = &session{log: &log}
	s.abandonIRQ()
	if log.Len() > 0 {
		t.Errorf("said %q without an opening", log.String())
	}
}

// TestCloseStopsIRQOpening checks that a session closed while the
// interrupt tracepoints are still opening stops the opening rather than
// waiting for every tracepoint (each may wait tens of milliseconds for
// a previous recording's teardown), and closes what it opened.
func TestCloseStopsIRQOpening(t *testing.T) {
	o := &irqOpening{done: make(chan struct{}), stop: make(chan struct{}), opening: true}
	go func() {
		// An opening that only ends when told to stop.
		<-o.stop
		o.err = errOpeningStopped
		close(o.done)
	}()
	s := &session{log: io.Discard, irqOpening: o}
	closed := make(chan struct{})
	go func() {
		s.close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("close waited for the opening to finish by itself")
	}
}

// TestIRQOpeningWaitsForTeardowns: while a holder keeps the teardown
// lock (a previous recording's events being torn down), the interrupt
// tracepoints' opening waits for it before it opens anything, the
// session's close does not wait for it, and once the lock is released
// the stopped opening ends having opened nothing.
func TestIRQOpeningWaitsForTeardowns(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	lock := lockTeardown()
	if lock == nil {
		t.Fatal("no teardown lock")
	}
	defer lock.Close()
	s := &session{log: io.Discard}
	s.startIRQ()
	o := s.irqOpening
	select {
	case <-o.done:
		t.Fatalf("the opening ended (%v) while a teardown held the lock", o.err)
	case <-time.After(50 * time.Millisecond):
	}
	stopped := make(chan []event)
	go func() { stopped <- o.stopOpening() }()
	select {
	case ev := <-stopped:
		if len(ev) != 0 {
			t.Errorf("stopped with %d events open", len(ev))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("stopping waited for the teardown")
	}
	lock.Close()
	select {
	case <-o.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the opening still waits after the teardown lock was released")
	}
	if !errors.Is(o.err, errOpeningStopped) || len(o.opened) != 0 {
		t.Errorf("opened %d events, error %v; want none and errOpeningStopped", len(o.opened), o.err)
	}
}

// TestIRQOpeningStopped checks that the interrupt tracepoints' opening,
// told to stop before it began, opens none and says why.
func TestIRQOpeningStopped(t *testing.T) {
	requireIRQ(t)
	stop := make(chan struct{})
	close(stop)
	s := &session{log: io.Discard}
	_, opened, err := s.openIRQEvents(stop)
	if !errors.Is(err, errOpeningStopped) || len(opened) != 0 {
		t.Errorf("opened %d events, error %v; want none and errOpeningStopped", len(opened), err)
	}
}
