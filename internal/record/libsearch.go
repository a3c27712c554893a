package record

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// neededLibraries returns the paths of the shared libraries the
// executable path needs directly (DT_NEEDED) when started with
// environment env, found in ld.so's order (ld.so(8)):
//
//  1. a name with a slash is taken as it is;
//  2. DT_RPATH, only when the executable has no DT_RUNPATH;
//  3. LD_LIBRARY_PATH of env, unless the executable is set-user-ID or
//     set-group-ID (ld.so's secure mode ignores it then);
//  4. DT_RUNPATH;
//  5. /etc/ld.so.cache (readLDCache);
//  6. the default directories (defaultLibDirs).
//
// $ORIGIN and ${ORIGIN} in RPATH and RUNPATH are the executable's
// directory (dropped in secure mode). As ld.so does, a file of another
// ELF class or machine than the executable's is passed over. Libraries
// it cannot find, and a glibc-hwcaps variant that ld.so may prefer to the
// one found, are probed when they are mapped. An attached process needs
// no search: the files it mapped are the loader's own choice.
func neededLibraries(path string, env []string) []string {
	f, err := elf.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil || len(libs) == 0 {
		return nil
	}
	secure := false
	if st, err := os.Stat(path); err == nil && st.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
		secure = true
	}
	origin := filepath.Dir(path)
	runpath := dynPath(f, elf.DT_RUNPATH, origin, secure)
	var dirs []string
	if len(runpath) == 0 {
		dirs = append(dirs, dynPath(f, elf.DT_RPATH, origin, secure)...)
	}
	if !secure {
		dirs = append(dirs, filepath.SplitList(envValue(env, "LD_LIBRARY_PATH"))...)
	}
	dirs = append(dirs, runpath...)
	cache, _ := readLDCache(ldCachePath)

	var out []string
	for _, lib := range libs {
		if strings.Contains(lib, "/") {
			out = append(out, lib)
			continue
		}
		if p, ok := findLibrary(lib, dirs, cache, f); ok {
			out = append(out, p)
		}
	}
	return out
}

// findLibrary looks for lib in dirs, then in the cache, then in the
// default directories, and returns the first file that is a library for
// exe's class and machine.
func findLibrary(lib string, dirs []string, cache map[string][]string, exe *elf.File) (string, bool) {
	var candidates []string
	for _, d := range dirs {
		if d != "" {
			candidates = append(candidates, filepath.Join(d, lib))
		}
	}
	candidates = append(candidates, cache[lib]...)
	for _, d := range defaultLibDirs {
		candidates = append(candidates, filepath.Join(d, lib))
	}
	for _, p := range candidates {
		if sameArch(p, exe) {
			return p, true
		}
	}
	return "", false
}

// defaultLibDirs are ld.so's trusted directories on x86-64 Debian and
// Fedora alike: the multiarch ones, lib64, then lib.
var defaultLibDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// dynPath returns the directories of a DT_RPATH or DT_RUNPATH entry, with
// $ORIGIN expanded; in secure mode, entries with $ORIGIN are dropped.
func dynPath(f *elf.File, tag elf.DynTag, origin string, secure bool) []string {
	vals, err := f.DynString(tag)
	if err != nil {
		return nil
	}
	var dirs []string
	for _, v := range vals {
		for _, d := range strings.Split(v, ":") {
			expanded := strings.NewReplacer("${ORIGIN}", origin, "$ORIGIN", origin).Replace(d)
			if expanded != d && secure {
				continue
			}
			dirs = append(dirs, expanded)
		}
	}
	return dirs
}

// envValue is the value of variable name in env ("NAME=value" entries,
// the last one winning, as getenv finds it in a process's environment).
func envValue(env []string, name string) string {
	v := ""
	for _, e := range env {
		if k, val, ok := strings.Cut(e, "="); ok && k == name {
			v = val
		}
	}
	return v
}

// sameArch reports whether path is a regular ELF file of exe's class and
// machine: ld.so skips other files of the right name.
func sameArch(path string, exe *elf.File) bool {
	st, err := os.Stat(path)
	if err != nil || !st.Mode().IsRegular() {
		return false
	}
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	return f.Class == exe.Class && f.Machine == exe.Machine
}

// ldCachePath is ld.so's cache of the libraries in its configured
// directories, which ldconfig writes.
const ldCachePath = "/etc/ld.so.cache"

// The cache's formats (glibc's sysdeps/generic/dl-cache.h): the new one
// ("glibc-ld.so.cache" "1.1", alone since glibc 2.32) may follow the old
// one ("ld.so-1.7.0"), 8-byte aligned, and its string offsets count from
// its own header.
const (
	ldCacheOldMagic    = "ld.so-1.7.0"
	ldCacheNewMagic    = "glibc-ld.so.cache1.1"
	ldCacheOldEntry    = 12 // int32 flags, uint32 key, value
	ldCacheNewHeader   = 48 // magic+version, nlibs, len_strings, flags, pad, extension_offset, unused[3]
	ldCacheNewEntry    = 24 // int32 flags, uint32 key, value, osversion, uint64 hwcap
	ldCacheELFLibc6    = 3  // flags & 0xff of a library for the C library of this ABI
	ldCacheTypeMaskELF = 0xff
)

// errLDCache is wrapped by the errors of readLDCache.
var errLDCache = errors.New("ld.so.cache")

// readLDCache reads the new format of ld.so's cache: the paths of each
// soname, in the cache's order (ld.so takes the first that fits). Entries
// of glibc-hwcaps subdirectories (a nonzero hwcap), which ld.so uses only
// on CPUs with those features, are left out.
func readLDCache(path string) (map[string][]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseLDCache(b)
}

// parseLDCache is readLDCache over the file's bytes.
func parseLDCache(b []byte) (map[string][]string, error) {
	start := 0
	if bytes.HasPrefix(b, []byte(ldCacheOldMagic)) {
		if len(b) < len(ldCacheOldMagic)+4 {
			return nil, fmt.Errorf("%w: old header truncated", errLDCache)
		}
		n := uint64(binary.LittleEndian.Uint32(b[len(ldCacheOldMagic):]))
		end := uint64(len(ldCacheOldMagic)+4) + n*ldCacheOldEntry
		start = int((end + 7) &^ 7)
		if end > uint64(len(b)) {
			return nil, fmt.Errorf("%w: %d old entries past the end", errLDCache, n)
		}
	}
	if start > len(b) || !bytes.HasPrefix(b[start:], []byte(ldCacheNewMagic)) {
		return nil, fmt.Errorf("%w: no %q header", errLDCache, ldCacheNewMagic)
	}
	c := b[start:]
	if len(c) < ldCacheNewHeader {
		return nil, fmt.Errorf("%w: header truncated", errLDCache)
	}
	n := uint64(binary.LittleEndian.Uint32(c[20:]))
	if uint64(ldCacheNewHeader)+n*ldCacheNewEntry > uint64(len(c)) {
		return nil, fmt.Errorf("%w: %d entries past the end of %d bytes", errLDCache, n, len(c))
	}
	str := func(off uint32) (string, bool) {
		if uint64(off) >= uint64(len(c)) {
			return "", false
		}
		s := c[off:]
		i := bytes.IndexByte(s, 0)
		if i < 0 {
			return "", false
		}
		return string(s[:i]), true
	}
	libs := map[string][]string{}
	for i := range n {
		e := c[ldCacheNewHeader+i*ldCacheNewEntry:]
		flags := binary.LittleEndian.Uint32(e)
		hwcap := binary.LittleEndian.Uint64(e[16:])
		if flags&ldCacheTypeMaskELF != ldCacheELFLibc6 || hwcap != 0 {
			continue
		}
		key, ok1 := str(binary.LittleEndian.Uint32(e[4:]))
		value, ok2 := str(binary.LittleEndian.Uint32(e[8:]))
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%w: entry %d names a string past the end", errLDCache, i)
		}
		libs[key] = append(libs[key], value)
	}
	return libs, nil
}
