package record

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// Two of the recorder's helper processes need nothing of Go: the exec
// wrapper (launch.go) says on a socket that it runs, waits there and
// execs the target, and the holder of closing events (closer.go) waits
// for its standard input to close, closes its descriptors and exits. As
// trueprof re-executed, each started a Go runtime and ran trueprof's
// package initialisers first, 3.5-4.5 ms of CPU (`trueprof` with a bad
// command line: 4.6-5.4 ms a run, /bin/true 0.9 ms), on the start's
// critical path for the wrapper and taken from the recorder's exit for
// the holder, on a machine of 2 CPUs. Where their machine code exists
// (tiny_amd64.go) each is a static ELF executable of a few hundred bytes,
// written once per recorder into a sealed memfd and executed from there;
// elsewhere, or when the kernel refuses (vm.memfd_noexec), trueprof
// itself is re-executed as before (RunWrapper).

// tinyBase is where a tiny executable is loaded: its one segment, the
// ELF and program headers followed by the code, starts there.
const tinyBase = 0x400000

// tinyELF returns a static executable for this machine (elf.EM_X86_64)
// whose code, loaded with its headers at tinyBase, begins right after
// them.
func tinyELF(code []byte) []byte {
	const ehdr, phdr = 64, 56 // sizeof(Elf64_Ehdr), sizeof(Elf64_Phdr)
	b := make([]byte, ehdr+phdr+len(code))
	le := binary.LittleEndian
	copy(b, elf.ELFMAG)
	b[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	b[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	b[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	le.PutUint16(b[16:], uint16(elf.ET_EXEC))
	le.PutUint16(b[18:], uint16(elf.EM_X86_64))
	le.PutUint32(b[20:], uint32(elf.EV_CURRENT))
	le.PutUint64(b[24:], tinyBase+ehdr+phdr) // e_entry
	le.PutUint64(b[32:], ehdr)               // e_phoff
	le.PutUint16(b[52:], ehdr)               // e_ehsize
	le.PutUint16(b[54:], phdr)               // e_phentsize
	le.PutUint16(b[56:], 1)                  // e_phnum
	p := b[ehdr:]
	le.PutUint32(p[0:], uint32(elf.PT_LOAD))
	le.PutUint32(p[4:], uint32(elf.PF_R|elf.PF_X))
	le.PutUint64(p[16:], tinyBase)       // p_vaddr
	le.PutUint64(p[24:], tinyBase)       // p_paddr
	le.PutUint64(p[32:], uint64(len(b))) // p_filesz
	le.PutUint64(p[40:], uint64(len(b))) // p_memsz
	le.PutUint64(p[48:], 0x1000)         // p_align
	copy(b[ehdr+phdr:], code)
	return b
}

// tinyProgram returns a function that gives the path of the executable
// of code, made on its first call: a memfd of this process, sealed, named
// in /proc by this process's id, so that a child whose descriptors are
// being rearranged for exec still finds it. It gives "" when there is no
// code for this machine, when the memfd cannot be made executable, or
// when a child could not open the path: a process that is not dumpable
// (trueprof given capabilities by setcap and run by another user) keeps
// its /proc/PID/fd from its children. Callers fall back to trueprof
// re-executed when the exec fails anyway (a security module, a sandbox).
func tinyProgram(name string, code []byte) func() string {
	return sync.OnceValue(func() string {
		if code == nil {
			return ""
		}
		if d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0); err != nil || d != 1 {
			return ""
		}
		fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_EXEC)
		if err == unix.EINVAL {
			// Before Linux 6.3 there is no MFD_EXEC: every memfd may be
			// executed.
			fd, err = unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
		}
		if err != nil {
			return ""
		}
		b := tinyELF(code)
		if n, err := unix.Write(fd, b); err != nil || n != len(b) {
			unix.Close(fd)
			return ""
		}
		// Nobody changes it after this, not even by mistake.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE); err != nil {
			unix.Close(fd)
			return ""
		}
		path := procFdPath(fd)
		if path == "" {
			unix.Close(fd)
		}
		return path
	})
}

// procFdPath is the path in /proc of this process's descriptor fd, ""
// when /proc does not name this process. The process is named by what
// /proc/self links to, not by os.Getpid: in a PID namespace other than
// /proc's, os.Getpid's number is another process there, whose file a
// child would execute. The path is checked to be fd itself.
func procFdPath(fd int) string {
	self, err := os.Readlink("/proc/self")
	if err != nil {
		return ""
	}
	path := "/proc/" + self + "/fd/" + strconv.Itoa(fd)
	var viaPath, viaFd unix.Stat_t
	if unix.Stat(path, &viaPath) != nil || unix.Fstat(fd, &viaFd) != nil ||
		viaPath.Dev != viaFd.Dev || viaPath.Ino != viaFd.Ino {
		return ""
	}
	return path
}
