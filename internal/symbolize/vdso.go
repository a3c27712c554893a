package symbolize

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// OpenVDSO opens the recorder's own [vdso], the code the kernel maps into
// every process (clock_gettime, gettimeofday, getcpu), for its symbols
// and its .eh_frame: every x86-64 process of one kernel maps the same
// image, so the recorder's copy describes its targets' too. Its file
// offsets are offsets from the mapping's start, as for a file mapped at
// offset 0.
func OpenVDSO() (*File, error) {
	lo, hi, err := vdsoRange()
	if err != nil {
		return nil, err
	}
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		return nil, err
	}
	defer mem.Close()
	data := make([]byte, hi-lo)
	if _, err := mem.ReadAt(data, int64(lo)); err != nil {
		return nil, fmt.Errorf("symbolize: reading [vdso]: %w", err)
	}
	ef, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("symbolize: [vdso]: %w", err)
	}
	f := &File{path: "[vdso]", base: "[vdso]", elf: ef, cache: make(map[uint64][]Frame)}
	if err := f.load(Options{NoDebugFile: true}); err != nil {
		return nil, fmt.Errorf("symbolize: [vdso]: %w", err)
	}
	return f, nil
}

// maxVDSO bounds the [vdso] mapping read (it is two pages today).
const maxVDSO = 1 << 20

// vdsoRange returns the address range of the [vdso] in /proc/self/maps.
func vdsoRange() (lo, hi uint64, err error) {
	maps, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, 0, err
	}
	defer maps.Close()
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || f[5] != "[vdso]" {
			continue
		}
		a, b, ok := strings.Cut(f[0], "-")
		if !ok {
			break
		}
		lo, err1 := strconv.ParseUint(a, 16, 64)
		hi, err2 := strconv.ParseUint(b, 16, 64)
		if err1 != nil || err2 != nil || hi <= lo || hi-lo > maxVDSO {
			break
		}
		return lo, hi, nil
	}
	return 0, 0, fmt.Errorf("symbolize: no [vdso] in /proc/self/maps")
}
