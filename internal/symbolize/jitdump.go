package symbolize

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"sync"
)

// jitdump format constants, from the Linux tree's
// tools/perf/Documentation/jitdump-specification.txt.
const (
	jitMagic        = 0x4A695444 // "JiTD" in the writer's byte order
	jitMagicSwapped = 0x4454694A
	jitHeaderSize   = 40 // struct jitheader
	jitRecordHeader = 16 // struct jr_prefix: id, total_size, timestamp

	jitCodeLoad      = 0
	jitCodeMove      = 1
	jitCodeDebugInfo = 2
	jitCodeClose     = 3
	jitCodeUnwinding = 4

	// jitFlagArchTimestamp marks timestamps taken from the CPU's counter
	// (TSC on x86) instead of CLOCK_MONOTONIC.
	jitFlagArchTimestamp = 1

	// maxJitRecord bounds one record, code bytes included. The header's
	// size comes from the file; a larger one is taken as corruption.
	maxJitRecord = 256 << 20
	// forever is the end of validity of code not moved away.
	forever = ^uint64(0)

	// maxJitName bounds a function or file name.
	maxJitName = 64 << 10
)

// JitDump is a jitdump file (jit-PID.dump) written by a JIT compiler:
// binary records of code loads and moves with their timestamps, so that an
// address reused by new code resolves to whatever was there at the time
// of a sample. Its methods are safe for concurrent use.
type JitDump struct {
	mu    sync.Mutex
	f     *os.File
	order binary.ByteOrder
	flags uint64
	pid   uint32
	off   int64 // file offset of the next unread record
	err   error // first decoding error; reading stops there

	codes   []jitCode
	byIndex map[uint64]int       // code_index → latest entry in codes
	pending map[uint64][]jitLine // debug info waiting for its code load
	sorted  []int32              // codes by start address; rebuilt when dirty
	dirty   bool
	maxSize uint64
}

type jitCode struct {
	start, end uint64
	from, to   uint64 // valid for timestamps in [from, to)
	name       string
	lines      []jitLine // sorted by addr
	seq        int       // index in JitDump.codes: later records win ties
}

type jitLine struct {
	addr uint64
	file string
	line int
}

// OpenJitDump opens a jitdump file, checks its header and reads the
// records it holds so far. The trust rule is the one of OpenPerfMap: a
// regular file owned by uid, not reached through a symbolic link;
// otherwise the error wraps ErrUntrusted. A malformed header is a
// *DecodeError; a malformed record does not fail the open but stops
// reading there, and is reported by every later Update.
func OpenJitDump(path string, uid int) (*JitDump, error) {
	f, err := openTrusted(path, uid)
	if err != nil {
		return nil, err
	}
	j, err := newJitDump(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	j.f = f
	if err := j.Update(); err != nil {
		// A malformed record is not fatal: the records before it are
		// usable and Update reports it from now on.
		var de *DecodeError
		if !errors.As(err, &de) {
			f.Close()
			return nil, err
		}
	}
	return j, nil
}

func newJitDump(r io.ReaderAt) (*JitDump, error) {
	var hdr [jitHeaderSize]byte
	if _, err := r.ReadAt(hdr[:], 0); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, &DecodeError{Name: "jitdump", Err: err}
	}
	j := &JitDump{byIndex: make(map[uint64]int), pending: make(map[uint64][]jitLine)}
	switch binary.LittleEndian.Uint32(hdr[0:]) {
	case jitMagic:
		j.order = binary.LittleEndian
	case jitMagicSwapped:
		j.order = binary.BigEndian
	default:
		return nil, &DecodeError{Name: "jitdump", Err: fmt.Errorf("%w: bad magic %#x", ErrFormat, binary.LittleEndian.Uint32(hdr[0:]))}
	}
	if v := j.order.Uint32(hdr[4:]); v != 1 {
		return nil, &DecodeError{Name: "jitdump", Offset: 4, Err: fmt.Errorf("%w: version %d", ErrFormat, v)}
	}
	size := j.order.Uint32(hdr[8:])
	if size < jitHeaderSize || size > 1<<20 {
		return nil, &DecodeError{Name: "jitdump", Offset: 8, Err: fmt.Errorf("%w: header size %d", ErrFormat, size)}
	}
	j.pid = j.order.Uint32(hdr[20:])
	j.flags = j.order.Uint64(hdr[32:])
	j.off = int64(size)
	return j, nil
}

// ArchTimestamps reports whether the writer used the CPU's timestamp
// counter rather than CLOCK_MONOTONIC; the caller must then convert sample
// times before calling Resolve.
func (j *JitDump) ArchTimestamps() bool { return j.flags&jitFlagArchTimestamp != 0 }

// PID returns the process id recorded in the header.
func (j *JitDump) PID() int { return int(j.pid) }

// Close closes the file. The records read stay usable by Resolve.
func (j *JitDump) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.f.Close()
}

// Update reads the records appended since the last read. A partially
// written last record is left for a later Update. A malformed record is
// returned as a *DecodeError; reading stops there, records before it stay
// usable, and later calls return the same error.
func (j *JitDump) Update() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	fi, err := j.f.Stat()
	if err != nil {
		return err
	}
	return j.update(j.f, fi.Size())
}

// update reads complete records of r up to size; j.mu is held.
func (j *JitDump) update(r io.ReaderAt, size int64) error {
	var hdr [jitRecordHeader]byte
	for j.err == nil && size-j.off >= jitRecordHeader {
		if _, err := r.ReadAt(hdr[:], j.off); err != nil {
			return err
		}
		id := j.order.Uint32(hdr[0:])
		total := int64(j.order.Uint32(hdr[4:]))
		ts := j.order.Uint64(hdr[8:])
		if total < jitRecordHeader || total > maxJitRecord {
			j.err = &DecodeError{Name: "jitdump", Offset: j.off, Err: fmt.Errorf("%w: record size %d", ErrFormat, total)}
			break
		}
		if size-j.off < total {
			break // still being written
		}
		body := j.off + jitRecordHeader
		n := total - jitRecordHeader
		var err error
		switch id {
		case jitCodeLoad:
			err = j.codeLoad(r, body, n, ts)
		case jitCodeMove:
			err = j.codeMove(r, body, n, ts)
		case jitCodeDebugInfo:
			err = j.debugInfo(r, body, n)
		default:
			// JIT_CODE_CLOSE, JIT_CODE_UNWINDING_INFO and future record
			// types carry nothing needed to name code.
		}
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				return err // an I/O error: retry later
			}
			j.err = err
			break
		}
		j.off += total
	}
	return j.err
}

func (j *JitDump) malformed(off int64, format string, args ...any) error {
	return &DecodeError{Name: "jitdump", Offset: off, Err: fmt.Errorf("%w: %s", ErrFormat, fmt.Sprintf(format, args...))}
}

// readBody reads n bytes of a record at off; n is bounded by maxJitRecord
// and by the file size already.
func readBody(r io.ReaderAt, off, n int64) ([]byte, error) {
	b := make([]byte, n)
	_, err := r.ReadAt(b, off)
	return b, err
}

func (j *JitDump) codeLoad(r io.ReaderAt, off, n int64, ts uint64) error {
	// struct jr_code_load: pid, tid u32; vma, code_addr, code_size,
	// code_index u64; NUL-terminated name; code bytes.
	const fixed = 40
	if n < fixed+1 {
		return j.malformed(off, "short JIT_CODE_LOAD")
	}
	var b [fixed]byte
	if _, err := r.ReadAt(b[:], off); err != nil {
		return err
	}
	addr := j.order.Uint64(b[16:])
	size := j.order.Uint64(b[24:])
	index := j.order.Uint64(b[32:])
	if size > uint64(n-fixed) || addr+size < addr {
		return j.malformed(off, "JIT_CODE_LOAD code size %d", size)
	}
	nameLen := n - fixed - int64(size)
	if nameLen > maxJitName {
		nameLen = maxJitName
	}
	nb, err := readBody(r, off+fixed, nameLen)
	if err != nil {
		return err
	}
	i := bytes.IndexByte(nb, 0)
	if i < 0 {
		return j.malformed(off+fixed, "unterminated name")
	}
	c := jitCode{start: addr, end: addr + size, from: ts, to: forever, name: string(nb[:i])}
	if lines, ok := j.pending[addr]; ok {
		c.lines = lines
		delete(j.pending, addr)
	}
	j.add(c, index)
	return nil
}

func (j *JitDump) add(c jitCode, index uint64) {
	if c.end == c.start {
		return
	}
	c.seq = len(j.codes)
	j.byIndex[index] = c.seq
	j.codes = append(j.codes, c)
	j.maxSize = max(j.maxSize, c.end-c.start)
	j.dirty = true
}

func (j *JitDump) codeMove(r io.ReaderAt, off, n int64, ts uint64) error {
	// struct jr_code_move: pid, tid u32; vma, old_code_addr,
	// new_code_addr, code_size, code_index u64.
	const fixed = 48
	if n < fixed {
		return j.malformed(off, "short JIT_CODE_MOVE")
	}
	var b [fixed]byte
	if _, err := r.ReadAt(b[:], off); err != nil {
		return err
	}
	oldAddr := j.order.Uint64(b[16:])
	newAddr := j.order.Uint64(b[24:])
	size := j.order.Uint64(b[32:])
	index := j.order.Uint64(b[40:])
	if newAddr+size < newAddr {
		return j.malformed(off, "JIT_CODE_MOVE range overflows")
	}
	i, ok := j.byIndex[index]
	if !ok || j.codes[i].start != oldAddr {
		return nil // a move of code we never saw loaded names nothing
	}
	old := &j.codes[i]
	if old.to > ts {
		old.to = ts
	}
	moved := jitCode{start: newAddr, end: newAddr + size, from: ts, to: forever, name: old.name}
	for _, l := range old.lines {
		l.addr = l.addr - oldAddr + newAddr
		moved.lines = append(moved.lines, l)
	}
	j.add(moved, index)
	return nil
}

func (j *JitDump) debugInfo(r io.ReaderAt, off, n int64) error {
	// struct jr_code_debug_info: code_addr, nr_entry u64; then entries
	// of addr u64, lineno i32, discrim i32, NUL-terminated file name,
	// where "\xff\x00" repeats the previous name.
	if n < 16 {
		return j.malformed(off, "short JIT_CODE_DEBUG_INFO")
	}
	if n > maxJitRecord/4 {
		return j.malformed(off, "JIT_CODE_DEBUG_INFO of %d bytes", n)
	}
	b, err := readBody(r, off, n)
	if err != nil {
		return err
	}
	addr := j.order.Uint64(b[0:])
	count := j.order.Uint64(b[8:])
	p := b[16:]
	var lines []jitLine
	prev := ""
	// count comes from the file: the loop is bounded by the data instead.
	for k := uint64(0); k < count; k++ {
		if len(p) < 17 {
			return j.malformed(off, "JIT_CODE_DEBUG_INFO entry %d truncated", k)
		}
		l := jitLine{addr: j.order.Uint64(p), line: int(int32(j.order.Uint32(p[8:])))}
		p = p[16:]
		i := bytes.IndexByte(p, 0)
		if i < 0 {
			return j.malformed(off, "JIT_CODE_DEBUG_INFO entry %d name unterminated", k)
		}
		if i == 1 && p[0] == 0xff {
			l.file = prev
		} else {
			l.file = string(p[:i])
			prev = l.file
		}
		p = p[i+1:]
		lines = append(lines, l)
	}
	slices.SortStableFunc(lines, func(a, b jitLine) int {
		switch {
		case a.addr < b.addr:
			return -1
		case a.addr > b.addr:
			return 1
		}
		return 0
	})
	j.pending[addr] = lines
	return nil
}

// lookup returns the code at addr at time t; j.mu is held.
func (j *JitDump) lookup(addr, t uint64) *jitCode {
	if j.dirty {
		j.sorted = j.sorted[:0]
		for i := range j.codes {
			j.sorted = append(j.sorted, int32(i))
		}
		slices.SortStableFunc(j.sorted, func(a, b int32) int {
			sa, sb := j.codes[a].start, j.codes[b].start
			switch {
			case sa < sb:
				return -1
			case sa > sb:
				return 1
			}
			return 0
		})
		j.dirty = false
	}
	k := sort.Search(len(j.sorted), func(k int) bool { return j.codes[j.sorted[k]].start > addr })
	var best *jitCode
	// Code starting more than the largest code size before addr cannot
	// contain it, which bounds the scan.
	for k--; k >= 0; k-- {
		c := &j.codes[j.sorted[k]]
		if addr-c.start >= j.maxSize {
			break
		}
		if addr >= c.end || c.from > t {
			continue
		}
		if best == nil || c.from > best.from || (c.from == best.from && c.seq > best.seq) {
			best = c
		}
	}
	if best == nil || (best.to != forever && t >= best.to) {
		return nil
	}
	return best
}

// Resolve returns the name and start of the code that was at addr at
// time t (CLOCK_MONOTONIC nanoseconds, as in the records, unless
// ArchTimestamps). Code loaded at an address replaces older code there from
// its load time on; moved code leaves its old address at the move's time.
// Pass ^uint64(0) as t for the newest code. ok is false if no code was
// known at addr at t.
func (j *JitDump) Resolve(addr, t uint64) (name string, start uint64, ok bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	c := j.lookup(addr, t)
	if c == nil {
		return "", 0, false
	}
	return c.name, c.start, true
}

// Frame is Resolve with the source position from JIT_CODE_DEBUG_INFO, when
// the JIT wrote it: the entry with the greatest address not above addr.
func (j *JitDump) Frame(addr, t uint64) (fr Frame, start uint64, ok bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	c := j.lookup(addr, t)
	if c == nil {
		return Frame{}, 0, false
	}
	fr.Function = c.name
	i := sort.Search(len(c.lines), func(i int) bool { return c.lines[i].addr > addr }) - 1
	if i >= 0 {
		fr.File, fr.Line = c.lines[i].file, c.lines[i].line
	}
	return fr, c.start, true
}
