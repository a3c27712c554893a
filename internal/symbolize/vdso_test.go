package symbolize

import "testing"

// TestOpenVDSO reads the test's own [vdso]: it names clock_gettime and
// has a CFI row there.
func TestOpenVDSO(t *testing.T) {
	f, err := OpenVDSO()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.elf.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range syms {
		if s.Name != "__vdso_clock_gettime" {
			continue
		}
		off := s.Value // the image is mapped from offset 0 at vaddr 0
		if fr, _ := f.Resolve(off); len(fr) == 0 || fr[len(fr)-1].Function != "__vdso_clock_gettime" && fr[len(fr)-1].Function != "clock_gettime" {
			t.Errorf("Resolve(%#x) = %+v", off, fr)
		}
		row, err := f.UnwindRow(off)
		if err != nil || row.CFA.Kind != RuleRegOffset || row.CFA.Offset != 8 {
			t.Errorf("UnwindRow at entry = %+v, %v; want CFA rsp+8", row, err)
		}
		return
	}
	t.Fatalf("no __vdso_clock_gettime among %d symbols", len(syms))
}
