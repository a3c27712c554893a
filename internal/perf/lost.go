package perf

import (
	"encoding/binary"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// formatLost is PERF_FORMAT_LOST (Linux 6.0): read(2) of the event
// returns, after its value, the number of records the kernel could not
// write to its ring (struct read_format's lost). x/sys/unix does not
// name it.
const formatLost = 1 << 4

// LostSupported reports whether the kernel counts each event's lost
// records (PERF_FORMAT_LOST, Linux 6.0). Older kernels refuse the
// read_format bit with EINVAL; the answer is probed once, on a software
// event of the calling thread (which record.Run opens first, on a
// goroutine of its own, as a recording's first per-task event).
var LostSupported = sync.OnceValue(func() bool {
	a := &unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_DUMMY,
		Bits: unix.PerfBitDisabled | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv, Read_format: formatLost}
	a.Size = uint32(unsafe.Sizeof(*a))
	fd, err := unix.PerfEventOpen(a, 0, -1, -1, FlagCloexec)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
})

// ReadLost returns how many records the kernel could not write to the
// ring of the event fd, opened with SamplingOptions.CountLost, since it
// was opened: every record it or its inherited copies in threads created
// later meant to write (samples and side records alike), whether or not
// a PERF_RECORD_LOST later told of them. The kernel writes that record
// only before the next record that fits, so a ring that overflows at the
// end of a recording, with nothing written after, reports its loss only
// here.
func ReadLost(fd int) (uint64, error) {
	var b [16]byte // struct read_format { u64 value; u64 lost; }
	n, err := unix.Read(fd, b[:])
	if err != nil {
		return 0, os.NewSyscallError("read perf event", err)
	}
	if n < len(b) {
		return 0, os.NewSyscallError("read perf event", unix.EIO)
	}
	return binary.LittleEndian.Uint64(b[8:]), nil
}
