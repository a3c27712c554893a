// Package cachefile owns the files trueprof keeps between runs (the
// stored calibration, the calibration target, the hook library, the
// kernel's task_struct offsets): where they live (Dir), and writing them
// so that a reader never sees part of one (Write): another trueprof may
// read a file while this one replaces it.
//
//	dir, err := cachefile.Dir()
//	...
//	if err := cachefile.Write(filepath.Join(dir, name), data, 0o644); err != nil { ... }
package cachefile

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Dir returns trueprof's directory in the user's cache directory
// ($XDG_CACHE_HOME or ~/.cache), or in the temporary directory, named by
// the user's id, when the user has none; it creates the directory. The
// directory must be owned by this user and writable by no one else:
// trueprof preloads the hook library built there into its targets and
// runs the calibration target built there, so a directory that another
// user can write (a planted /tmp path) is refused.
func Dir() (string, error) {
	base, err := os.UserCacheDir()
	private := []string{}
	if err != nil {
		// Its parent is the shared temporary directory: the base must be
		// ours too, or its owner could swap our directory for theirs.
		base = filepath.Join(os.TempDir(), fmt.Sprintf("trueprof-cache-%d", os.Geteuid()))
		if err := os.Mkdir(base, 0o700); err != nil && !os.IsExist(err) {
			return "", fmt.Errorf("trueprof's cache directory: %w", err)
		}
		private = append(private, base)
	}
	dir := filepath.Join(base, "trueprof")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("trueprof's cache directory: %w", err)
	}
	for _, d := range append(private, dir) {
		if err := ownDir(d); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// ownDir checks that d is a directory (not a link) owned by this user
// and writable by no one else.
func ownDir(d string) error {
	fi, err := os.Lstat(d)
	if err != nil {
		return fmt.Errorf("trueprof's cache directory: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || fi.Mode().Perm()&0o022 != 0 || !ok || int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("trueprof's cache directory %s: not a directory owned by this user and writable only by it", d)
	}
	return nil
}

// Write replaces the file at path with data, with permissions perm: it
// writes a temporary file in path's directory, which must exist, and
// renames it over path, so that a concurrent reader sees the old
// contents or the new ones whole. On error path is unchanged and the
// temporary file is removed.
func Write(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, perm) // CreateTemp's is 0600
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}
