package perf

import (
	"encoding/binary"
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

type recBuilder struct{ b []byte }

func (r *recBuilder) u32(v uint32) *recBuilder {
	r.b = binary.LittleEndian.AppendUint32(r.b, v)
	return r
}
func (r *recBuilder) u64(v uint64) *recBuilder {
	r.b = binary.LittleEndian.AppendUint64(r.b, v)
	return r
}
func (r *recBuilder) str(s string) *recBuilder {
	r.b = append(r.b, s...)
	r.b = append(r.b, 0)
	for len(r.b)%8 != 0 {
		r.b = append(r.b, 0)
	}
	return r
}
func (r *recBuilder) sampleID(pid, tid uint32, time uint64, cpu uint32) *recBuilder {
	return r.u32(pid).u32(tid).u64(time).u32(cpu).u32(0)
}
func (r *recBuilder) record(typ uint32, misc uint16) []byte {
	h := make([]byte, headerSize)
	binary.LittleEndian.PutUint32(h, typ)
	binary.LittleEndian.PutUint16(h[4:], misc)
	binary.LittleEndian.PutUint16(h[6:], uint16(headerSize+len(r.b)))
	return append(h, r.b...)
}

func TestDecode(t *testing.T) {
	sample := (&recBuilder{}).u64(0x401000).u32(10).u32(11).u64(12345).u32(1).u32(0).u64(1001001).
		u64(4).u64(ContextUser).u64(0x401000).u64(0x401100).u64(0x401200).record(RecordSample, unix.PERF_RECORD_MISC_USER)
	var r Record
	if err := Decode(sample, SampleType, &r); err != nil {
		t.Fatal(err)
	}
	if r.IP != 0x401000 || r.PID != 10 || r.TID != 11 || r.Time != 12345 || r.CPU != 1 || r.Period != 1001001 ||
		len(r.Callchain) != 4 || r.Callchain[0] != ContextUser || r.Callchain[3] != 0x401200 || r.KernelIP() {
		t.Errorf("sample decoded as %+v", r)
	}

	mmap := (&recBuilder{}).u32(10).u32(10).u64(0x400000).u64(0x2000).u64(0x1000).
		u32(0x14000000).u32(0).u64(0).u64(0). // build id size 20 in the first byte
		u32(unix.PROT_READ|unix.PROT_EXEC).u32(2).str("/bin/true").sampleID(10, 10, 99, 0)
	mrec := mmap.record(RecordMmap2, unix.PERF_RECORD_MISC_MMAP_BUILD_ID)
	// build_id_size is a u8 at offset 40 of the record.
	mrec[headerSize+32] = 4
	copy(mrec[headerSize+36:], []byte{0xde, 0xad, 0xbe, 0xef})
	if err := Decode(mrec, SampleType, &r); err != nil {
		t.Fatal(err)
	}
	if r.Filename != "/bin/true" || r.Addr != 0x400000 || r.Len != 0x2000 || r.PgOff != 0x1000 || r.Time != 99 ||
		string(r.BuildID) != "\xde\xad\xbe\xef" || r.Prot&unix.PROT_EXEC == 0 {
		t.Errorf("mmap2 decoded as %+v", r)
	}

	comm := (&recBuilder{}).u32(10).u32(12).str("worker-1").sampleID(10, 12, 7, 1).record(RecordComm, unix.PERF_RECORD_MISC_COMM_EXEC)
	if err := Decode(comm, SampleType, &r); err != nil || r.Comm != "worker-1" || r.TID != 12 || !r.Exec() || r.Time != 7 {
		t.Errorf("comm decoded as %+v, %v", r, err)
	}

	fork := (&recBuilder{}).u32(10).u32(9).u32(13).u32(12).u64(555).sampleID(9, 12, 556, 0).record(RecordFork, 0)
	if err := Decode(fork, SampleType, &r); err != nil || r.PID != 10 || r.PPID != 9 || r.TID != 13 || r.PTID != 12 || r.Time != 555 {
		t.Errorf("fork decoded as %+v, %v", r, err)
	}

	sw := (&recBuilder{}).sampleID(10, 12, 700, 1).record(RecordSwitch, unix.PERF_RECORD_MISC_SWITCH_OUT|unix.PERF_RECORD_MISC_SWITCH_OUT_PREEMPT)
	if err := Decode(sw, SampleType, &r); err != nil || r.TID != 12 || r.Time != 700 || !r.SwitchOut() || !r.Preempted() {
		t.Errorf("switch decoded as %+v, %v", r, err)
	}

	lost := (&recBuilder{}).u64(1).u64(42).sampleID(0, 0, 600, 0).record(RecordLost, 0)
	if err := Decode(lost, SampleType, &r); err != nil || r.Lost != 42 {
		t.Errorf("lost decoded as %+v, %v", r, err)
	}
}

func TestDecodeUserRegs(t *testing.T) {
	stack := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	b := (&recBuilder{}).u64(0x401000).u32(10).u32(11).u64(5).u32(0).u32(0).u64(1).
		u64(2).u64(ContextUser).u64(0x401000).
		u64(2).u64(0x7ffd0100).u64(0x7ffd0000).u64(0x401000). // abi 64, BP SP IP
		u64(16)
	b.b = append(b.b, stack...)
	rec := b.u64(12).record(RecordSample, unix.PERF_RECORD_MISC_USER) // dyn_size 12
	var r Record
	if err := Decode(rec, SampleType|SampleUserRegs, &r); err != nil {
		t.Fatal(err)
	}
	if r.UserABI != 2 || r.UserRegs != [3]uint64{0x7ffd0100, 0x7ffd0000, 0x401000} || string(r.UserStack) != string(stack[:12]) || r.UserStackSize != 16 {
		t.Errorf("regs %d %#x stack %v of %d", r.UserABI, r.UserRegs, r.UserStack, r.UserStackSize)
	}
	kernelThread := (&recBuilder{}).u64(0xffffffff81000000).u32(0).u32(0).u64(5).u32(0).u32(0).u64(1).
		u64(0).u64(0).u64(0).record(RecordSample, unix.PERF_RECORD_MISC_KERNEL) // abi NONE, stack size 0
	if err := Decode(kernelThread, SampleType|SampleUserRegs, &r); err != nil || r.UserABI != 0 || r.UserStack != nil {
		t.Errorf("kernel thread sample: %v %+v", err, r)
	}
}

func TestDecodeMalformed(t *testing.T) {
	good := (&recBuilder{}).u64(1).u32(1).u32(1).u64(1).u32(0).u32(0).u64(1).u64(2).u64(1).u64(2).record(RecordSample, 0)
	for cut := 0; cut < len(good); cut++ {
		var r Record
		if err := Decode(good[:cut], SampleType, &r); err == nil {
			t.Errorf("cut at %d: no error", cut)
		} else if !errors.Is(err, ErrMalformed) {
			t.Errorf("cut at %d: %v does not wrap ErrMalformed", cut, err)
		}
	}
	huge := (&recBuilder{}).u64(1).u32(1).u32(1).u64(1).u32(0).u32(0).u64(1).u64(1<<40).record(RecordSample, 0)
	var r Record
	if err := Decode(huge, SampleType, &r); !errors.Is(err, ErrMalformed) {
		t.Errorf("huge call chain count: %v", err)
	}
}

func TestDecodeIdentifier(t *testing.T) {
	// A CounterAttr sample (identifier, pid/tid) and a lost record,
	// whose trailer is pid/tid and the identifier.
	typ := uint64(CounterSampleType)
	rec := (&recBuilder{}).u64(77).u32(10).u32(12).record(RecordSample, 0)
	var r Record
	if err := Decode(rec, typ, &r); err != nil {
		t.Fatal(err)
	}
	if r.ID != 77 || r.PID != 10 || r.TID != 12 || r.Time != 0 {
		t.Errorf("sample decoded as %+v", r)
	}
	lost := (&recBuilder{}).u64(1).u64(5).u32(10).u32(12).u64(78).record(RecordLost, 0)
	if err := Decode(lost, typ, &r); err != nil || r.Lost != 5 || r.TID != 12 || r.ID != 78 {
		t.Errorf("lost decoded as %+v, %v", r, err)
	}
	if err := Decode(lost[:len(lost)-8], typ, &r); !errors.Is(err, ErrMalformed) {
		t.Errorf("lost record without its identifier: %v", err)
	}
	// With time and CPU too, as uprobe samples have.
	typ |= unix.PERF_SAMPLE_TIME | unix.PERF_SAMPLE_CPU
	rec = (&recBuilder{}).u64(77).sampleID(10, 12, 900, 1).record(RecordSample, 0)
	if err := Decode(rec, typ, &r); err != nil || r.ID != 77 || r.TID != 12 || r.Time != 900 || r.CPU != 1 {
		t.Errorf("sample with time and cpu decoded as %+v, %v", r, err)
	}
}

func TestDecodeRaw(t *testing.T) {
	// A softirq_entry sample: pid/tid, time, cpu, then u32 size and the
	// raw data (common fields, vec) padded so both end on 8 bytes.
	raw := []byte{223, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0}
	b := (&recBuilder{}).u32(10).u32(11).u64(5000).u32(1).u32(0).u32(uint32(len(raw)))
	b.b = append(b.b, raw...)
	rec := b.record(RecordSample, unix.PERF_RECORD_MISC_KERNEL)
	var r Record
	if err := Decode(rec, TracepointSampleType, &r); err != nil {
		t.Fatal(err)
	}
	if r.PID != 10 || r.TID != 11 || r.Time != 5000 || r.CPU != 1 || string(r.Raw) != string(raw) || r.Callchain != nil {
		t.Errorf("raw sample decoded as %+v", r)
	}
	tp := &Tracepoint{ID: 223, Fields: map[string]TracepointField{"common_type": {0, 2, false}, "vec": {8, 4, false}}}
	typ, _ := tp.Fields["common_type"].Uint(r.Raw)
	if v, ok := tp.Fields["vec"].Uint(r.Raw); !ok || v != 3 || typ != tp.ID {
		t.Errorf("vec %d %v, common_type %d", v, ok, typ)
	}
	if _, ok := tp.Fields["vec"].Uint(r.Raw[:10]); ok {
		t.Error("a field past the end of the raw data was read")
	}
	for cut := len(rec) - 1; cut > headerSize; cut -= 4 {
		short := append([]byte(nil), rec[:cut]...)
		if err := Decode(short, TracepointSampleType, &r); !errors.Is(err, ErrMalformed) {
			t.Errorf("cut at %d: %v", cut, err)
		}
	}
}
