package symbolize

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// openTrusted opens a symbol file written by the profiled process. The
// names in it end up in reports, so it must come from that process's user:
// it is opened without following a final symbolic link (a link in /tmp
// could point anywhere), without blocking (a FIFO would hang the
// recorder), and accepted only if the open descriptor is a regular file
// owned by uid. Checking the descriptor rather than the path leaves no
// window for the file to be swapped.
func openTrusted(path string, uid int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%w: %s is a symbolic link", ErrUntrusted, path)
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrUntrusted, path)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int64(st.Uid) != int64(uid) {
		f.Close()
		owner := int64(-1)
		if ok {
			owner = int64(st.Uid)
		}
		return nil, fmt.Errorf("%w: %s is owned by uid %d, not %d", ErrUntrusted, path, owner, uid)
	}
	return f, nil
}
