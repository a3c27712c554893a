package uprobe

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"trueprof/internal/perf"
	"trueprof/internal/trace"
)

// Event is one probe hit.
type Event struct {
	Time     uint64 // CLOCK_MONOTONIC ns
	PID, TID uint32
	Entry    bool // an entry probe; otherwise an exit (RET probe or uretprobe)
	Site     int  // index into the sites given to Attach
	// Held says that this entry stopped the process (a site that holds:
	// Site.Hold, not yet released).
	Held bool
}

// Set is a set of attached probes and the ring their events arrive in.
// Its methods are not safe for concurrent use.
type Set struct {
	sites []Site
	ring
	// links holds the exit probes (and the pairs of an exit and an
	// entry), in the order placed, entries the plain entry probes:
	// placed after the exits and removed before them.
	links   []link.Link
	entries link.Link
	hits    [][2]uint64 // per site: entries, exits read
	live    uint64      // when every probe was in place
	// hold is, per site, 1 while its entries stop the process (Site.Hold
	// until Release); nil when no site holds.
	hold *ebpf.Map
}

// multiSpec is what one uprobe_multi link probes.
type multiSpec struct {
	offs, cookies []uint64
	ret           bool // uretprobes
}

func (m *multiSpec) add(off, cookie uint64) {
	m.offs = append(m.offs, off)
	m.cookies = append(m.cookies, cookie)
}

// Live returns the time (CLOCK_MONOTONIC ns, as Event.Time) from which
// every probe of s is in place: a call entered from then on until Detach
// has its entry and its exit delivered. Events before it may lack their
// partner: an entry its exit, or an exit its entry.
func (s *Set) Live() uint64 { return s.live }

// ring is a BPF ring buffer that a probe program writes records of a
// fixed size or more to, with a per-CPU count of the records it had no
// room for.
type ring struct {
	prog   *ebpf.Program
	events *ebpf.Map // BPF_MAP_TYPE_RINGBUF
	lost   *ebpf.Map // per-CPU count of events the ring had no room for
	rd     *ringbuf.Reader
	rec    ringbuf.Record
}

// ringSize is the size of the BPF ring all CPUs write to: 8 MiB holds
// about 190,000 events (44 bytes each on average, spreadOutput), a fifth
// of a second at the fastest rate probes can fire on this machine's two
// CPUs.
const ringSize = 8 << 20

// recordSize is the size of the record the BPF program writes: time,
// pid_tgid and cookie, each a u64.
const recordSize = 24

// The cookie of a probe is site<<2 | kind. The program sets heldBit in
// the cookie it writes for an entry that stopped the process. A
// kindPair probe is two events at one instruction, the exit of one call
// and the entry of the next (call sites: "call f; call g" returns from f
// onto the call of g), each a 30-bit site<<2 | kind, the first at bit 2
// and the second at bit 32 (pairCookie).
const (
	kindEntry = 0
	kindExit  = 1
	kindBoth  = 2 // a one-instruction function: its entry is its RET
	kindPair  = 3

	heldBit  = 1 << 62
	partMask = 1<<30 - 1
)

// pairCookie is the cookie of a kindPair probe: the event first, then
// the event second (each site<<2 | kind).
func pairCookie(first, second uint64) uint64 { return second<<32 | first<<2 | kindPair }

// ErrPermission is wrapped by Attach when the kernel refused for lack of
// privilege; the message names the capabilities.
var ErrPermission = errors.New("permission denied")

// ErrNoUprobeMulti is wrapped by Attach when the kernel lacks BPF
// uprobe_multi links (Linux 6.6) or BPF is not permitted.
var ErrNoUprobeMulti = errors.New("BPF uprobe_multi links unavailable (they need Linux 6.6 and CAP_BPF with CAP_PERFMON, or root)")

// Attach places the probes on process pid through BPF uprobe_multi links
// (RET probes, uretprobes, then entries: see Live), filtered by the kernel
// to pid's threads (existing and later ones) and writing to one BPF ring
// buffer.
//
// A process stopped in trueprof's exec wrapper before exec of path gets
// its breakpoints when exec maps path,
// because the kernel matches the process's memory map, which exec
// replaces, not a fixed one. Otherwise pid is running and the breakpoints
// are written into its current mappings of path at once. Children the
// process forks are not probed. The kernel follows the process through
// exec only if its main thread calls exec (tested: an exec from another
// thread leaves the probes on the old leader, and no event arrives), as
// for perf events opened on the process.
//
// A site with Hold set stops the process at each entry until Release:
// the BPF program sends SIGSTOP to the entering thread (the whole thread
// group stops, as for kill -STOP), writes the entry with Event.Held and
// wakes the reader at once, so that the caller can act before the
// function runs (probe what it calls) and then resume the process with
// SIGCONT. The stop is the caller's to end: the program never resumes
// anything. An entry that the ring has no room for is counted lost
// (Lost) and stops nothing.
//
// Attach fails, having placed nothing, if any probe cannot be placed.
func Attach(pid int, path string, sites []Site) (*Set, error) {
	return attach(pid, path, sites, nil)
}

// Loaded is the BPF side of a Set made ready before its probes are
// placed (Load): its ring, loss counter, hold map, with room for
// LoadedSites sites, and program. Making the ring is most of what Attach
// costs (2 of 2.5 ms for its 8 MiB here), which a caller that holds a
// process while it places probes (AttachLoaded) wants done beforehand.
type Loaded struct {
	ring
	hold *ebpf.Map
}

// LoadedSites is the number of sites a Loaded takes at most.
const LoadedSites = 1024

// Load makes the BPF side of a set, for AttachLoaded.
func Load() (*Loaded, error) {
	l := &Loaded{}
	var err error
	if l.hold, err = newHoldMap(LoadedSites); err != nil {
		return nil, err
	}
	hold := l.hold.FD()
	if err := l.load("trueprof", ringSize, func(events, lost int) asm.Instructions { return program(events, lost, hold) }); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Close frees what l holds; a Loaded given to AttachLoaded is the Set's
// and must not be closed.
func (l *Loaded) Close() error {
	var none []link.Link
	err := closeAll(&none, &l.ring)
	if l.hold != nil {
		err = errors.Join(err, l.hold.Close())
		l.hold = nil
	}
	return err
}

// AttachLoaded is Attach with the BPF side loaded beforehand (Load), for
// at most LoadedSites sites. The Set owns l from then on; on error l is
// closed.
func AttachLoaded(l *Loaded, pid int, path string, sites []Site) (*Set, error) {
	if len(sites) > LoadedSites {
		l.Close()
		return nil, fmt.Errorf("uprobe: %d sites, more than the %d a loaded set takes", len(sites), LoadedSites)
	}
	return attach(pid, path, sites, l)
}

// attach places sites' probes on pid (Attach), with the BPF side l when
// not nil, which it owns then.
func attach(pid int, path string, sites []Site, l *Loaded) (*Set, error) {
	s := &Set{sites: sites, hits: make([][2]uint64, len(sites))}
	if l != nil {
		s.ring, s.hold = l.ring, l.hold
	}
	if len(sites) == 0 {
		s.Close()
		return nil, errors.New("uprobe: no sites to attach")
	}
	if pid <= 0 {
		// pid 0 would probe every process that maps path.
		s.Close()
		return nil, fmt.Errorf("uprobe: invalid pid %d", pid)
	}
	if len(sites) > 1<<28 {
		s.Close()
		return nil, fmt.Errorf("uprobe: %d sites is too many", len(sites))
	}
	// Four links, placed exits first: a uretprobe only fires for calls
	// whose entry it saw, and an entry seen before the exits were in
	// place would open a call that never ends. With the exits first, every
	// entry delivered has its exit delivered too; exits of calls entered
	// earlier come without an entry, and readers ignore those. The
	// offsets that carry an exit and an entry (pairs: a call-site exit
	// followed by the next call) go before the plain entries, so that on
	// a live target no thread runs a call-site entry whose return point's
	// exit is not in place yet.
	var retInsns, rets, pairs, entries multiSpec
	callProbes := map[uint64][]uint64{} // sites probed at their callers: events by file offset
	var callOffs []uint64
	for i, s := range sites {
		if len(s.Calls) > 0 {
			add := func(off, ev uint64) {
				if callProbes[off] == nil {
					callOffs = append(callOffs, off)
				}
				callProbes[off] = append(callProbes[off], ev)
			}
			for _, c := range s.Calls {
				add(c.Call, uint64(i)<<2|kindEntry)
				if !c.WithCaller {
					add(c.Return, uint64(i)<<2|kindExit)
				}
			}
			continue
		}
		kind := uint64(kindEntry)
		for _, x := range s.Exits {
			if x == s.Entry {
				kind = kindBoth
				continue
			}
			retInsns.add(x, uint64(i)<<2|kindExit)
		}
		entries.add(s.Entry, uint64(i)<<2|kind)
		if s.Return {
			rets.add(s.Entry, uint64(i)<<2|kindExit)
		}
	}
	if err := placeCallProbes(callOffs, callProbes, &retInsns, &pairs, &entries); err != nil {
		s.Close()
		return nil, err
	}
	rets.ret = true
	if err := s.loadBPF(l != nil); err != nil {
		s.Close()
		return nil, err
	}
	ex, err := link.OpenExecutable(path)
	if err != nil {
		s.Close()
		return nil, err
	}
	for _, l := range []*multiSpec{&retInsns, &rets, &pairs, &entries} {
		if len(l.offs) == 0 {
			continue
		}
		opts := &link.UprobeMultiOptions{Addresses: l.offs, Cookies: l.cookies, PID: uint32(pid)}
		lk, err := attachMulti(ex, s.prog, opts, l.ret, pid, path)
		if err != nil {
			s.Close()
			return nil, err
		}
		if l == &entries {
			s.entries = lk
		} else {
			s.links = append(s.links, lk)
		}
	}
	// The kernel has registered every probe when the last link returns.
	s.live = perf.Now()
	return s, nil
}

// placeCallProbes adds the probes of the sites probed at their callers
// (Site.Calls), events by file offset in offs' order, to the links: an
// exit alone to the RET probes', an entry alone to the entries', an exit
// followed by an entry (kindPair: the exit comes first, as the return
// precedes the next call) to the pairs'. It refuses other combinations,
// and an offset another probe of the set holds: the kernel runs the
// probes of one instruction in no order a reader could rely on.
func placeCallProbes(offs []uint64, events map[uint64][]uint64, retInsns, pairs, entries *multiSpec) error {
	others := map[uint64]bool{}
	for _, m := range []*multiSpec{retInsns, pairs, entries} {
		for _, off := range m.offs {
			others[off] = true
		}
	}
	for _, off := range offs {
		ev := events[off]
		slices.SortStableFunc(ev, func(a, b uint64) int { return cmp.Compare(b&3, a&3) }) // exits first
		switch {
		case others[off]:
			return fmt.Errorf("uprobe: a call-site probe at offset %#x shares it with another probe", off)
		case len(ev) == 1 && ev[0]&3 == kindExit:
			retInsns.add(off, ev[0])
		case len(ev) == 1:
			entries.add(off, ev[0])
		case len(ev) == 2 && ev[0]&3 == kindExit && ev[1]&3 == kindEntry:
			pairs.add(off, pairCookie(ev[0], ev[1]))
		default:
			return fmt.Errorf("uprobe: %d call-site probes at offset %#x", len(ev), off)
		}
	}
	return nil
}

// loadBPF makes the BPF side of s, unless loaded beforehand: the hold
// map when a site holds, the ring and the program. Each holding site's
// entry in the hold map is set to 1.
func (s *Set) loadBPF(loaded bool) error {
	holds := slices.ContainsFunc(s.sites, func(site Site) bool { return site.Hold })
	if !loaded {
		hold := -1
		if holds {
			var err error
			if s.hold, err = newHoldMap(len(s.sites)); err != nil {
				return err
			}
			hold = s.hold.FD()
		}
		if err := s.load("trueprof", ringSize, func(events, lost int) asm.Instructions { return program(events, lost, hold) }); err != nil {
			return err
		}
	}
	if !holds {
		return nil
	}
	for i, site := range s.sites {
		if site.Hold {
			if err := s.hold.Update(uint32(i), uint32(1), ebpf.UpdateAny); err != nil {
				return fmt.Errorf("uprobe: setting the hold map: %w", err)
			}
		}
	}
	return nil
}

// newHoldMap creates a hold map of n sites, none holding.
func newHoldMap(n int) (*ebpf.Map, error) {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "trueprof_hold", Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: uint32(n)})
	if errors.Is(err, os.ErrPermission) {
		return nil, fmt.Errorf("uprobe: %w: creating a BPF map needs CAP_BPF (or root): %w", ErrPermission, err)
	}
	if err != nil {
		return nil, fmt.Errorf("uprobe: creating the hold map: %w", err)
	}
	return m, nil
}

// Release makes the entries of site stop the process no more (Site.Hold);
// releasing a site that never held does nothing. The process, if stopped,
// stays stopped: resuming it is the caller's.
func (s *Set) Release(site int) error {
	if s.hold == nil || site < 0 || site >= len(s.sites) || !s.sites[site].Hold {
		return nil
	}
	if err := s.hold.Update(uint32(site), uint32(0), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("uprobe: releasing %s: %w", s.sites[site].Function, err)
	}
	return nil
}

// attachMulti places one uprobe_multi link of prog on path for pid
// (uretprobes if ret), saying which privilege or kernel feature is
// missing when the kernel refuses.
func attachMulti(ex *link.Executable, prog *ebpf.Program, opts *link.UprobeMultiOptions, ret bool, pid int, path string) (link.Link, error) {
	var lk link.Link
	var err error
	if ret {
		lk, err = ex.UretprobeMulti(nil, prog, opts)
	} else {
		lk, err = ex.UprobeMulti(nil, prog, opts)
	}
	switch {
	case err == nil:
		return lk, nil
	case errors.Is(err, os.ErrPermission):
		return nil, fmt.Errorf("uprobe: %w: uprobes need CAP_PERFMON and CAP_BPF (or root), and ptrace access to pid %d: %w", ErrPermission, pid, err)
	case errors.Is(err, ebpf.ErrNotSupported):
		return nil, fmt.Errorf("uprobe: %w: %w", ErrNoUprobeMulti, err)
	}
	return nil, fmt.Errorf("uprobe: attaching %d probes to %s in pid %d: %w", len(opts.Addresses), path, pid, err)
}

// load creates the ring (size bytes), the loss counter and the program
// that body builds from their descriptors, named after name (at most 10
// bytes: the kernel keeps 15 of a BPF object's name).
func (r *ring) load(name string, size uint32, body func(events, lost int) asm.Instructions) error {
	if err := features.HaveBPFLinkUprobeMulti(); err != nil {
		return fmt.Errorf("uprobe: %w: %w", ErrNoUprobeMulti, err)
	}
	var err error
	r.events, err = ebpf.NewMap(&ebpf.MapSpec{Name: name + "_ring", Type: ebpf.RingBuf, MaxEntries: size})
	if errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("uprobe: %w: creating a BPF map needs CAP_BPF (or root): %w", ErrPermission, err)
	}
	if err != nil {
		return fmt.Errorf("uprobe: creating the BPF ring: %w", err)
	}
	r.lost, err = ebpf.NewMap(&ebpf.MapSpec{Name: name + "_lost", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		return fmt.Errorf("uprobe: creating the loss counter: %w", err)
	}
	r.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         name,
		Type:         ebpf.Kprobe,
		AttachType:   ebpf.AttachTraceUprobeMulti,
		Instructions: body(r.events.FD(), r.lost.FD()),
		License:      "Dual MIT/GPL",
	})
	if err != nil {
		return fmt.Errorf("uprobe: loading the BPF program: %w", err)
	}
	r.rd, err = ringbuf.NewReader(r.events)
	if err != nil {
		return fmt.Errorf("uprobe: mapping the BPF ring: %w", err)
	}
	// Read never blocks: the caller polls Fds.
	r.rd.SetDeadline(time.Unix(1, 0))
	return nil
}

// program is the BPF program every probe runs. It writes
// {bpf_ktime_get_ns(), bpf_get_current_pid_tgid(), bpf_get_attach_cookie()}
// to the ring. With a hold map (hold >= 0), an entry of a site whose
// entry in it is not 0 first stops the process (holdCheck).
func program(events, lost, hold int) asm.Instructions {
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1), // ctx
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.FnGetAttachCookie.Call(),
		asm.StoreMem(asm.RFP, -8, asm.R0, asm.DWord),
		asm.FnGetCurrentPidTgid.Call(),
		asm.StoreMem(asm.RFP, -16, asm.R0, asm.DWord),
		asm.FnKtimeGetNs.Call(), // CLOCK_MONOTONIC
		asm.StoreMem(asm.RFP, -24, asm.R0, asm.DWord),
	}
	out := spreadOutput(events, lost, ringSize)
	if hold < 0 {
		return append(insns, out...)
	}
	out[0] = out[0].WithSymbol("unheld")
	return append(append(insns, holdCheck(events, hold)...), out...)
}

// holdCheck stops the process at an entry of a site that holds: it looks
// the site up in the hold map, and when its value is not 0 writes the
// record at fp-24 with heldBit set in its cookie, waking the reader at
// once, then sends SIGSTOP to the current thread and exits. A record the
// ring has no room for is counted lost and stops nothing: no stop is left
// that the reader cannot see. Exits and sites that do not hold continue
// at "unheld", which follows. The signal is delivered when the thread
// returns to user space, after the probe, before the function's first
// instruction; bpf_send_signal_thread sends it at once in a uprobe's
// context, where interrupts are enabled.
func holdCheck(events, hold int) asm.Instructions {
	return asm.Instructions{
		asm.LoadMem(asm.R1, asm.RFP, -8, asm.DWord),
		asm.Mov.Reg(asm.R2, asm.R1),
		asm.And.Imm(asm.R2, 3),
		asm.JEq.Imm(asm.R2, kindExit, "unheld"),
		asm.JEq.Imm(asm.R2, kindPair, "pair"),
		asm.RSh.Imm(asm.R1, 2),
		asm.Ja.Label("site"),
		// A pair's entry is its second event (placeCallProbes).
		asm.RSh.Imm(asm.R1, 34).WithSymbol("pair"),
		asm.And.Imm(asm.R1, partMask>>2),
		asm.StoreMem(asm.RFP, -32, asm.R1, asm.Word).WithSymbol("site"),
		asm.LoadMapPtr(asm.R1, hold),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -32),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "unheld"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.Word),
		asm.JEq.Imm(asm.R1, 0, "unheld"),
		asm.LoadMem(asm.R1, asm.RFP, -8, asm.DWord),
		asm.LoadImm(asm.R2, heldBit, asm.DWord),
		asm.Or.Reg(asm.R1, asm.R2),
		asm.StoreMem(asm.RFP, -8, asm.R1, asm.DWord),
		asm.LoadMapPtr(asm.R1, events),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -recordSize),
		asm.Mov.Imm(asm.R3, recordSize),
		asm.Mov.Imm(asm.R4, 2), // BPF_RB_FORCE_WAKEUP
		asm.FnRingbufOutput.Call(),
		asm.JNE.Imm(asm.R0, 0, "lost"),
		asm.Mov.Imm(asm.R1, int32(syscall.SIGSTOP)),
		asm.FnSendSignalThread.Call(),
		asm.Ja.Label("exit"),
	}
}

// output ends a probe program: it writes the size bytes below the frame
// pointer to the ring (of ringBytes bytes), counts the records the ring
// had no room for, and returns 0. A program jumps to its "lost" label to
// count a hit it could not record, to "exit" to ignore one. A probe wakes the reader only when a quarter
// of the ring holds unread data; below that the reader must poll with a
// timeout (the recorder's loop does, every 100 ms). Waking on every event
// would double the cost of a hit.
func output(events, lost int, ringBytes int32, size int16) asm.Instructions {
	return append(append(wakeup(events, ringBytes, asm.R4, "output"),
		asm.LoadMapPtr(asm.R1, events).WithSymbol("output"),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -int32(size)),
		asm.Mov.Imm(asm.R3, int32(size)),
		asm.FnRingbufOutput.Call(),
		asm.JEq.Imm(asm.R0, 0, "exit"),
	), countLost(lost, -size-8)...)
}

// spreadOutput ends a probe program as output does, for the record of
// recordSize bytes below the frame pointer, but copies it lower on the
// stack and writes it with 0 to 24 bytes after it (zeros, then the
// original), as the timestamp's bits 3-4 say. A write
// costs more at the start of a 4 KiB page of the ring (in the held-out
// program of bench/accuracy, the span after one exit was 602 ns when
// its record fell in a page's first eighth, 431 in its seventh): with
// records of one size, a program whose calls write a fixed number of
// them (there 8, 16 calls a page) paid that at the same events of every
// call, which no calibration's loop reproduces. Records of varying size
// spread it over the events, as the calibration's fit averages it
// (docs/calibration.md, "Where a probe's cost falls in the ring").
// Readers take the first recordSize bytes (ring.next).
func spreadOutput(events, lost int, ringBytes int32) asm.Instructions {
	const at = -recordSize - spreadMax // where the record starts
	return append(append(wakeup(events, ringBytes, asm.R4, "output"),
		asm.LoadMem(asm.R1, asm.RFP, -24, asm.DWord).WithSymbol("output"),
		asm.StoreMem(asm.RFP, at, asm.R1, asm.DWord),
		asm.Mov.Reg(asm.R3, asm.R1),
		asm.LoadMem(asm.R1, asm.RFP, -16, asm.DWord),
		asm.StoreMem(asm.RFP, at+8, asm.R1, asm.DWord),
		asm.LoadMem(asm.R1, asm.RFP, -8, asm.DWord),
		asm.StoreMem(asm.RFP, at+16, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R1, 0),
		asm.StoreMem(asm.RFP, at+24, asm.R1, asm.DWord),
		// The size: recordSize plus 0, 8, 16 or 24 bytes (spreadMax).
		asm.And.Imm(asm.R3, spreadMax),
		asm.Add.Imm(asm.R3, recordSize),
		asm.LoadMapPtr(asm.R1, events),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, at),
		asm.FnRingbufOutput.Call(),
		asm.JEq.Imm(asm.R0, 0, "exit"),
	), countLost(lost, at-8)...)
}

// spreadMax is the most padding spreadOutput adds to a record (a mask
// of the timestamp: 0x18 takes its bits 3 and 4).
const spreadMax = 0x18

// wakeup sets flags to the ring output flag that wakes the reader only
// when a quarter of the ring (of ringBytes) holds unread data, then
// continues at next, which must follow.
func wakeup(events int, ringBytes int32, flags asm.Register, next string) asm.Instructions {
	return asm.Instructions{
		asm.LoadMapPtr(asm.R1, events),
		asm.Mov.Imm(asm.R2, 0), // BPF_RB_AVAIL_DATA
		asm.FnRingbufQuery.Call(),
		asm.Mov.Imm(flags, 1), // BPF_RB_NO_WAKEUP
		asm.JLT.Imm(asm.R0, ringBytes/4, next),
		asm.Mov.Imm(flags, 2), // BPF_RB_FORCE_WAKEUP
	}
}

// countLost ends a probe program: its "lost" label adds one to the loss
// counter (using the stack slot at fp+key as the counter's key), then
// its "exit" label returns 0.
func countLost(lost int, key int16) asm.Instructions {
	return asm.Instructions{
		asm.StoreImm(asm.RFP, key, 0, asm.Word).WithSymbol("lost"),
		asm.LoadMapPtr(asm.R1, lost),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, int32(key)),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "exit"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),

		asm.Mov.Imm(asm.R0, 0).WithSymbol("exit"),
		asm.Return(),
	}
}

// Fds returns the descriptors to poll for readiness: the BPF ring. It
// becomes readable when the ring is a quarter full; poll with a timeout to
// read smaller amounts.
func (r *ring) Fds() []int { return []int{r.events.FD()} }

// Read drains the events available now, calling fn for each, and returns
// their number. A thread's events come in the order it hit the probes;
// the events of threads running on different CPUs interleave with at most
// a few microseconds of disorder in Time.
func (s *Set) Read(fn func(Event)) int {
	return s.each(recordSize, func(time uint64, pid, tid uint32, cookie uint64) int {
		held := cookie&heldBit != 0
		cookie &^= heldBit
		if cookie&3 == kindPair {
			// The pair's second event is its entry, which held.
			return s.deliver(Event{Time: time, PID: pid, TID: tid}, cookie>>2&partMask, fn) +
				s.deliver(Event{Time: time, PID: pid, TID: tid, Held: held}, cookie>>32&partMask, fn)
		}
		return s.deliver(Event{Time: time, PID: pid, TID: tid, Held: held}, cookie, fn)
	})
}

// deliver passes ev, the event of cookie (site<<2 | kind, not a pair),
// to fn, two events for kindBoth, and returns their number.
func (s *Set) deliver(ev Event, cookie uint64, fn func(Event)) int {
	ev.Site = int(cookie >> 2)
	if ev.Site >= len(s.sites) {
		return 0
	}
	h := &s.hits[ev.Site]
	switch cookie & 3 {
	case kindEntry:
		ev.Entry = true
		fn(ev)
		h[0]++
		return 1
	case kindExit:
		fn(ev)
		h[1]++
		return 1
	case kindBoth:
		ev.Entry = true
		fn(ev)
		ev.Entry = false
		fn(ev)
		h[0]++
		h[1]++
		return 2
	}
	return 0
}

// each drains the records available now, of size bytes that begin with
// {time, pid_tgid, value} u64s, and returns the sum of what fn returns.
func (r *ring) each(size int, fn func(time uint64, pid, tid uint32, value uint64) int) int {
	n := 0
	for {
		b, ok := r.next(size)
		if !ok {
			return n
		}
		pidTgid := binary.NativeEndian.Uint64(b[8:])
		n += fn(binary.NativeEndian.Uint64(b), uint32(pidTgid>>32), uint32(pidTgid), binary.NativeEndian.Uint64(b[16:]))
	}
}

// next returns the next record of at least size bytes, or false when
// none is left. The bytes are valid until the next call.
func (r *ring) next(size int) ([]byte, bool) {
	for {
		if err := r.rd.ReadInto(&r.rec); err != nil {
			// os.ErrDeadlineExceeded: nothing left.
			return nil, false
		}
		if len(r.rec.RawSample) >= size {
			return r.rec.RawSample, true
		}
	}
}

// Lost returns the number of events the kernel could not deliver because
// the ring was full.
func (r *ring) Lost() uint64 {
	var perCPU []uint64
	if r.lost == nil || r.lost.Lookup(uint32(0), &perCPU) != nil {
		return 0
	}
	var n uint64
	for _, v := range perCPU {
		n += v
	}
	return n
}

// Detach removes every probe, the entry probes first, so that no entry
// is written whose exit probe is already gone. The events written stay
// readable until Close. A second call does nothing.
func (s *Set) Detach() error {
	var err error
	if s.entries != nil {
		err = s.entries.Close()
		s.entries = nil
	}
	return errors.Join(err, closeLinks(&s.links))
}

// closeLinks closes links, the last placed first, and forgets them.
func closeLinks(links *[]link.Link) error {
	var errs []error
	for _, l := range slices.Backward(*links) {
		errs = append(errs, l.Close())
	}
	*links = nil
	return errors.Join(errs...)
}

// Close removes every probe, then frees the ring. Events not yet read are
// discarded. The process continues unharmed.
func (s *Set) Close() error {
	err := errors.Join(s.Detach(), closeAll(&s.links, &s.ring))
	if s.hold != nil {
		err = errors.Join(err, s.hold.Close())
		s.hold = nil
	}
	return err
}

// closeAll closes the links, then the ring and its program.
func closeAll(links *[]link.Link, r *ring) error {
	errs := []error{closeLinks(links)}
	if r.rd != nil {
		errs = append(errs, r.rd.Close())
		r.rd = nil
	}
	if r.prog != nil {
		errs = append(errs, r.prog.Close())
	}
	for _, m := range []*ebpf.Map{r.events, r.lost} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	r.prog, r.events, r.lost = nil, nil, nil
	return errors.Join(errs...)
}

// Hits returns the number of entry and exit events of each site (indexed
// like the sites given to Attach) that Read has delivered so far.
func (s *Set) Hits() [][2]uint64 { return slices.Clone(s.hits) }

// Offsets returns the file offsets s probes, every site's entries and
// exits, for Options.Taken: a set planned later for the same module
// places no call-site probe on one.
func (s *Set) Offsets() []uint64 {
	var offs []uint64
	for _, site := range s.sites {
		offs = append(offs, site.Entry)
		offs = append(offs, site.Exits...)
		for _, c := range site.Calls {
			offs = append(offs, c.Call)
			if !c.WithCaller {
				offs = append(offs, c.Return)
			}
		}
	}
	return offs
}

// Hot is a site whose probes cost the probed process a noticeable share
// of its time.
type Hot struct {
	Site     int
	Function string
	Hits     uint64        // entry and exit events
	Cost     time.Duration // estimated time spent in the probes
	Share    float64       // Cost over the elapsed time
	Stepped  bool          // the entry or the exit probes are single-stepped
}

// String describes the warning for a user.
func (h Hot) String() string {
	msg := fmt.Sprintf("probes on %s: %d hits cost about %v (%.0f%% of the time)",
		h.Function, h.Hits, h.Cost.Round(time.Millisecond), 100*h.Share)
	if h.Stepped {
		msg += "; the kernel single-steps its probed instructions, about 10 times the cost of an emulated one"
	}
	return msg + "; consider probing its callers instead"
}

// Hot returns the sites whose events read so far cost more than share
// (0.05 for 5%) of elapsed, costliest first. A hit costs what its site's
// class costs per c (the numbers calibrated reports subtract): an entry
// on an emulated or a single-stepped instruction, an exit through a
// return probe, a RET-instruction probe or where a call returns. It
// returns nil if elapsed is not positive.
func (s *Set) Hot(c trace.SiteCosts, elapsed time.Duration, share float64) []Hot {
	if elapsed <= 0 {
		return nil
	}
	var hot []Hot
	for i, h := range s.hits {
		site := s.sites[i]
		entry, exit := c.EntryStepped, c.ExitReturn
		if site.Emulated {
			entry = c.EntryEmulated
		}
		switch {
		case len(site.Calls) > 0 && c.ExitCallSite > 0:
			exit = c.ExitCallSite
		case len(site.Calls) > 0:
			exit = c.EntryEmulated // not measured: an emulated hit
		case !site.Return:
			exit = c.ExitRetInsn
		}
		cost := time.Duration(float64(h[0])*entry + float64(h[1])*exit)
		if sh := float64(cost) / float64(elapsed); sh > share {
			hot = append(hot, Hot{Site: i, Function: site.Function, Hits: h[0] + h[1], Cost: cost, Share: sh,
				Stepped: !site.Emulated || len(site.Exits) > 0})
		}
	}
	slices.SortFunc(hot, func(a, b Hot) int { return cmp.Compare(b.Cost, a.Cost) })
	return hot
}
