package hook

import (
	"os"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"trueprof/internal/testutil"
)

// fakeRegion lays out a region over ordinary memory, as NewRegion does
// over the memfd, so that Drain's ring arithmetic is tested without a
// target: the test plays the hook library's part.
func fakeRegion(t *testing.T, slots, events int) *Region {
	t.Helper()
	slotOff := pageSize
	ringOff := roundUp(slotOff+slots*slotSize, pageSize)
	size := ringOff + slots*events*recSize
	buf := make([]uint64, size/8) // 8-byte aligned
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), size)
	r := newRegion(nil, mem, "")
	*r.hdr = header{Magic: magic, Version: version, ID: 1, Slots: uint32(slots), Events: uint32(events),
		SlotOff: uint64(slotOff), RingOff: uint64(ringOff), Size: uint64(size)}
	if err := r.layout(); err != nil {
		t.Fatal(err)
	}
	return r
}

// produce writes records to slot i as the library does.
func (r *Region) produce(i int, recs ...rec) {
	s := &r.slots[i]
	size := r.mask + 1
	for _, rc := range recs {
		r.rings[uint64(i)*size+s.Head&r.mask] = rc
		s.Head++
	}
}

func (r *Region) collect() []Event {
	var evs []Event
	r.Drain(func(e *Event) { evs = append(evs, *e) })
	return evs
}

func TestDrainWraps(t *testing.T) {
	r := fakeRegion(t, 2, 8)
	s := &r.slots[1]
	s.State, s.PID, s.TID = stateOwned, 10, 11
	next := uint64(100)
	for round := 0; round < 5; round++ {
		// 7 records a round: the ring index wraps every round.
		for k := 0; k < 7; k++ {
			r.produce(1, rec{Time: next, W: word(recEntry+uint64(k%2), next*2)})
			next++
		}
		evs := r.collect()
		if len(evs) != 7 {
			t.Fatalf("round %d: %d events, want 7", round, len(evs))
		}
		for k, e := range evs {
			want := next - 7 + uint64(k)
			if e.Time != want || e.Addr != want*2 || e.PID != 10 || e.TID != 11 || e.Kind != KindEntry+uint8(k%2) {
				t.Fatalf("round %d event %d: %+v", round, k, e)
			}
		}
		if s.Tail != s.Head {
			t.Fatalf("tail %d, head %d", s.Tail, s.Head)
		}
	}
}

func TestDrainAdjustsAndFree(t *testing.T) {
	r := fakeRegion(t, 1, 8)
	s := &r.slots[0]
	s.State, s.PID, s.TID = stateOwned, 10, 11
	r.produce(0, rec{Time: 50, W: word(recEntry, 1)}, rec{Time: 60, W: word(recWait, 7)}, rec{Time: 40, W: word(recExit, 1)}, rec{Time: 70, W: word(99, 0)})
	// The thread exits owing a drop count.
	s.PendDropped, s.PendWait, s.PendSince, s.Nested = 5, 3, 45, 2
	s.State = stateDead
	evs := r.collect()
	want := []Event{
		{Time: 50, PID: 10, TID: 11, Kind: KindEntry, Addr: 1},
		{Time: 60, PID: 10, TID: 11, Kind: KindAdjust, Duration: 7},
		{Time: 60, PID: 10, TID: 11, Kind: KindExit, Addr: 1}, // clamped: times never go back
		{Time: 70, PID: 10, TID: 11, Kind: KindAdjust, Dropped: 1},
		// What it owed: the drops and the wait, one adjust each.
		{Time: 70, PID: 10, TID: 11, Kind: KindAdjust, Dropped: 7},
		{Time: 70, PID: 10, TID: 11, Kind: KindAdjust, Duration: 3},
	}
	if len(evs) != len(want) {
		t.Fatalf("got %+v", evs)
	}
	for i := range want {
		if evs[i] != want[i] {
			t.Errorf("event %d: %+v, want %+v", i, evs[i], want[i])
		}
	}
	if s.State != stateFree || s.PID != 0 || s.PendDropped != 0 || s.Nested != 0 {
		t.Errorf("slot not freed: %+v", *s)
	}
	if evs := r.collect(); len(evs) != 0 {
		t.Errorf("drained twice: %+v", evs)
	}
}

func TestDrainCorruptHead(t *testing.T) {
	r := fakeRegion(t, 1, 8)
	s := &r.slots[0]
	s.State, s.PID, s.TID = stateOwned, 10, 11
	s.Head = 20 // 20 records published into a ring of 8
	evs := r.collect()
	if len(evs) != 9 || evs[0].Kind != KindAdjust || evs[0].Dropped != 12 {
		t.Fatalf("got %+v", evs)
	}
}

func TestDrainNoSlot(t *testing.T) {
	r := fakeRegion(t, 1, 8)
	r.hdr.NoSlotDropped = 4
	evs := r.collect()
	if len(evs) != 1 || evs[0].Dropped != 4 || evs[0].TID != 0 {
		t.Fatalf("got %+v", evs)
	}
	r.hdr.NoSlotDropped = 6
	if evs := r.collect(); len(evs) != 1 || evs[0].Dropped != 2 {
		t.Fatalf("got %+v", evs)
	}
}

func TestFlushFreesVanishedThreads(t *testing.T) {
	r := fakeRegion(t, 2, 8)
	// Slot 0: this very thread (alive); slot 1: a process that does not
	// exist (pid_max is below 1<<22), which ended without its exit hook.
	r.slots[0].State, r.slots[0].PID, r.slots[0].TID = stateOwned, uint32(os.Getpid()), uint32(os.Getpid())
	r.slots[1].State, r.slots[1].PID, r.slots[1].TID = stateOwned, 1<<22+1, 1<<22+1
	r.produce(1, rec{Time: 5, W: word(recEntry, 1)})
	r.slots[1].PendDropped, r.slots[1].PendSince = 9, 6
	var evs []Event
	r.Flush(func(e *Event) { evs = append(evs, *e) })
	if len(evs) != 2 || evs[1].Dropped != 9 {
		t.Fatalf("got %+v", evs)
	}
	if r.slots[0].State != stateOwned || r.slots[1].State != stateFree {
		t.Errorf("states %d, %d; want owned, free", r.slots[0].State, r.slots[1].State)
	}
}

// TestClockConversion checks that converted TSC values stay within 1 µs
// of CLOCK_MONOTONIC while pairs are added as Drain adds them. It runs
// 2 s; TRUEPROF_CLOCK_TEST_SECONDS=60 runs longer.
func TestClockConversion(t *testing.T) {
	if !tscUsable() {
		testutil.Missing(t, "TSC not usable here: records use CLOCK_MONOTONIC")
	}
	d := 2 * time.Second
	if s, err := strconv.Atoi(os.Getenv("TRUEPROF_CLOCK_TEST_SECONDS")); err == nil {
		d = time.Duration(s) * time.Second
	}
	c, err := newClock()
	if err != nil {
		t.Fatal(err)
	}
	first := *c
	first.pairs = append([]pair(nil), c.pairs...)
	var worst, worstFixed int64
	end := time.Now().Add(d)
	for n := 0; time.Now().Before(end); n++ {
		time.Sleep(time.Millisecond)
		c.update()
		p := samplePair()
		// Convert a value read after the latest pair, as Drain does for
		// records published after it sampled.
		diff := int64(c.mono(p.tsc)) - int64(p.mono)
		worst = max(worst, diff, -diff)
		fixed := int64(first.mono(p.tsc)) - int64(p.mono)
		worstFixed = max(worstFixed, fixed, -fixed)
	}
	t.Logf("over %v: worst error %d ns with pairs every %v; %d ns with only the first pair and rate", d, worst, pairEvery, worstFixed)
	if worst > 1000 {
		t.Errorf("conversion off by %d ns", worst)
	}
}

func TestEnv(t *testing.T) {
	r := fakeRegion(t, 1, 8)
	r.lib = "/cache/hook.so"
	r.hdr.ID = 0xabc
	t.Setenv("LD_PRELOAD", "/other.so")
	got := r.Env(5)
	want := []string{"LD_PRELOAD=/other.so:/cache/hook.so", "TRUEPROF_HOOK_FD=5", "TRUEPROF_HOOK_ID=abc"}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Env[%d] = %q, want %q", i, got[i], want[i])
		}
	}
}

// BenchmarkDrain measures the recorder's cost per record.
func BenchmarkDrain(b *testing.B) {
	t := &testing.T{}
	r := fakeRegion(t, 1, 1<<16)
	c, err := newClock()
	if err == nil {
		r.clock = c
	}
	s := &r.slots[0]
	s.State, s.PID, s.TID = stateOwned, 1, 1
	count := 0
	fn := func(*Event) { count++ }
	b.ResetTimer()
	for i := 0; i < b.N; i += 1 << 15 {
		b.StopTimer()
		now := rdtsc()
		for k := 0; k < 1<<15; k++ {
			r.produce(0, rec{Time: now + uint64(k), W: word(recEntry+uint64(k&1), 0x401000)})
		}
		b.StartTimer()
		r.Drain(fn)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(count), "ns/record")
}

// TestFreeze: after Freeze the drains deliver what the rings held then
// and nothing a thread publishes later, which stays in its ring.
func TestFreeze(t *testing.T) {
	r := fakeRegion(t, 2, 8)
	for i := range r.slots {
		s := &r.slots[i]
		s.State, s.PID, s.TID = stateOwned, 10, uint32(11+i)
	}
	r.produce(0, rec{Time: 1, W: word(recEntry, 1)}, rec{Time: 2, W: word(recExit, 1)})
	r.produce(1, rec{Time: 3, W: word(recEntry, 1)})
	r.Freeze()
	r.produce(0, rec{Time: 4, W: word(recEntry, 1)})
	r.produce(1, rec{Time: 5, W: word(recExit, 1)})
	var times []uint64
	for _, e := range r.collect() {
		times = append(times, e.Time)
	}
	if len(times) != 3 || times[0] != 1 || times[1] != 2 || times[2] != 3 {
		t.Errorf("drained after the freeze: times %v, want [1 2 3]", times)
	}
	if evs := r.collect(); len(evs) != 0 {
		t.Errorf("a second drain delivered %d records published after the freeze", len(evs))
	}
	for i := range r.slots {
		if s := &r.slots[i]; s.Head-s.Tail != 1 {
			t.Errorf("slot %d: %d records left in the ring, want the 1 published after the freeze", i, s.Head-s.Tail)
		}
	}
}

// TestSpool hands out a spool's batches, each of its own memory, until
// they are all out, drains into them and closes the spool twice.
func TestSpool(t *testing.T) {
	if _, err := NewSpool(0, 4); err == nil {
		t.Error("NewSpool(0, 4) succeeded")
	}
	sp, err := NewSpool(3, 4)
	if err != nil {
		t.Fatal(err)
	}
	r := fakeRegion(t, 1, 16)
	s := &r.slots[0]
	s.State, s.PID, s.TID = stateOwned, 10, 11
	var batches []*Batch
	for b := sp.Batch(); b != nil; b = sp.Batch() {
		batches = append(batches, b)
	}
	if len(batches) != 3 {
		t.Fatalf("%d batches, want 3", len(batches))
	}
	for i := range 12 {
		r.produce(0, rec{Time: uint64(100 + i), W: word(recEntry, uint64(i))})
	}
	for i, b := range batches {
		if more := r.DrainBatch(b, false); more != (i < 2) || b.Len() != 4 || !b.Full() {
			t.Fatalf("batch %d: %d records, more %v", i, b.Len(), more)
		}
	}
	dec := NewDecoder()
	var addrs []uint64
	for _, b := range batches {
		dec.Decode(b, func(e *Event) { addrs = append(addrs, e.Addr) })
	}
	for i, a := range addrs {
		if a != uint64(i) {
			t.Fatalf("events' functions %v, want 0 to 11 in order: the batches share memory", addrs)
		}
	}
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sp.Close(); err != nil || sp.Batch() != nil {
		t.Errorf("after Close: Close %v, a batch handed out %v", err, sp.Batch() != nil)
	}
}
