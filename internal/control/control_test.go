package control

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"trueprof/internal/testutil"
)

// fakeSession serves a session in a fresh directory whose handler counts
// the requests that reach it and writes "snap" into snapshot files.
func fakeSession(t testing.TB) (Info, *Server, *atomic.Int64) {
	t.Helper()
	dir := privateDir(t)
	var handled atomic.Int64
	srv, err := listenIn(dir, Info{PID: 4242, Target: []string{"prog", "arg"}, Output: "x.trace", Start: time.Now()},
		func(req Request, f *os.File) Answer {
			handled.Add(1)
			if req.Cmd == CmdSnapshot {
				n, err := f.WriteString("snap")
				if err != nil {
					return Answer{Error: err.Error()}
				}
				return Answer{Bytes: int64(n)}
			}
			a := Answer{Status: &Status{PID: 7, Paused: req.Cmd == CmdPause}}
			if req.Pattern != "" {
				a.Probes = &ProbeChange{Count: 1, Sites: 2, Functions: []string{req.Cmd + " " + req.Pattern}}
			}
			return a
		})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	info, err := Find(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	return info, srv, &handled
}

// rawCall sends one packet and returns the answer's error ("" if none).
func rawCall(t *testing.T, sock string, b []byte) string {
	t.Helper()
	c, err := net.Dial("unixpacket", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, MaxMessage+1)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no answer to %q: %v", b, err)
	}
	var ans Answer
	if err := json.Unmarshal(buf[:n], &ans); err != nil {
		t.Fatalf("answer to %q: %q: %v", b, buf[:n], err)
	}
	return ans.Error
}

func TestCtlProtocol(t *testing.T) {
	info, srv, handled := fakeSession(t)
	if fi, err := os.Lstat(srv.Socket()); err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket %v: mode %v, want a 0600 socket", err, fi.Mode())
	}
	if info.ID != "4242" || info.Output != "x.trace" || strings.Join(info.Target, " ") != "prog arg" {
		t.Errorf("Find: %+v", info)
	}
	ans, err := Call(info, Request{Cmd: CmdPause}, nil)
	if err != nil || ans.Status == nil || !ans.Status.Paused {
		t.Fatalf("pause: %+v, %v", ans, err)
	}
	for _, tc := range []struct{ name, packet, want string }{
		{"not JSON", "status\n", "bad request"},
		{"unknown command", `{"cmd":"format-disk"}`, `unknown command "format-disk"`},
		{"unknown field", `{"cmd":"status","x":1}`, "unknown field"},
		{"two values", `{"cmd":"status"}{"cmd":"stop"}`, "more than one"},
		{"wrong type", `{"cmd":7}`, "bad request"},
		{"snapshot without a file", `{"cmd":"snapshot"}`, "without the descriptor"},
		{"trace add without a pattern", `{"cmd":"trace-add"}`, "trace-add needs a pattern"},
		{"pattern on status", `{"cmd":"status","pattern":"f"}`, "status takes no pattern"},
		{"root with a glob", `{"cmd":"root","pattern":"f*"}`, "root names one function"},
		{"unprintable pattern", `{"cmd":"trace-remove","pattern":"f\n"}`, "unprintable"},
		{"long pattern", `{"cmd":"trace-add","pattern":"` + strings.Repeat("f", 1100) + `"}`, "at most 1024"},
		{"too long", `{"cmd":"status","pad":"` + strings.Repeat("x", MaxMessage) + `"}`, "longer than"},
	} {
		before := handled.Load()
		got := rawCall(t, info.Socket, []byte(tc.packet))
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s: answer %q, want an error with %q", tc.name, got, tc.want)
		}
		if handled.Load() != before {
			t.Errorf("%s: a refused request reached the session", tc.name)
		}
	}
	// The session goes on answering.
	if ans, err := Call(info, Request{Cmd: CmdStatus}, nil); err != nil || ans.Status == nil || ans.Status.PID != 7 {
		t.Errorf("status after the bad requests: %+v, %v", ans, err)
	}
	// Probe commands reach the session with their pattern, and their
	// answer says what changed.
	for _, cmd := range []string{CmdTraceAdd, CmdTraceRemove, CmdRoot} {
		ans, err := Call(info, Request{Cmd: cmd, Pattern: "libm.so.6:sin"}, nil)
		if err != nil || ans.Probes == nil || len(ans.Probes.Functions) != 1 || ans.Probes.Functions[0] != cmd+" libm.so.6:sin" {
			t.Errorf("%s: %+v, %v", cmd, ans, err)
		}
	}
	// A snapshot writes through the descriptor sent along.
	out := filepath.Join(t.TempDir(), "snap")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if ans, err := Call(info, Request{Cmd: CmdSnapshot}, f); err != nil || ans.Bytes != 4 {
		t.Fatalf("snapshot: %+v, %v", ans, err)
	}
	if b, _ := os.ReadFile(out); string(b) != "snap" {
		t.Errorf("snapshot file holds %q", b)
	}
	// A descriptor that is not a regular file is refused.
	r, w, _ := os.Pipe()
	defer r.Close()
	defer w.Close()
	if _, err := Call(info, Request{Cmd: CmdSnapshot}, r); err == nil || !strings.Contains(err.Error(), "regular file") {
		t.Errorf("snapshot into a pipe: %v, want refused", err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(info.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left after Close: %v", err)
	}
}

func TestCtlDirChecks(t *testing.T) {
	base := t.TempDir()
	good := filepath.Join(base, "good")
	if _, err := ensureDir(good); err != nil {
		t.Fatalf("a fresh directory: %v", err)
	}
	if fi, _ := os.Lstat(good); fi.Mode().Perm() != 0o700 {
		t.Errorf("created with mode %v, want 0700", fi.Mode().Perm())
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o755)
	file := filepath.Join(base, "file")
	os.WriteFile(file, nil, 0o600)
	for _, tc := range []struct{ name, dir, want string }{
		{"symlinked", link, "symbolic link"},
		{"open to others", open, "mode 0755"},
		{"not a directory", file, "not a directory"},
	} {
		_, err := ensureDir(tc.dir)
		if !errors.Is(err, ErrUnsafeDir) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrUnsafeDir saying %q", tc.name, err, tc.want)
		}
		if _, err := List(tc.dir); !errors.Is(err, ErrUnsafeDir) {
			t.Errorf("%s: List: %v, want ErrUnsafeDir", tc.name, err)
		}
		if _, err := listenViaDir(tc.dir); !errors.Is(err, ErrUnsafeDir) {
			t.Errorf("%s: Listen: %v, want ErrUnsafeDir", tc.name, err)
		}
	}
	if os.Getuid() == 0 {
		other := filepath.Join(base, "other")
		os.Mkdir(other, 0o700)
		if err := os.Chown(other, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := ensureDir(other); !errors.Is(err, ErrUnsafeDir) || !strings.Contains(err.Error(), "belongs to uid 65534") {
			t.Errorf("another user's directory: %v, want ErrUnsafeDir", err)
		}
	}
}

// listenViaDir runs Listen with its directory at dir, as the recorder
// would with XDG_RUNTIME_DIR set to dir's parent.
func listenViaDir(dir string) (*Server, error) {
	old, had := os.LookupEnv("XDG_RUNTIME_DIR")
	defer func() {
		if had {
			os.Setenv("XDG_RUNTIME_DIR", old)
		} else {
			os.Unsetenv("XDG_RUNTIME_DIR")
		}
	}()
	tmp, err := os.MkdirTemp("", "xdg")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if err := os.Symlink(dir, filepath.Join(tmp, "trueprof")); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(dir); err == nil && fi.Mode()&os.ModeSymlink == 0 {
		// Not a link test: use dir itself as the runtime directory's
		// trueprof entry.
		os.Remove(filepath.Join(tmp, "trueprof"))
		if err := os.Rename(dir, filepath.Join(tmp, "trueprof")); err != nil {
			return nil, err
		}
		defer os.Rename(filepath.Join(tmp, "trueprof"), dir)
	}
	os.Setenv("XDG_RUNTIME_DIR", tmp)
	srv, err := Listen(Info{PID: 1}, func(Request, *os.File) Answer { return Answer{} })
	if err == nil {
		srv.Close()
	}
	return srv, err
}

// privateDir is a fresh directory as Dir makes them: 0700.
func privateDir(t testing.TB) string {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestCtlListStale(t *testing.T) {
	dir := privateDir(t)
	// A recorder that died: its socket bound, nobody listening.
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: filepath.Join(dir, "99.sock"), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	if err := writeInfo(filepath.Join(dir, "99.json"), Info{ID: "99", PID: 99}); err != nil {
		t.Fatal(err)
	}
	// And one whose socket is gone.
	writeInfo(filepath.Join(dir, "98.json"), Info{ID: "98", PID: 98})
	live, err := listenIn(dir, Info{PID: 100, Start: time.Now()}, func(Request, *os.File) Answer { return Answer{} })
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	list, err := List(dir)
	if err != nil || len(list) != 1 || list[0].ID != "100" {
		t.Fatalf("List = %+v, %v; want the live session alone", list, err)
	}
	for _, name := range []string{"99.sock", "99.json", "98.json"} {
		if _, err := os.Lstat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stale %s not removed: %v", name, err)
		}
	}
	// Two sessions: Find needs an id, and says which there are.
	second, err := listenIn(dir, Info{PID: 101, Target: []string{"other"}, Start: time.Now()}, func(Request, *os.File) Answer { return Answer{} })
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if _, err := Find(dir, ""); err == nil || !strings.Contains(err.Error(), "--session") || !strings.Contains(err.Error(), "101") {
		t.Errorf("Find with two sessions: %v, want an error listing them", err)
	}
	if s, err := Find(dir, "101"); err != nil || s.ID != "101" {
		t.Errorf("Find 101: %+v, %v", s, err)
	}
	if _, err := Find(dir, "5"); !errors.Is(err, ErrNoSession) {
		t.Errorf("Find 5: %v, want ErrNoSession", err)
	}
}

// peerEnv makes the test binary a ctl client of the socket it names.
const peerEnv = "TRUEPROF_CTL_TEST_CLIENT"

// TestMain makes the test binary, run with peerEnv set, the client
// TestCtlPeerCred runs as another user: it prints the answer's error
// and exits, running no test.
func TestMain(m *testing.M) {
	if sock := os.Getenv(peerEnv); sock != "" {
		_, err := Call(Info{ID: "peer", Socket: sock}, Request{Cmd: CmdStop}, nil)
		os.Stdout.WriteString("answer: " + errString(err) + "\n")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// TestCtlPeerCred connects as user nobody to a session whose socket and
// directory were opened to everyone: SO_PEERCRED still refuses it, and
// the request never reaches the session.
func TestCtlPeerCred(t *testing.T) {
	if os.Getuid() != 0 {
		testutil.Missing(t, "needs root to run a client as user nobody")
	}
	info, srv, handled := fakeSession(t)
	os.Chmod(filepath.Dir(info.Socket), 0o755)
	os.Chmod(info.Socket, 0o666)
	// nobody must be able to run the test binary: a copy in a directory
	// it may enter.
	bin, err := os.MkdirTemp("", "ctlpeer")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(bin)
	os.Chmod(bin, 0o755)
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(bin, "control.test")
	if err := os.WriteFile(exe, self, 0o755); err != nil {
		t.Fatal(err)
	}
	for dir := filepath.Dir(info.Socket); dir != "/" && dir != os.TempDir(); dir = filepath.Dir(dir) {
		os.Chmod(dir, 0o755) // t.TempDir's parents
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), peerEnv+"="+info.Socket)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("client as nobody: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "answer: ") || !strings.Contains(string(out), "permission denied: uid 65534") {
		t.Errorf("client as nobody got:\n%s\nwant permission denied", out)
	}
	if handled.Load() != 0 || srv.Refused() != 1 {
		t.Errorf("%d requests handled, %d connections refused; want 0 and 1", handled.Load(), srv.Refused())
	}
}

// FuzzCtlDecodeRequest decodes arbitrary packets: never a panic; a
// request is accepted only with a known command, and re-encodes to a
// packet that decodes to itself.
func FuzzCtlDecodeRequest(f *testing.F) {
	for _, s := range []string{`{"cmd":"status"}`, `{"cmd":"snapshot"}` + "\n", `{"cmd":"stop"} `, `{}`, `{"cmd":"x"}`, `[`, `{"cmd":"pause","cmd":"resume"}`,
		`{"cmd":"trace-add","pattern":"lib*.so:f*"}`, `{"cmd":"trace-remove","pattern":"f"}`, `{"cmd":"root","pattern":"main"}`,
		`{"cmd":"root","pattern":"m*"}`, `{"cmd":"trace-add"}`, `{"cmd":"status","pattern":"f"}`, `{"cmd":"trace-add","pattern":"a\u0000"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(b)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) || r != (Request{}) {
				t.Fatalf("error %v with request %+v", err, r)
			}
			return
		}
		enc, err := encode(r)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := DecodeRequest(enc); err != nil || again != r {
			t.Fatalf("%+v re-decodes to %+v, %v", r, again, err)
		}
	})
}

// FuzzCtlServe sends arbitrary packets to a session: each gets one
// answer, a malformed one an error that never reaches the handler, and
// the session answers a status request afterwards.
func FuzzCtlServe(f *testing.F) {
	for _, s := range []string{`{"cmd":"status"}`, `{"cmd":"stop"}`, `{"cmd":"snapshot"}`, "\x00\xff", `{"cmd":"status"`,
		`{"cmd":"trace-add","pattern":"snapshot"}`, `{"cmd":"root","pattern":""}`} {
		f.Add([]byte(s))
	}
	info, _, handled := fakeSession(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return // an empty packet reads as the end of the connection
		}
		before := handled.Load()
		got := rawCall(t, info.Socket, b)
		r, derr := DecodeRequest(b)
		valid := derr == nil && r.Cmd != CmdSnapshot
		if reached := handled.Load() != before; reached != valid {
			t.Fatalf("packet %q (decode error %v) reached the handler: %v; answer %s", b, derr, reached, got)
		}
		if ans, err := Call(info, Request{Cmd: CmdStatus}, nil); err != nil || ans.Status == nil {
			t.Fatalf("status after %q: %+v, %v", b, ans, err)
		}
	})
}
