/*
 * In-run calibration bursts (docs/calibration.md, "In-run calibration").
 * Compiled after hook.c, in the same library; nothing here is on the
 * hooks' path.
 *
 * When the recorder sets TRUEPROF_HOOK_CALIBRATE=1, each process image
 * runs a short burst when the library is loaded and, unless it exits
 * within a second of a steady first one, another when it exits: the
 * validation shapes of internal/calibrate, once on functions
 * that call the hooks as -finstrument-functions code does (through the
 * PLT, into the same rings, on the same CPU at the same frequency as the
 * recorded program) and once on plain copies of the same functions. The
 * recorder recognises the instrumented functions by their names
 * (trueprof_cal_*), keeps their events out of the profile and fits the
 * per-transition overheads from them (package calfit):
 *   trueprof_cal_burst          one burst; the recorder removes its time
 *                               from the thread as a profiler pause
 *   trueprof_cal_shape_NAME     a shape's loop, recorded with probes
 *   trueprof_cal_ref_NAME       the same loop on the plain functions: its
 *                               entry->exit interval is the uninstrumented
 *                               time
 *   trueprof_cal_outer/link/leaf  the instrumented calls of the loops
 * The empty shape (no work) gives the intervals whose medians split each
 * fitted pair of transition kinds.
 */

#include <elf.h>
#include <link.h>
#include <string.h>

#define CAL_FN __attribute__((noinline, used)) NOINST

static long cal_work;
static volatile long cal_sink;

/* trueprof_cal_spin is the leaves' work, one function for both copies
 * and a chain of register arithmetic: about 2 cycles an iteration, with
 * no memory in it. Two things made the plain leaf faster than the
 * recorded one, which the fit could only read as a bad shape (leaf-heavy
 * +3.4%, long +5..+10% in most recordings): a loop inlined in each copy
 * runs at a speed that depends on its alignment, and a loop of volatile
 * stores (cal_sink += i) delays the hook's own stores after it, 106 TSC
 * ticks a hook call after it against 25 after a register loop here. */
CAL_FN __attribute__((aligned(64))) void trueprof_cal_spin(void)
{
	long x = 0;
	for (long i = 0; i < cal_work; i++) {
		x = x * 3 + i;
		__asm__ volatile("" : "+r"(x));
	}
	cal_sink = x;
}

/* CAL_FUNCS defines the loop functions once with hook calls (ENTER,
 * LEAVE) and once without. The local array gives each a frame, so its
 * first instruction is push %rbp as in most frame-pointer code. */
#define CAL_FUNCS(P, ENTER, LEAVE)                                             \
	CAL_FN void P##leaf(void)                                              \
	{                                                                      \
		ENTER(P##leaf);                                                \
		volatile char frame[16];                                       \
		frame[0] = 0;                                                  \
		trueprof_cal_spin();                                           \
		__asm__ volatile("" ::"r"(frame));                             \
		LEAVE(P##leaf);                                                \
	}                                                                      \
	CAL_FN void P##link(long depth)                                        \
	{                                                                      \
		ENTER(P##link);                                                \
		volatile char frame[16];                                       \
		frame[0] = 0;                                                  \
		if (depth > 1)                                                 \
			P##link(depth - 1);                                    \
		else                                                           \
			P##leaf();                                             \
		__asm__ volatile("" ::"r"(frame));                             \
		LEAVE(P##link);                                                \
	}                                                                      \
	CAL_FN void P##outer(long fanout, long depth)                          \
	{                                                                      \
		ENTER(P##outer);                                               \
		volatile char frame[16];                                       \
		frame[0] = 0;                                                  \
		for (long i = 0; i < fanout; i++) {                            \
			if (depth > 0)                                         \
				P##link(depth);                                \
			else                                                   \
				P##leaf();                                     \
		}                                                              \
		__asm__ volatile("" ::"r"(frame));                             \
		LEAVE(P##outer);                                               \
	}

/* What -finstrument-functions emits: the hooks with the function and its
 * call site. */
#define CAL_ENTER(f) __cyg_profile_func_enter((void *)(f), __builtin_return_address(0))
#define CAL_LEAVE(f) __cyg_profile_func_exit((void *)(f), __builtin_return_address(0))
#define CAL_NONE(f) ((void)0)

CAL_FUNCS(trueprof_cal_, CAL_ENTER, CAL_LEAVE)
CAL_FUNCS(trueprof_calp_, CAL_NONE, CAL_NONE)

/* CAL_SHAPE defines a validation shape's recorded loop and its plain
 * reference: rounds calls of outer, fanout calls each, chains of depth
 * links, leaves of work iterations (about 0.7 ns each). The shapes are
 * internal/calibrate's validation shapes at about a fiftieth of their
 * rounds (loops of 17-25 us): a burst of 8-12 repetitions takes 1.6-2.8
 * ms, one of 32 about 6 ms. */
#define CAL_SHAPE(NAME, ROUNDS, FANOUT, DEPTH, WORK)                           \
	CAL_FN void trueprof_cal_shape_##NAME(void)                            \
	{                                                                      \
		CAL_ENTER(trueprof_cal_shape_##NAME);                          \
		cal_work = WORK;                                               \
		for (long i = 0; i < ROUNDS; i++)                              \
			trueprof_cal_outer(FANOUT, DEPTH);                     \
		CAL_LEAVE(trueprof_cal_shape_##NAME);                          \
	}                                                                      \
	CAL_FN void trueprof_cal_ref_##NAME(void)                              \
	{                                                                      \
		CAL_ENTER(trueprof_cal_ref_##NAME);                            \
		cal_work = WORK;                                               \
		for (long i = 0; i < ROUNDS; i++)                              \
			trueprof_calp_outer(FANOUT, DEPTH);                    \
		CAL_LEAVE(trueprof_cal_ref_##NAME);                            \
	}

CAL_SHAPE(empty, 2000, 2, 0, 0)
CAL_SHAPE(leaf_heavy, 3, 8, 0, 1200)
CAL_SHAPE(call_heavy, 125, 1, 8, 120)
CAL_SHAPE(mixed, 20, 3, 2, 360)
CAL_SHAPE(long, 1, 2, 0, 12000)

/* A burst runs each shape's loop, plain and recorded alternately, at
 * least cal_min_reps and at most cal_max_reps times; the recorder keeps,
 * of each kind, the median of the runs within 5% of the fastest
 * (calfit.FastShape). Short loops many times rather than longer ones a
 * few times: on a busy machine short windows at full speed and without
 * preemption are common, long ones rare. With two busy loops beside the
 * recording, 8 loops of 70-100 us left a kind without a single
 * full-speed run in 3 of 15 recordings, 32 of 17-25 us in none of 15.
 * A burst stops early once every kind has cal_fast runs within that 5%
 * (cal_steady), as it has after cal_min_reps on a quiet machine: the 32
 * repetitions were a third of a short recording's whole command (each
 * burst 6-10 ms of the target and 106,000 events for the recorder). */
enum { cal_min_reps = 8, cal_max_reps = 32, cal_fast = 6 };

/* cal_loops are the burst's loops in their order, each plain reference
 * before its recorded shape. */
enum { cal_kinds = 8 };
static void (*const cal_loops[cal_kinds])(void) = {
	trueprof_cal_ref_leaf_heavy, trueprof_cal_shape_leaf_heavy,
	trueprof_cal_ref_call_heavy, trueprof_cal_shape_call_heavy,
	trueprof_cal_ref_mixed,      trueprof_cal_shape_mixed,
	trueprof_cal_ref_long,       trueprof_cal_shape_long,
};

/* cal_steady reports whether each kind's first reps loop times t hold
 * cal_fast within 5% of the kind's fastest: the statistic the recorder
 * takes has enough full-speed runs. */
static NOINST int cal_steady(uint64_t t[cal_kinds][cal_max_reps], int reps)
{
	for (int k = 0; k < cal_kinds; k++) {
		uint64_t fastest = t[k][0];
		for (int r = 1; r < reps; r++)
			if (t[k][r] < fastest)
				fastest = t[k][r];
		int fast = 0;
		for (int r = 0; r < reps; r++)
			fast += t[k][r] * 100 <= fastest * 105;
		if (fast < cal_fast)
			return 0;
	}
	return 1;
}

/* trueprof_cal_burst runs one burst and reports whether it was steady
 * (stopped before cal_max_reps). A loop's time leaves out what the hooks
 * paused its thread for (waits for ring space, mapping ring pages: their
 * wait records), as the recorder's runs do (calfit.Collector subtracts
 * the adjusts): timed with them, the recorded call-heavy loop, which
 * writes 2,500 events, was slow whenever it crossed the ring's populated
 * frontier or waited for the drainer, and a burst on bench/percall's
 * default load needed 17.1 repetitions a recording, 3 of 20 recordings
 * two bursts of 32 or more, against 10.9 and none without them
 * (interleaved). */
CAL_FN int trueprof_cal_burst(void)
{
	uint64_t t[cal_kinds][cal_max_reps];
	int steady = 0;
	CAL_ENTER(trueprof_cal_burst);
	trueprof_cal_shape_empty();
	for (int r = 0; r < cal_max_reps && !steady; r++) {
		for (int k = 0; k < cal_kinds; k++) {
			uint64_t t0 = now(), p0 = T.paused;
			cal_loops[k]();
			t[k][r] = now() - t0 - (T.paused - p0);
		}
		steady = r + 1 >= cal_min_reps && cal_steady(t, r + 1);
	}
	CAL_LEAVE(trueprof_cal_burst);
	return steady;
}

/* cal_imports_hooks (a dl_iterate_phdr callback) sets *found when the
 * first object, the program, names __cyg_profile_func_enter in its
 * dynamic string table: it was built with -finstrument-functions. */
static NOINST int cal_imports_hooks(struct dl_phdr_info *info, size_t size, void *found)
{
	(void)size;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		if (info->dlpi_phdr[i].p_type != PT_DYNAMIC)
			continue;
		const ElfW(Dyn) *d = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
		const char *str = 0;
		size_t n = 0;
		for (; d->d_tag != DT_NULL; d++) {
			if (d->d_tag == DT_STRTAB)
				str = (const char *)d->d_un.d_ptr; /* relocated by ld.so */
			else if (d->d_tag == DT_STRSZ)
				n = d->d_un.d_val;
		}
		static const char name[] = "__cyg_profile_func_enter";
		if (str && memmem(str, n, name, sizeof name) != 0)
			*(int *)found = 1;
	}
	return 1; /* the program is the first object: stop there */
}

/* cal_wanted: the recorder asked for bursts, this image attached to its
 * region, and the program calls the hooks. Processes the target starts
 * that are not instrumented (a shell, trueprof's own launcher before it
 * execs the target) run none. */
static NOINST int cal_wanted(void)
{
	const char *v = getenv("TRUEPROF_HOOK_CALIBRATE");
	if (!v || v[0] != '1' || v[1] != 0)
		return 0;
	int found = 0;
	dl_iterate_phdr(cal_imports_hooks, &found);
	return found && init();
}

/* cal_end_after: a process that exits this long (ns) after a steady
 * start burst runs the end burst too; one that exits sooner, the common
 * short run, ran under the conditions the start burst measured and runs
 * none (the Calibration record says how many bursts were fitted). A
 * start burst that was not steady always gets its end burst. */
static const uint64_t cal_end_after = 1000000000;

/* cal_start_end is when the start burst ended (CLOCK_MONOTONIC ns), 0
 * when it was not steady. A forked child inherits it: its exit within
 * cal_end_after of its parent's start burst runs none either. */
static uint64_t cal_start_end;

/* cal_now is CLOCK_MONOTONIC in ns, whichever clock the hooks use. */
static NOINST uint64_t cal_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static NOINST __attribute__((constructor)) void cal_at_start(void)
{
	if (cal_wanted() && trueprof_cal_burst())
		cal_start_end = cal_now();
}

static NOINST __attribute__((destructor)) void cal_at_end(void)
{
	if (cal_start_end != 0 && cal_now() - cal_start_end < cal_end_after)
		return;
	if (cal_wanted())
		trueprof_cal_burst();
}
