package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Info describes a running session for `ctl list`; the recorder writes
// it next to its socket.
type Info struct {
	ID     string    `json:"id"`               // the session id: the recorder's pid
	PID    int       `json:"pid"`              // the recorder's process
	Target []string  `json:"target,omitempty"` // the launched command, or
	Attach int       `json:"attach,omitempty"` // the attached process
	Output string    `json:"output"`           // the trace file
	Start  time.Time `json:"start"`
	// Socket is the session's socket path (set by List and Find).
	Socket string `json:"-"`
}

// Handler carries out a request. It runs on a connection's goroutine;
// file is the descriptor sent with a snapshot request (nil otherwise),
// which the handler must not close. A handler reports failure in
// Answer.Error.
type Handler func(req Request, file *os.File) Answer

// Server serves one session's socket.
type Server struct {
	ln       *net.UnixListener
	sock     string
	info     string
	handle   Handler
	conns    sync.WaitGroup
	slots    chan struct{}
	mu       sync.Mutex
	open     map[*net.UnixConn]bool
	closed   bool
	refusals uint64
}

// maxConns bounds the connections served at once; more wait in the
// listen backlog.
const maxConns = 4

// idleTimeout ends a connection that sends nothing for this long, so a
// stuck client cannot hold a slot.
const idleTimeout = 30 * time.Second

// Listen creates the session's socket and info file in Dir, named by
// info.PID (which it fills in as ID), and serves requests with h until
// Close.
func Listen(info Info, h Handler) (*Server, error) {
	dir, err := Dir()
	if err != nil {
		return nil, err
	}
	return listenIn(dir, info, h)
}

// listenIn is Listen in dir, which the caller has checked.
func listenIn(dir string, info Info, h Handler) (*Server, error) {
	info.ID = strconv.Itoa(info.PID)
	sock := filepath.Join(dir, info.ID+".sock")
	// A socket of an earlier recorder with our pid is stale: it died
	// without removing it. Remove does not follow a symlink.
	os.Remove(sock)
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	ln.SetUnlinkOnClose(true)
	// The directory already keeps others out; the socket's own mode
	// says the same to whoever looks. Fchmodat on the name we just
	// bound: nobody else can enter the directory to swap it.
	if err := unix.Fchmodat(unix.AT_FDCWD, sock, 0o600, 0); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket: %w", os.NewSyscallError("fchmodat", err))
	}
	s := &Server{ln: ln, sock: sock, info: filepath.Join(dir, info.ID+".json"), handle: h,
		slots: make(chan struct{}, maxConns), open: map[*net.UnixConn]bool{}}
	if err := writeInfo(s.info, info); err != nil {
		ln.Close()
		return nil, err
	}
	go s.serve()
	return s, nil
}

// writeInfo writes the info file, refusing to follow a symlink.
func writeInfo(path string, info Info) error {
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	os.Remove(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("control info: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("control info: %w", err)
	}
	return f.Close()
}

// Socket returns the path of the session's socket.
func (s *Server) Socket() string { return s.sock }

// Refused returns the number of connections refused for their peer's
// credentials.
func (s *Server) Refused() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refusals
}

// Close stops serving, ends the open connections, waits for their
// handlers and removes the socket and the info file.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for c := range s.open {
		c.Close()
	}
	s.mu.Unlock()
	err := s.ln.Close()
	s.conns.Wait()
	os.Remove(s.info)
	return err
}

func (s *Server) serve() {
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and the like: wait rather than spin.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.open[c] = true
		s.conns.Add(1)
		s.mu.Unlock()
		s.slots <- struct{}{}
		go func() {
			defer func() {
				<-s.slots
				s.mu.Lock()
				delete(s.open, c)
				s.mu.Unlock()
				c.Close()
				s.conns.Done()
			}()
			s.serveConn(c)
		}()
	}
}

// allowed reports whether the peer of c may control the session: the
// recorder's own user, or root.
func allowed(c *net.UnixConn) (uint32, bool) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, false
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return 0, false
	}
	return cred.Uid, cred.Uid == uint32(os.Getuid()) || cred.Uid == 0
}

// serveConn answers c's requests, one packet each, until it closes.
func (s *Server) serveConn(c *net.UnixConn) {
	buf := make([]byte, MaxMessage+1)
	oob := make([]byte, unix.CmsgSpace(4*4))
	if uid, ok := allowed(c); !ok {
		s.mu.Lock()
		s.refusals++
		s.mu.Unlock()
		// The request is read, never looked at, so that closing does
		// not reset the connection before the client reads why.
		c.SetReadDeadline(time.Now().Add(time.Second))
		if _, oobn, _, _, err := c.ReadMsgUnix(buf, oob); err == nil {
			if f, _ := receivedFile(oob[:oobn]); f != nil {
				f.Close()
			}
		}
		reply(c, Answer{Error: fmt.Sprintf("permission denied: uid %d may not control a session of uid %d", uid, os.Getuid())})
		return
	}
	for {
		c.SetReadDeadline(time.Now().Add(idleTimeout))
		n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return
		}
		file, ferr := receivedFile(oob[:oobn])
		var ans Answer
		req, err := DecodeRequest(buf[:n])
		switch {
		case flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || n > MaxMessage:
			ans.Error = fmt.Sprintf("%v: request longer than %d bytes", ErrBadRequest, MaxMessage)
		case ferr != nil:
			ans.Error = ferr.Error()
		case err != nil:
			ans.Error = err.Error()
		case req.Cmd == CmdSnapshot && file == nil:
			ans.Error = fmt.Sprintf("%v: snapshot without the descriptor of the file to write", ErrBadRequest)
		case req.Cmd != CmdSnapshot && file != nil:
			ans.Error = fmt.Sprintf("%v: a descriptor came with %s", ErrBadRequest, req.Cmd)
		default:
			ans = s.handle(req, file)
		}
		if file != nil {
			file.Close()
		}
		if reply(c, ans) != nil {
			return
		}
	}
}

// receivedFile returns the one regular file sent with a request, nil
// when none was sent; other descriptors are closed and refused.
func receivedFile(oob []byte) (*os.File, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("%w: control message: %v", ErrBadRequest, err)
	}
	var fds []int
	for _, m := range msgs {
		if got, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, got...)
		}
	}
	if len(fds) == 0 {
		return nil, nil
	}
	var st unix.Stat_t
	if len(fds) != 1 || unix.Fstat(fds[0], &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("%w: want one descriptor of a regular file, got %d", ErrBadRequest, len(fds))
	}
	unix.CloseOnExec(fds[0])
	return os.NewFile(uintptr(fds[0]), "snapshot"), nil
}

// reply sends one answer packet.
func reply(c *net.UnixConn, a Answer) error {
	b, err := encode(a)
	if err != nil {
		b, _ = encode(Answer{Error: err.Error()})
	}
	c.SetWriteDeadline(time.Now().Add(idleTimeout))
	_, err = c.Write(b)
	return err
}
