package uprobe

import (
	"fmt"
)

// SiteClass is how the kernel handles a probe site, which sets what a hit
// costs: an entry probe on an instruction it emulates or single-steps out
// of line, and an exit through a return probe's trampoline or a uprobe on
// each RET instruction (single-stepped).
type SiteClass struct {
	Stepped bool // the entry instruction is single-stepped
	RetInsn bool // the exits are RET-instruction probes, not a return probe
	// CallSite: probed at its callers (Site.Calls), each call's return
	// point an emulated instruction.
	CallSite bool
}

// ClassSite plans the probe site of the function name of the ELF file at
// path as a site of class c, for calibration: the entry probe on the
// function's first instruction, which must be one the kernel emulates
// unless c.Stepped (and one it steps if c.Stepped), and the exit through a
// return probe or, with c.RetInsn, on every instruction the function
// leaves by; with c.CallSite, at its call instructions and the emulated
// instructions they return to, whatever its first instruction. It fails
// if the function's code does not give that class, so that a calibration
// never measures one class under another's name.
func ClassSite(path, name string, c SiteClass) (Site, error) {
	f, err := openX86(path)
	if err != nil {
		return Site{}, err
	}
	defer f.Close()
	for _, fn := range f.Functions() {
		if fn.Name != name {
			continue
		}
		code, err := f.Code(fn.Addr, fn.Size)
		if err != nil {
			return Site{}, err
		}
		ins, err := decodeFunc(code)
		if err != nil {
			return Site{}, fmt.Errorf("%s: %s: %w", path, name, err)
		}
		off, _ := f.FileOffset(fn.Addr)
		if c.CallSite {
			none := func(uint64) bool { return false }
			calls, ok := cachedIndex(f, path).callSites(f, fn.Addr, none, nil)
			if !ok {
				return Site{}, fmt.Errorf("%s: %s: not every call of it returns to an emulated instruction", path, name)
			}
			return Site{Function: name, Start: fn.Addr, StartOffset: off, Entry: off, Emulated: true, Calls: calls}, nil
		}
		if len(ins) == 0 || emulated(ins[0].raw) == c.Stepped {
			return Site{}, fmt.Errorf("%s: %s: its first instruction is not of class %+v", path, name, c)
		}
		s := Site{Function: name, Start: fn.Addr, StartOffset: off, Entry: off, Emulated: !c.Stepped, Return: !c.RetInsn}
		if c.RetInsn {
			for _, x := range exitInsns(ins, within(len(code))) {
				s.Exits = append(s.Exits, off+uint64(x))
			}
			if len(s.Exits) == 0 {
				return Site{}, fmt.Errorf("%s: %s: no RET instruction", path, name)
			}
		}
		return s, nil
	}
	return Site{}, fmt.Errorf("%s: %w %q", path, ErrNoMatch, name)
}
