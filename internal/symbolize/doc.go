// Package symbolize resolves code addresses to function names and source
// positions at record time: ELF modules (executables and shared
// libraries), the kernel (/proc/kallsyms) and JIT-compiled code
// (/tmp/perf-PID.map and jit-PID.dump).
//
// An ELF [File] names functions from, in order of preference, .symtab and
// .dynsym (or a separate debug file found by build id or .gnu_debuglink
// under /usr/lib/debug), a Go binary's .gopclntab, and finally .eh_frame
// FDEs, which still group the addresses of a stripped library's internal
// functions: such a function is named "BASENAME+0xSTART". DWARF, loaded
// lazily per compilation unit, adds source lines and inlined frames.
// Resolve takes the file offset a PERF_RECORD_MMAP2 gives (ip - start +
// pgoff) and never returns an empty result.
//
//	f, err := symbolize.OpenFile("/usr/lib/x86_64-linux-gnu/libc.so.6")
//	if err != nil {
//		return err
//	}
//	defer f.Close()
//	frames, vaddr := f.Resolve(ip - mmap.Start + mmap.PgOff)
//	for _, fr := range frames { // innermost inlined frame first
//		fmt.Printf("%#x %s %s:%d\n", vaddr, fr.Function, fr.File, fr.Line)
//	}
//
// A File is also the one owner of a module's machine code: its function
// symbols with their sizes and aliases (Functions, FunctionAt), their code
// bytes (Code), ELF virtual address <-> file offset (FileOffset, VAddr),
// the dynamic symbols it imports, and the direct callees of a function
// (Callees, x86-64 CALL and JMP rel32), which uprobe's planner, the
// recorder's --root expansion, the hook check and the web UI's
// disassembly ask for:
//
//	for _, fn := range f.Callees(vaddr) {
//		code, err := f.Code(fn.Addr, fn.Size)
//		off, _ := f.FileOffset(fn.Addr) // where a uprobe goes
//		...
//	}
//
// For stack unwinding, CFA evaluates the .eh_frame CFI program of the
// function at a file offset and says where its canonical frame address
// is; when it is %rsp-based the return address is at rsp+Offset-8, which
// finds the caller of a function sampled without a frame (a leaf, or a
// prologue or epilogue) that a frame-pointer chain skips:
//
//	if rule, ok := f.CFA(ip - mmap.Start + mmap.PgOff); ok && rule.Register == 7 {
//		ret := readStack(rsp + uint64(rule.Offset) - 8)
//		...
//	}
//
// Kernel addresses:
//
//	kf, _ := os.Open("/proc/kallsyms")
//	k, err := symbolize.LoadKallsyms(kf) // ErrNoKernelAddresses under kptr_restrict
//	fn, module, ok := k.Resolve(ip)     // module "[kernel.kallsyms]", "[ext4]", ...
//
// JIT symbol files are written by the profiled process, so they are opened
// only if owned by its user and not through a symbolic link (ErrUntrusted
// otherwise). Both grow while the process runs; call Update before
// resolving newer samples:
//
//	m, err := symbolize.OpenPerfMap(fmt.Sprintf("/tmp/perf-%d.map", pid), uid)
//	...
//	m.Update()
//	name, start, ok := m.Resolve(ip)
//
//	j, err := symbolize.OpenJitDump(path, uid)
//	...
//	j.Update()
//	name, start, ok := j.Resolve(ip, sampleTime) // CLOCK_MONOTONIC ns
//
// All types are safe for concurrent use. Decoders of file contents return
// errors (a *DecodeError with the offset of the first problem), never
// panic, and size no allocation from a count read from a file.
package symbolize
