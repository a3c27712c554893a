package symbolize

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
)

// maxLine bounds one perf map line; a longer one is skipped as malformed
// instead of growing a buffer without limit.
const maxLine = 1 << 20

// PerfMap is a JIT symbol map, /tmp/perf-PID.map: text lines "START SIZE
// NAME" with hexadecimal START and SIZE, appended by the process as it
// compiles code. Entries read later override earlier ones where they
// overlap. Its methods are safe for concurrent use.
type PerfMap struct {
	mu       sync.Mutex
	f        *os.File
	off      int64  // file offset of the first unread byte
	partial  []byte // an unterminated last line, completed by a later Update
	skipping bool   // inside an overlong line, dropping bytes to its newline
	line     int64  // lines read so far, for errors
	pending  error  // a malformed line seen by OpenPerfMap, for Update
	buf      []byte // read buffer, kept: recorders call Update often

	entries []perfMapEntry
	spans   []span // flattened entries; rebuilt when dirty
	dirty   bool
}

type perfMapEntry struct {
	start, end uint64
	name       string
}

// OpenPerfMap opens a perf map and reads what it holds so far. The file is
// trusted only if it is a regular file owned by uid (the profiled
// process's user) and path is not a symbolic link; otherwise the error
// wraps ErrUntrusted. Malformed lines in this first read do not fail the
// open: they are skipped and the first is reported by the next Update.
func OpenPerfMap(path string, uid int) (*PerfMap, error) {
	f, err := openTrusted(path, uid)
	if err != nil {
		return nil, err
	}
	m := &PerfMap{f: f}
	if err := m.Update(); err != nil {
		var de *DecodeError
		if !errors.As(err, &de) {
			f.Close()
			return nil, err
		}
		m.pending = err
	}
	return m, nil
}

// Close closes the file. The entries read stay usable by Resolve.
func (m *PerfMap) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.f.Close()
}

// Update reads the lines appended since the last read. An unterminated
// last line is kept and completed by a later Update. Malformed lines are
// skipped; the first one is returned as a *DecodeError whose Offset is its
// 1-based line number, after every good line has been applied.
func (m *PerfMap) Update() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	firstErr := m.pending
	m.pending = nil
	// Most calls find nothing new: answer those from fstat alone.
	if st, err := m.f.Stat(); err == nil && st.Size() == m.off {
		return firstErr
	}
	if m.buf == nil {
		m.buf = make([]byte, 64<<10)
	}
	buf := m.buf
	for {
		n, err := m.f.ReadAt(buf, m.off)
		m.off += int64(n)
		if e := m.consume(buf[:n]); e != nil && firstErr == nil {
			firstErr = e
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	return firstErr
}

// consume splits data into lines, keeping an unterminated tail.
func (m *PerfMap) consume(data []byte) error {
	var firstErr error
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			if !m.skipping {
				m.partial = append(m.partial, data...)
				if len(m.partial) > maxLine {
					m.partial = m.partial[:0]
					m.skipping = true
				}
			}
			return firstErr
		}
		chunk := data[:i]
		data = data[i+1:]
		m.line++
		if m.skipping {
			m.skipping = false
			if firstErr == nil {
				firstErr = &DecodeError{Name: "perf map", Offset: m.line, Err: fmt.Errorf("%w: line longer than %d bytes", ErrFormat, maxLine)}
			}
			continue
		}
		line := chunk
		if len(m.partial) > 0 {
			m.partial = append(m.partial, chunk...)
			line = m.partial
		}
		if err := m.parseLine(line); err != nil && firstErr == nil {
			firstErr = err
		}
		m.partial = m.partial[:0]
	}
	return firstErr
}

func (m *PerfMap) parseLine(line []byte) error {
	s := strings.TrimSpace(string(line))
	if s == "" {
		return nil
	}
	bad := func(what string) error {
		return &DecodeError{Name: "perf map", Offset: m.line, Err: fmt.Errorf("%w: %s in %q", ErrFormat, what, s)}
	}
	startStr, rest, ok := strings.Cut(s, " ")
	if !ok {
		return bad("missing size")
	}
	rest = strings.TrimLeft(rest, " \t")
	sizeStr, name, ok := strings.Cut(rest, " ")
	if !ok {
		return bad("missing name")
	}
	start, err1 := parseHex(startStr)
	size, err2 := parseHex(sizeStr)
	name = strings.TrimSpace(name)
	switch {
	case err1 != nil:
		return bad("bad start")
	case err2 != nil:
		return bad("bad size")
	case name == "":
		return bad("empty name")
	case size == 0 || start+size < start:
		return bad("bad range")
	}
	m.entries = append(m.entries, perfMapEntry{start: start, end: start + size, name: name})
	m.dirty = true
	return nil
}

func parseHex(s string) (uint64, error) {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	return strconv.ParseUint(s, 16, 64)
}

// Len returns the number of entries read so far.
func (m *PerfMap) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.entries)
}

// Resolve returns the name and start of the entry containing addr. Where
// entries overlap, the one read last wins. ok is false if no entry
// contains addr.
func (m *PerfMap) Resolve(addr uint64) (name string, start uint64, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.dirty {
		raw := make([]span, len(m.entries))
		for i, e := range m.entries {
			raw[i] = span{lo: e.start, hi: e.end, id: int32(i)}
		}
		m.spans = flatten(raw, func(a, b span) bool { return a.id > b.id })
		m.dirty = false
	}
	i := findSpan(m.spans, addr)
	if i < 0 {
		return "", 0, false
	}
	e := &m.entries[m.spans[i].id]
	return e.name, e.start, true
}
