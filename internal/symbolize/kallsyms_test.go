package symbolize

import (
	"bufio"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"trueprof/internal/testutil"
)

const kallsymsFixture = `ffffffff81000000 T _text
ffffffff81000000 T _stext
ffffffff81000000 t srso_alias_untrain_ret
ffffffff81001000 T do_one_initcall
ffffffff81001100 t helper_local
ffffffff81001200 D some_data
ffffffff81001300 W weak_func
ffffffff81001400 T last_text
ffffffff82000000 B __bss_stop
ffffffffc0201000 t ftrace_trampoline	[__builtin__ftrace]
ffffffffc0a00000 t ext4_read	[ext4]
ffffffffc0a00100 T ext4_write	[ext4]
ffffffffc0a00200 d ext4_data	[ext4]
`

func TestKallsymsFixture(t *testing.T) {
	k, err := LoadKallsyms(strings.NewReader(kallsymsFixture))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		addr   uint64
		fn     string
		module string
		ok     bool
	}{
		{"alias chooses shortest global", 0xffffffff81000010, "_text", KernelModule, true},
		{"exact start", 0xffffffff81001000, "do_one_initcall", KernelModule, true},
		{"local", 0xffffffff810011ff, "helper_local", KernelModule, true},
		{"data is not code", 0xffffffff81001250, "", "", false},
		{"weak", 0xffffffff81001300, "weak_func", KernelModule, true},
		{"bounded by data", 0xffffffff81500000, "last_text", KernelModule, true},
		{"before first", 0xffffffff80000000, "", "", false},
		{"module", 0xffffffffc0a00050, "ext4_read", "[ext4]", true},
		{"module global", 0xffffffffc0a00150, "ext4_write", "[ext4]", true},
		{"builtin trampoline", 0xffffffffc0201004, "ftrace_trampoline", "[__builtin__ftrace]", true},
		{"past last symbol", 0xffffffffc0a00300, "", "", false},
		{"module end, same page", 0xffffffffc0201ff0, "ftrace_trampoline", "[__builtin__ftrace]", true},
		{"module end, next page", 0xffffffffc0202000, "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fn, mod, ok := k.Resolve(tt.addr)
			if fn != tt.fn || mod != tt.module || ok != tt.ok {
				t.Errorf("Resolve(%#x) = %q, %q, %v; want %q, %q, %v", tt.addr, fn, mod, ok, tt.fn, tt.module, tt.ok)
			}
		})
	}
}

func TestKallsymsErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want error
	}{
		{"restricted", "0000000000000000 T _text\n0000000000000000 T _stext\n", ErrNoKernelAddresses},
		{"bad address", "ffffffff8100000g T _text\n", ErrFormat},
		{"missing name", "ffffffff81000000 T\n", ErrFormat},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadKallsyms(strings.NewReader(tt.in))
			if !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
		})
	}
	if k, err := LoadKallsyms(strings.NewReader("")); err != nil || k.Len() != 0 {
		t.Errorf("empty input: %v, %v", k, err)
	}
}

// TestKallsymsReal parses the running kernel's table and resolves a few of
// its own text symbols back.
func TestKallsymsReal(t *testing.T) {
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		testutil.Missing(t, err.Error())
	}
	defer f.Close()
	k, err := LoadKallsyms(f)
	if errors.Is(err, ErrNoKernelAddresses) {
		testutil.Missing(t, "kallsyms addresses hidden; run as root or lower kernel.kptr_restrict")
	}
	if err != nil {
		t.Fatal(err)
	}
	if k.Len() < 1000 {
		t.Fatalf("only %d symbols", k.Len())
	}
	if _, err := f.Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	checked := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || (fields[1] != "T" && fields[1] != "t") {
			continue
		}
		key := "kernel"
		if len(fields) == 4 {
			key = "module"
		}
		if checked[key] || (key == "kernel" && fields[2] != "schedule") {
			continue
		}
		addr, _ := strconv.ParseUint(fields[0], 16, 64)
		fn, mod, ok := k.Resolve(addr)
		wantMod := KernelModule
		if len(fields) == 4 {
			wantMod = fields[3]
		}
		// Another symbol may share the address; the module must match
		// and the name must be one listed at that address.
		if !ok || mod != wantMod {
			t.Errorf("Resolve(%#x) = %q, %q, %v; want %s in %s", addr, fn, mod, ok, fields[2], wantMod)
		}
		checked[key] = true
	}
	if !checked["kernel"] {
		t.Error("schedule not found in /proc/kallsyms")
	}
}
