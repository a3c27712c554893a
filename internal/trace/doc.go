// Package trace reads and writes trueprof trace files.
//
// A trace is a self-describing header (magic, version, and a Header as
// checksummed JSON) followed by chunks. Each chunk holds up to a few MiB
// of records, is zstd-compressed and CRC-32C checksummed, and decodes on
// its own, so a file cut at any byte — a recorder killed with SIGKILL,
// a full disk — reads back up to its last complete chunk; a damaged
// chunk is skipped, the intact ones after it read, and the damage
// reported with the byte offset of the chunk it hit (DamageError). Records follow the
// classic trace record layout (docs/architecture.md): a major code (what it is), a minor
// code (a subtype or flags), a length and a timestamp, here as varints
// delta-encoded within the chunk, so a sample takes about ten bytes
// before compression. docs/trace-format.md describes the format byte by
// byte.
//
// Strings are interned (String records, Writer.Intern) and call stacks
// are stored once, as a shared-prefix tree of StackNode records, so a
// Sample names its stack by one small integer.
//
// Writing:
//
//	w, err := trace.NewWriter(f, &trace.Header{Event: "cpu-clock"}, trace.Options{Mode: trace.ModeNormal, SizeLimit: 1 << 30})
//	if err != nil { ... }
//	name, err := w.Intern("main")
//	err = w.Write(&trace.Comm{Time: t, PID: pid, TID: pid, Name: name})
//	err = w.Write(&trace.Sample{Time: t, PID: pid, TID: pid, Stack: leaf})
//	if errors.Is(err, trace.ErrSizeLimit) { /* stop sampling, write a Lost record */ }
//	// every second: w.Flush()
//	err = w.Write(&trace.End{Time: t, ExitCode: -1})
//	err = w.Close() // does not close f
//
// Reading:
//
//	r, err := trace.NewReader(f)
//	if err != nil { ... } // a *FormatError
//	for {
//		rec, err := r.Next()
//		if err == io.EOF {
//			break
//		}
//		if err != nil {
//			// A *FormatError (errors.Is(err, trace.ErrTruncated) for a
//			// cut file), or a *DamageError after skipped damaged
//			// chunks. Records read so far are intact.
//			break
//		}
//		switch rec := rec.(type) {
//		case *trace.Sample:
//			...
//		}
//	}
package trace
