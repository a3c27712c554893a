package resolve

import (
	"bytes"
	"fmt"

	"trueprof/internal/symbolize"
)

// moduleFile is an opened module, or the reason it could not be used.
type moduleFile struct {
	f   *symbolize.File
	err error
}

// vdsoFile opens the recorder's [vdso] the first time it is needed.
func (r *Resolver) vdsoFile() *moduleFile {
	if r.vdso == nil {
		f, err := symbolize.OpenVDSO()
		r.vdso = &moduleFile{f: f, err: err}
		if err != nil {
			r.warn("vdso", "[vdso] frames are followed by frame pointers only: %v", err)
		}
	}
	return r.vdso
}

// file opens the module file of m. It prefers the target's own view of the
// path (/proc/PID/root) and refuses a file whose build id differs from the
// one the kernel reported for the mapping: the path may have been replaced,
// and trueprof must never describe one file with another's symbols.
func (r *Resolver) file(pid uint32, m *Mapping) *moduleFile {
	// A build id names the content: the same library seen through other
	// paths (another mount namespace's /proc/PID/root) is opened once.
	// The unwinder asks for every frame of every sample, so a hit must
	// not allocate: the lookups convert in place.
	byID := len(m.BuildID) > 0
	var mf *moduleFile
	var ok bool
	if byID {
		mf, ok = r.filesByID[string(m.BuildID)]
	} else {
		mf, ok = r.files[m.Path]
	}
	if ok {
		return mf
	}
	mf = &moduleFile{}
	if byID {
		r.filesByID[string(m.BuildID)] = mf
	} else {
		r.files[m.Path] = mf
	}
	var f *symbolize.File
	var err error
	for _, p := range []string{r.procRoot(pid) + m.Path, m.Path} {
		if f, err = symbolize.OpenFile(p); err == nil {
			break
		}
	}
	if err != nil {
		mf.err = err
		r.warn("open:"+m.Path, "no symbols for %s: %v", m.Path, err)
		return mf
	}
	if len(m.BuildID) > 0 && len(f.BuildID()) > 0 && !bytes.Equal(m.BuildID, f.BuildID()) {
		f.Close()
		mf.err = fmt.Errorf("build id %x of %s does not match the mapped file's %x", f.BuildID(), m.Path, m.BuildID)
		r.warn("buildid:"+m.Path, "no symbols for %s: %v", m.Path, mf.err)
		return mf
	}
	mf.f = f
	return mf
}
