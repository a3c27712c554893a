package control

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// ErrUnsafeDir is returned for a socket directory another user could
// enter or replace: not a directory (a symlink included), not owned by
// the user, or open to others. ctl and the recorder refuse to use it
// rather than repair it, since someone may be waiting in it.
var ErrUnsafeDir = errors.New("unsafe control directory")

// Dir returns the directory of the current user's session sockets,
// creating it (0700) when missing: $XDG_RUNTIME_DIR/trueprof when
// XDG_RUNTIME_DIR is set (systemd makes it the user's own, 0700), else
// /tmp/trueprof-UID. It fails with ErrUnsafeDir when the directory
// exists but is a symlink, belongs to another user or is open to others.
func Dir() (string, error) {
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" && filepath.IsAbs(x) {
		return ensureDir(filepath.Join(x, "trueprof"))
	}
	return ensureDir(filepath.Join(os.TempDir(), "trueprof-"+strconv.Itoa(os.Getuid())))
}

// ensureDir creates dir 0700 unless it exists, then checks it. Mkdir
// does not follow a symlink planted at dir: it fails with EEXIST, and
// the check refuses the link.
func ensureDir(dir string) (string, error) {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("control directory: %w", err)
	}
	return dir, CheckDir(dir)
}

// CheckDir checks that dir, not following a symlink, is a directory
// owned by the current user with no permission for group or others.
func CheckDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("control directory: %w", err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("%w: %s is a symbolic link", ErrUnsafeDir, dir)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", ErrUnsafeDir, dir)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%w: %s: no owner information", ErrUnsafeDir, dir)
	}
	if int(st.Uid) != os.Getuid() {
		return fmt.Errorf("%w: %s belongs to uid %d, not %d", ErrUnsafeDir, dir, st.Uid, os.Getuid())
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%w: %s has mode %#o, want 0700 (no access for group or others)", ErrUnsafeDir, dir, perm)
	}
	return nil
}
