package record

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"

	"trueprof/internal/perf"
)

// TestRingReaderCountsHeldBuffers checks that the reader's bound counts
// the stack buffers the loop took and has not given back: they are still
// the recorder's memory, and a bound on the queue alone let twice the
// stated memory build up.
func TestRingReaderCountsHeldBuffers(t *testing.T) {
	const buf = 64 << 10
	rr := &ringReader{stackBytes: buf}
	n := queueLimit / buf
	var chunk []perf.Record
	for range n {
		chunk = append(chunk, perf.Record{UserStack: make([]byte, 0, buf)})
		rr.queuedStacks += buf
	}
	rr.queue = [][]perf.Record{chunk}
	taken, _, _ := rr.take(nil, nil)
	if len(taken) != 1 || len(taken[0]) != n {
		t.Fatalf("took %d chunks, want 1 of %d records", len(taken), n)
	}
	got := taken[0]
	if rr.held != queueLimit {
		t.Fatalf("held = %d bytes after taking %d buffers of %d, want %d", rr.held, n, buf, queueLimit)
	}
	// The loop still holds them all: the reader must not read more.
	if rr.readLocked(); rr.fullPasses() != 1 {
		t.Fatal("reader read on while the loop held queueLimit bytes of its buffers")
	}
	// Giving half back makes room again.
	freed := make([][]byte, 0, n/2)
	for i := range n / 2 {
		freed = append(freed, got[i].UserStack)
	}
	rr.take(nil, freed)
	if want := int64(queueLimit - n/2*buf); rr.held != want {
		t.Fatalf("held = %d bytes after %d buffers came back, want %d", rr.held, n/2, want)
	}
	if rr.readLocked(); rr.fullPasses() != 0 {
		t.Fatal("reader stayed full after the loop gave half its buffers back")
	}
}

// TestRingReaderTakeSwaps: take hands the queue's chunks over as they
// are and keeps the spare ones for the next records, so that the lock is
// held for no copy of the records (which, at 850,000 switch records a
// second, stalled the reader while the rings overflowed).
func TestRingReaderTakeSwaps(t *testing.T) {
	rr := &ringReader{}
	chunk := make([]perf.Record, 3, chunkRecords)
	rr.queue = [][]perf.Record{chunk}
	spare := make([]perf.Record, 0, chunkRecords)
	got, _, _ := rr.take([][]perf.Record{spare}, nil)
	if len(got) != 1 || len(got[0]) != 3 || &got[0][0] != &chunk[0] {
		t.Errorf("take returned %d chunks, not the queue's one of 3 records as it is", len(got))
	}
	if len(rr.queue) != 0 {
		t.Errorf("reader's queue after take: %d chunks, want none", len(rr.queue))
	}
	if c := rr.chunk(); cap(c) != chunkRecords || &c[:1][0] != &spare[:1][0] {
		t.Errorf("next chunk: cap %d, want the spare one given back", cap(c))
	}
}

// TestKeepRest: the loop's buffers keep their records after a drain and
// give a burst's capacity back once it is over.
func TestKeepRest(t *testing.T) {
	buf := make([]int, 100, 1000)
	for i := range buf {
		buf[i] = i
	}
	got := keepRest(buf, 90, 16)
	if len(got) != 10 || got[0] != 90 || got[9] != 99 || cap(got) != 20 {
		t.Errorf("after a burst: len %d cap %d %v, want the last 10 records in a buffer of 20 (twice their number)", len(got), cap(got), got)
	}
	buf = make([]int, 100, 120)
	if got := keepRest(buf, 50, 16); len(got) != 50 || cap(got) != 120 {
		t.Errorf("no burst: len %d cap %d, want 50 records in the same buffer", len(got), cap(got))
	}
}

// switchRecord is a PERF_RECORD_SWITCH as the kernel writes it with
// sample_id_all and PERF_SAMPLE_TID|TIME|CPU: header, pid and tid,
// time, cpu and reserved (32 bytes).
func switchRecord(tid uint32, time uint64) []byte {
	rec := make([]byte, 32)
	binary.LittleEndian.PutUint32(rec, perf.RecordSwitch)
	binary.LittleEndian.PutUint16(rec[6:], 32)
	binary.LittleEndian.PutUint32(rec[8:], tid)
	binary.LittleEndian.PutUint32(rec[12:], tid)
	binary.LittleEndian.PutUint64(rec[16:], time)
	binary.LittleEndian.PutUint32(rec[24:], 1)
	return rec
}

// TestRingReaderCopiesRecordsUndecoded: without stack copies the reader
// copies the records as they are, into buffers it reuses, and take
// decodes them as perf.Decode does (the malformed one counted, not
// kept); the reader's copying allocates nothing once it has buffers, so
// that the collector charges it no assists while the rings fill.
func TestRingReaderCopiesRecordsUndecoded(t *testing.T) {
	const sampleType = unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME | unix.PERF_SAMPLE_CPU
	rr := &ringReader{sampleType: sampleType}
	// Enough records for several raw buffers, with a malformed one (a
	// COMM record of its header alone) among them.
	n := 3*rawBufferBytes/32 + 5
	var recs [][]byte
	for i := range n {
		recs = append(recs, switchRecord(uint32(i%7+1), uint64(i+1)))
	}
	bad := make([]byte, 8)
	binary.LittleEndian.PutUint32(bad, perf.RecordComm)
	binary.LittleEndian.PutUint16(bad[6:], 8)
	recs = append(recs[:n/2], append([][]byte{bad}, recs[n/2:]...)...)
	for _, rec := range recs {
		rr.addLocked(rec)
	}
	if len(rr.queue) != 0 || len(rr.raw) < 4 {
		t.Fatalf("reader decoded %d chunks and copied %d buffers, want none and 4 or more", len(rr.queue), len(rr.raw))
	}
	buffers := len(rr.raw)
	taken, unparsed, err := rr.take(nil, nil)
	if unparsed != 1 || err == nil {
		t.Errorf("take counted %d malformed records (%v), want the COMM one", unparsed, err)
	}
	var got []perf.Record
	for _, c := range taken {
		got = append(got, c...)
	}
	if len(got) != n {
		t.Fatalf("took %d records, want %d", len(got), n)
	}
	k := 0
	for _, rec := range recs {
		var want perf.Record
		if perf.Decode(rec, sampleType, &want) != nil {
			continue
		}
		if !reflect.DeepEqual(got[k], want) {
			t.Fatalf("record %d: %+v, want %+v", k, got[k], want)
		}
		k++
	}
	if len(rr.raw) != 0 || len(rr.rawFree) != buffers || rr.queued != 0 {
		t.Errorf("after take: %d raw buffers, %d free (want %d), %d bytes queued", len(rr.raw), len(rr.rawFree), buffers, rr.queued)
	}
	rec := switchRecord(1, 1)
	if a := testing.AllocsPerRun(1000, func() { rr.addLocked(rec) }); a != 0 {
		t.Errorf("copying a switch record allocated %v times, want 0", a)
	}
}

// TestDecodeRawCut: a copy whose last record is cut short (which the
// reader never writes) keeps the records before it and counts the rest
// as one malformed record, with perf.ErrMalformed.
func TestDecodeRawCut(t *testing.T) {
	const sampleType = unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME | unix.PERF_SAMPLE_CPU
	b := append(switchRecord(1, 10), switchRecord(2, 20)...)
	b = append(b, switchRecord(3, 30)[:20]...)
	q, _, unparsed, err := decodeRaw(nil, [][]byte{b}, nil, sampleType)
	if len(q) != 1 || len(q[0]) != 2 || q[0][1].Time != 20 {
		t.Fatalf("decoded %v, want the two whole records", q)
	}
	if unparsed != 1 || !errors.Is(err, perf.ErrMalformed) {
		t.Errorf("unparsed %d, err %v: want 1 and perf.ErrMalformed", unparsed, err)
	}
}
