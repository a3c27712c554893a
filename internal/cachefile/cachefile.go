// Package cachefile writes the files trueprof keeps between runs (the
// stored calibration, the kernel's task_struct offsets) so that a
// reader never sees part of one: another trueprof may read the file
// while this one replaces it.
//
//	if err := cachefile.Write(path, data, 0o644); err != nil { ... }
package cachefile

import (
	"os"
	"path/filepath"
)

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
