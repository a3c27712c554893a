package record

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"trueprof/internal/perf"
	"trueprof/internal/resolve"
	"trueprof/internal/trace"
)

// threads lists the thread ids of process pid.
func threads(pid int) ([]int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	var tids []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// processAlive reports whether pid still exists and is not a zombie.
func processAlive(pid int) bool {
	st, ok := procState(fmt.Sprintf("/proc/%d/stat", pid))
	return ok && st != 'Z' && st != 'X'
}

// procState returns the state letter of the task whose stat file is at
// path (R, S, D, T, t, Z, ...): false when it cannot be read (the task
// is gone); '?' when the file has none.
func procState(path string) (byte, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	// The state follows the parenthesised command name.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2], true
	}
	return '?', true
}

// synthesize writes the thread names and executable mappings that an
// attached process had before recording started, as the kernel's records
// would have described them (what perf record does from /proc too).
func (s *session) synthesize(pid int) error {
	now := perf.Now()
	tids, err := threads(pid)
	if err != nil {
		return err
	}
	for _, tid := range tids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/comm", pid, tid))
		if err != nil {
			continue
		}
		name, err := s.w.Intern(strings.TrimSpace(string(b)))
		if err != nil {
			return err
		}
		if err := s.w.Write(&trace.Comm{Time: now, PID: uint32(pid), TID: uint32(tid), Name: name}); err != nil {
			return err
		}
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m, ok := resolve.ParseMapsLine(sc.Text())
		if !ok {
			continue
		}
		m.Time = now
		s.res.Mmap(uint32(pid), m)
		path, err := s.w.Intern(m.Path)
		if err != nil {
			return err
		}
		if err := s.w.Write(&trace.Module{Time: now, PID: uint32(pid), TID: uint32(pid), Start: m.Start, Len: m.End - m.Start,
			PgOff: m.PgOff, Prot: syscall.PROT_READ | syscall.PROT_EXEC, Path: path}); err != nil {
			return err
		}
	}
	return sc.Err()
}

// mappedFiles lists the files process pid has mapped executable.
func mappedFiles(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if m, ok := resolve.ParseMapsLine(line); ok && strings.HasPrefix(m.Path, "/") {
			out = append(out, m.Path)
		}
	}
	return out
}
