// Package hook records function entries and exits of C and C++ programs
// built with -finstrument-functions, through trueprof's own hook library
// preloaded into the target.
//
// Such programs call __cyg_profile_func_enter(this_fn, call_site) and
// __cyg_profile_func_exit on every call; glibc's versions do nothing. The
// library (lib/hook.c, embedded and compiled on first use by Library)
// defines both, and LD_PRELOAD puts it ahead of glibc. Each hook writes
// one 16-byte record into its thread's ring in shared memory: no lock and
// no system call. A call (entry and exit) costs about 25 ns on the 2-core
// KVM guest this was written on, against 85 ns under uftrace record
// (go run ./bench/hooks measures both).
//
// # Usage
//
//	if ok, err := hook.Instrumented(path); err != nil || !ok { ... }
//	r, err := hook.NewRegion(hook.Options{})
//	cmd.ExtraFiles = []*os.File{r.File()}        // fd 3 in the target
//	cmd.Env = append(os.Environ(), r.Env(3)...)
//	cmd.Start()
//	for running { r.Drain(handle); sleep(1 * time.Millisecond) }
//	// or, decoding on another goroutine: b := hook.NewBatch(1 << 14)
//	// r.DrainBatch(b, false); ... dec.Decode(b, handle)
//	cmd.Wait()
//	r.Flush(handle)
//	r.Close()
//
// # The region
//
// NewRegion creates a memfd (sealed against resizing, so the target
// cannot fault the recorder's mapping) laid out as a header page, an
// array of slots and one ring per slot:
//
//   - header (struct tp_header): magic, version, a random id the target
//     must match (TRUEPROF_HOOK_ID), geometry, the clock, the bound on
//     waiting, and a counter of events dropped by threads without a slot;
//   - slot (struct tp_slot, 192 bytes): state, pid and tid of the owner,
//     its pending drop counts, and the ring's head (written by the thread)
//     and tail (written by the recorder) on separate cache lines;
//   - ring: Options.Events records of 16 bytes: the time, and a word
//     with the kind in its top byte over a 56-bit payload: this_fn for an
//     entry or exit, the clock units waited for a wait, the count for a
//     drop. An adjust is a wait record, a drop record or both. The call
//     site is not recorded (a call is named by its function; its caller
//     is the function entered before it).
//
// Rings are single-producer, single-consumer: the thread writes records
// and publishes head with a release store; DrainBatch reads up to head
// with an acquire load, copies the records as they are into a Batch (a
// memmove: 16 bytes a record keeps up with the hooks) and hands the space
// back by storing tail at once. A Decoder turns batches into events
// (converting the clock, keeping each thread's times monotonic), later
// and on another goroutine if need be: the recorder's drainer only
// copies. Drain does both in one call. Every ring is read, oldest first
// per thread.
//
// # Threads, fork and exec
//
// A thread claims a free slot with a compare-and-swap on its first event
// and records its pid and tid there. A pthread key destructor marks the
// slot dead when the thread exits; Drain frees a dead slot once drained,
// so hundreds of short threads share a few slots. Threads that end
// without the destructor (the main thread calling exit, exec, a fatal
// signal) are found by Drain: every 100 ms it checks with tgkill(pid,
// tid, 0) the owned slots that went quiet; Flush, the final drain, checks
// all of them. The pid namespace is assumed to be the recorder's.
//
// A pthread_atfork child handler drops the forking thread's slot in the
// child, which claims a new slot with its own pid on its next event. The
// memfd and the environment survive exec: the new image maps the region
// again (after checking magic and id with pread, in case the descriptor
// number now names something else) and a thread that finds an owned slot
// with its own pid and tid adopts it, so its records stay in order across
// the exec. Programs that close inherited descriptors or clear the
// environment before exec stop recording in the new image; setuid
// programs ignore LD_PRELOAD.
//
// # Full rings and drops
//
// The fast path keeps one record free. When a ring is full the thread
// waits for the recorder (spinning, then yielding, then sleeping 50 µs at
// a time) and writes, after its event, an adjust record with the time it
// waited: the analysis subtracts it from the calls open at that point.
// After Options.MaxWait it drops events instead and counts them in its
// slot; when space returns it first writes an adjust with the count and
// the time waited (a drop and a wait record), timed at the first drop.
// Counts a thread could not write before it ended are reported by Drain
// when it frees the slot.
// When no slot is free a new thread likewise waits, then drops and counts
// in the header (Drain reports those as an adjust with PID and TID 0),
// retrying for a slot every 4096 events. An event that interrupts the
// same thread's hook (a signal handler built with -finstrument-functions)
// is dropped and counted, since the interrupted record is half written.
// Nothing is lost silently: entries + exits + dropped equals the calls
// made (TestFullRingDrops).
//
// A thread maps its ring's pages ahead of its writes in growing chunks;
// an event whose slow path did so is followed by an adjust with the time
// it took, which the uninstrumented program would not have spent
// (TestPopulateAdjust).
//
// # Time
//
// Records carry CLOCK_MONOTONIC nanoseconds, the clock of trueprof's perf
// records. A vDSO clock_gettime costs about 28 ns here, rdtsc about 14,
// and two are needed per call, so where the kernel itself keeps time with
// the TSC (clocksource "tsc", with constant_tsc and nonstop_tsc: the
// kernel checked that it is synchronized across CPUs) the records carry
// raw TSC values and Drain converts them: the recorder reads
// (TSC, CLOCK_MONOTONIC) pairs every 10 ms and interpolates linearly
// between them. Over a minute this stays within 50 ns of CLOCK_MONOTONIC,
// where a single calibration drifts by microseconds (TestClockConversion
// with TRUEPROF_CLOCK_TEST_SECONDS=60). Elsewhere, and with
// Options.Monotonic, the library calls clock_gettime. The Decoder also
// never lets a thread's times go backwards.
//
// # The library
//
// lib/hook.c is built with -O2 -fPIC -shared -fvisibility=hidden
// -ftls-model=initial-exec and exports only the two hooks; every function
// in it is no_instrument_function. Its per-thread state is initial-exec
// TLS, so the fast path is a few loads and stores. It maps ring pages
// ahead of the writer with MADV_POPULATE_WRITE, in growing chunks, rather
// than taking a page fault every 128 records on a ring's first pass.
package hook
