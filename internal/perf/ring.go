package perf

import (
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Ring is the mmap'ed ring buffer of a perf event: one metadata page
// (struct perf_event_mmap_page) followed by a power-of-two number of data
// pages the kernel writes records into.
type Ring struct {
	mem     []byte
	meta    *unix.PerfEventMmapPage
	data    []byte
	scratch []byte
}

// MapRing maps the ring buffer of event fd with dataPages data pages,
// which must be a power of two.
func MapRing(fd int, dataPages int) (*Ring, error) {
	if dataPages <= 0 || dataPages&(dataPages-1) != 0 {
		return nil, fmt.Errorf("ring of %d pages: must be a power of two", dataPages)
	}
	page := os.Getpagesize()
	mem, err := unix.Mmap(fd, 0, (1+dataPages)*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping a %d KiB perf ring (raise kernel.perf_event_mlock_kb or use smaller rings): %w",
			dataPages*page/1024, os.NewSyscallError("mmap", err))
	}
	return &Ring{
		mem:  mem,
		meta: (*unix.PerfEventMmapPage)(unsafe.Pointer(&mem[0])),
		data: mem[page:],
	}, nil
}

// Close unmaps the ring.
func (r *Ring) Close() error {
	if r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	r.mem, r.meta, r.data = nil, nil, nil
	return err
}

// Read calls fn with every complete record available, oldest first, then
// gives the space back to the kernel. rec is valid only during the call.
// It returns the number of records read.
func (r *Ring) Read(fn func(rec []byte)) int {
	// data_head is written by the kernel; the atomic load orders our reads
	// of the data after it (the smp_rmb of the uapi comment). Storing
	// data_tail atomically tells the kernel the space is free only after
	// we are done with it.
	head := atomic.LoadUint64(&r.meta.Data_head)
	tail := atomic.LoadUint64(&r.meta.Data_tail)
	var n int
	tail, n, r.scratch = readRing(r.data, head, tail, r.scratch, fn)
	atomic.StoreUint64(&r.meta.Data_tail, tail)
	return n
}

// readRing walks the records between tail and head of a ring whose size
// is a power of two, copying records that wrap around the end into
// scratch. It returns the new tail, which stops early at a malformed
// header so the caller never spins on it.
func readRing(data []byte, head, tail uint64, scratch []byte, fn func([]byte)) (uint64, int, []byte) {
	size := uint64(len(data))
	mask := size - 1
	n := 0
	for head-tail >= headerSize {
		off := tail & mask
		var hdr [headerSize]byte
		copyWrapped(hdr[:], data, off)
		recSize := uint64(le.Uint16(hdr[6:]))
		if recSize < headerSize || recSize > head-tail || recSize > size {
			// The kernel never writes this; skip everything rather than
			// decode garbage.
			return head, n, scratch
		}
		var rec []byte
		if off+recSize <= size {
			rec = data[off : off+recSize]
		} else {
			if cap(scratch) < int(recSize) {
				scratch = make([]byte, recSize)
			}
			rec = scratch[:recSize]
			copyWrapped(rec, data, off)
		}
		fn(rec)
		n++
		tail += recSize
	}
	return tail, n, scratch
}

func copyWrapped(dst, data []byte, off uint64) {
	c := copy(dst, data[off:])
	copy(dst[c:], data)
}

// RingPagesFor returns the number of data pages of a ring that holds
// bytes: a power of two, as MapRing wants, rounded up as perf -m does.
func RingPagesFor(bytes int64) int {
	page := int64(os.Getpagesize())
	pages := max(1, (bytes+page-1)/page)
	n := 1
	for int64(n) < pages && n < 1<<30 {
		n <<= 1
	}
	return n
}

// UnlimitedRings reports whether this process may map rings beyond
// kernel.perf_event_mlock_kb (about 512 KiB per CPU) without charging
// them to RLIMIT_MEMLOCK: it has CAP_PERFMON, CAP_SYS_ADMIN or
// CAP_IPC_LOCK.
func UnlimitedRings() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	has := func(c uint) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	return has(unix.CAP_PERFMON) || has(unix.CAP_SYS_ADMIN) || has(unix.CAP_IPC_LOCK)
}
