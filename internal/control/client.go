package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNoSession is returned by Find when no session is running or the
// one asked for is not.
var ErrNoSession = errors.New("no recording session")

// List returns the running sessions in dir, oldest first. A session
// whose recorder died (its socket refuses connections, or is gone) is
// stale: List removes its files and leaves it out. Info files that do
// not parse are skipped.
func List(dir string) ([]Info, error) {
	if err := CheckDir(dir); err != nil {
		return nil, err
	}
	names, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var out []Info
	for _, name := range names {
		info, err := readInfo(name)
		if err != nil {
			continue
		}
		info.Socket = strings.TrimSuffix(name, ".json") + ".sock"
		if !alive(info.Socket) {
			os.Remove(info.Socket)
			os.Remove(name)
			continue
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b Info) int { return a.Start.Compare(b.Start) })
	return out, nil
}

// readInfo reads one info file, refusing a symlink and anything large.
func readInfo(path string) (Info, error) {
	var info Info
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return info, err
	}
	defer f.Close()
	b := make([]byte, MaxMessage)
	n, err := f.Read(b)
	if err != nil || n == len(b) {
		return info, fmt.Errorf("control info %s: unreadable or too large", path)
	}
	err = json.Unmarshal(b[:n], &info)
	return info, err
}

// alive reports whether a recorder listens on sock: connecting to a
// socket nobody listens on fails with ECONNREFUSED at once. Only a
// socket (Lstat: never through a symlink) is tried.
func alive(sock string) bool {
	fi, err := os.Lstat(sock)
	if err != nil || fi.Mode()&os.ModeSocket == 0 {
		return false
	}
	c, err := net.DialTimeout("unixpacket", sock, time.Second)
	if err != nil {
		return !errors.Is(err, unix.ECONNREFUSED) && !errors.Is(err, unix.ENOENT)
	}
	c.Close()
	return true
}

// Find returns the session id names in dir; with id empty, the only
// running session. It fails with ErrNoSession when none runs (or not
// id), and with an error listing the sessions when there are several
// and id is empty.
func Find(dir, id string) (Info, error) {
	list, err := List(dir)
	if err != nil {
		return Info{}, err
	}
	if id != "" {
		for _, s := range list {
			if s.ID == id {
				return s, nil
			}
		}
		return Info{}, fmt.Errorf("%w with id %s (trueprof ctl list shows the running ones)", ErrNoSession, id)
	}
	switch len(list) {
	case 0:
		return Info{}, fmt.Errorf("%w of user %d is running", ErrNoSession, os.Getuid())
	case 1:
		return list[0], nil
	}
	var b strings.Builder
	for _, s := range list {
		fmt.Fprintf(&b, "\n  %s", Describe(s))
	}
	return Info{}, fmt.Errorf("%d sessions are running; choose one with --session ID:%s", len(list), b.String())
}

// Describe renders a session on one line: its id, recorder pid, target
// and trace file.
func Describe(s Info) string {
	target := strings.Join(s.Target, " ")
	if s.Attach != 0 {
		target = fmt.Sprintf("-p %d", s.Attach)
	}
	return fmt.Sprintf("%-8s started %s  %s -> %s", s.ID, s.Start.Format(time.DateTime), target, s.Output)
}

// callTimeout bounds a request's round trip; a snapshot copies the
// whole trace so far.
const callTimeout = 2 * time.Minute

// Call sends req to the session and returns its answer; file, for a
// snapshot, is the open file to write, sent along as a descriptor. An
// answer with an error is returned as an error.
func Call(s Info, req Request, file *os.File) (Answer, error) {
	var ans Answer
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: s.Socket, Net: "unixpacket"})
	if err != nil {
		return ans, fmt.Errorf("session %s: %w", s.ID, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(callTimeout))
	b, err := encode(req)
	if err != nil {
		return ans, err
	}
	var oob []byte
	if file != nil {
		oob = unix.UnixRights(int(file.Fd()))
	}
	if _, _, err := c.WriteMsgUnix(b, oob, nil); err != nil {
		return ans, fmt.Errorf("session %s: %w", s.ID, err)
	}
	buf := make([]byte, MaxMessage+1)
	n, err := c.Read(buf)
	if err != nil {
		return ans, fmt.Errorf("session %s: %w", s.ID, err)
	}
	if n > MaxMessage {
		return ans, fmt.Errorf("session %s: answer longer than %d bytes", s.ID, MaxMessage)
	}
	if err := json.Unmarshal(buf[:n], &ans); err != nil {
		return ans, fmt.Errorf("session %s: bad answer: %w", s.ID, err)
	}
	if ans.Error != "" {
		return ans, fmt.Errorf("session %s: %s", s.ID, ans.Error)
	}
	return ans, nil
}
