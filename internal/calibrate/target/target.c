/* The calibration target of `trueprof calibrate`. Each argument is a
 * shape, "rounds,fanout,depth,work": cal_shape calls cal_outer `rounds`
 * times; cal_outer makes `fanout` calls, each reaching cal_leaf through a
 * chain of `depth` cal_link calls; cal_leaf spins `work` iterations. For
 * each shape the program prints the nanoseconds of its loop, timed by
 * itself (one line per shape, in order).
 *
 * The first shape calibrate passes is empty (work 0, fanout 2, depth 0):
 * every interval between two probe events inside it is (almost) nothing
 * but probe cost, and each transition kind occurs in every call of
 * cal_outer:
 *   cal_outer entry -> cal_leaf entry   entry->entry
 *   cal_leaf entry  -> cal_leaf exit    entry->exit
 *   cal_leaf exit   -> cal_leaf entry   exit->entry (inside cal_outer)
 *   cal_leaf exit   -> cal_outer exit   exit->exit
 * The other shapes do real work in the leaves, leaf-heavy (wide fanout)
 * or call-heavy (deep chains): the per-transition overheads are fitted
 * so that their calibrated times match the uninstrumented ones.
 * Built with -O1 and frame pointers; with -finstrument-functions for the
 * hook mechanism, plainly for uprobes. With -inrun first, it runs a
 * uprobe recording's in-run calibration burst (inrun below).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long work;
/* The clock the loops are timed by: wall time, or in -inrun the thread's
 * CPU time (a trap-heavy loop is preempted more often on a busy machine,
 * and descheduled time is not the probes' cost). */
static clockid_t loop_clock = CLOCK_MONOTONIC;
static volatile long sink;

/* The local array gives cal_leaf a frame, so that its first instruction
 * is push %rbp as in most frame-pointer code: the instruction a uprobe
 * is cheapest on (the kernel emulates it instead of single-stepping). */
#define FRAMED_LEAF(p)                                           \
	__attribute__((noinline)) void p##_leaf(void) {          \
		volatile char frame[16];                         \
		frame[0] = 0;                                    \
		for (long i = 0; i < work; i++)                  \
			sink += i;                               \
		__asm__ volatile("" ::"r"(frame));               \
	}

/* cal_outer makes `fanout` calls of p_leaf, each through `depth` calls
 * of p_link; cal_shape times `rounds` calls of cal_outer. */
#define SHAPE(p)                                                          \
	__attribute__((noinline)) void p##_link(long depth) {             \
		volatile char frame[16];                                  \
		frame[0] = 0;                                             \
		if (depth > 1)                                            \
			p##_link(depth - 1);                              \
		else                                                      \
			p##_leaf();                                       \
		__asm__ volatile("" ::"r"(frame));                        \
	}                                                                 \
	__attribute__((noinline)) void p##_outer(long fanout, long depth) { \
		volatile char frame[16];                                  \
		frame[0] = 0;                                             \
		for (long i = 0; i < fanout; i++) {                       \
			if (depth > 0)                                    \
				p##_link(depth);                          \
			else                                              \
				p##_leaf();                               \
		}                                                         \
		__asm__ volatile("" ::"r"(frame));                        \
	}                                                                 \
	__attribute__((noinline)) long long p##_shape(long rounds, long fanout, long depth) { \
		struct timespec a, b;                                     \
		clock_gettime(loop_clock, &a);                       \
		for (long i = 0; i < rounds; i++)                         \
			p##_outer(fanout, depth);                         \
		clock_gettime(loop_clock, &b);                       \
		return (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec); \
	}

/* cal_*: the functions trueprof calibrate probes (emulated entries,
 * return probes). */
FRAMED_LEAF(cal)
SHAPE(cal)

/* The in-run calibration's copies (-inrun): ref_* are never probed (the
 * uninstrumented loops), rins_* are probed like cal_* except that
 * rins_leaf's exits are RET-instruction probes, step_* like cal_*
 * except that step_leaf has no frame, so that its first instruction is a
 * mov the kernel single-steps, and csite_* like cal_* except that
 * csite_leaf is probed at its callers: on its calls and on the jumps
 * they return to (gcc -O1 places csite_leaf's calls in branches that
 * jump back to the loop). */
FRAMED_LEAF(ref)
SHAPE(ref)
FRAMED_LEAF(rins)
SHAPE(rins)
__attribute__((noinline, optimize("omit-frame-pointer"))) void step_leaf(void) {
	for (long i = 0; i < work; i++)
		sink += i;
}
SHAPE(step)
FRAMED_LEAF(csite)
SHAPE(csite)

/* inrun runs the shapes of an in-run calibration burst once the recorder
 * says, by a byte on standard input, that its probes are in place. Each
 * argument is "copy:rounds,fanout,depth,work", copy one of cal, ref,
 * rins, step, csite; it prints each loop's nanoseconds of CPU time. */
static int inrun(int argc, char **argv) {
	char go;
	loop_clock = CLOCK_THREAD_CPUTIME_ID;
	if (fread(&go, 1, 1, stdin) != 1)
		return 3;
	for (int s = 0; s < argc; s++) {
		char copy[8];
		long rounds, fanout, depth;
		if (sscanf(argv[s], "%7[a-z]:%ld,%ld,%ld,%ld", copy, &rounds, &fanout, &depth, &work) != 5) {
			fprintf(stderr, "shape %s: want copy:rounds,fanout,depth,work\n", argv[s]);
			return 2;
		}
		long long ns;
		if (strcmp(copy, "cal") == 0)
			ns = cal_shape(rounds, fanout, depth);
		else if (strcmp(copy, "ref") == 0)
			ns = ref_shape(rounds, fanout, depth);
		else if (strcmp(copy, "rins") == 0)
			ns = rins_shape(rounds, fanout, depth);
		else if (strcmp(copy, "step") == 0)
			ns = step_shape(rounds, fanout, depth);
		else if (strcmp(copy, "csite") == 0)
			ns = csite_shape(rounds, fanout, depth);
		else {
			fprintf(stderr, "shape %s: unknown copy %s\n", argv[s], copy);
			return 2;
		}
		printf("%lld\n", ns);
	}
	return 0;
}

int main(int argc, char **argv) {
	if (argc > 1 && strcmp(argv[1], "-inrun") == 0)
		return inrun(argc - 2, argv + 2);
	for (int s = 1; s < argc; s++) {
		long rounds, fanout, depth;
		if (sscanf(argv[s], "%ld,%ld,%ld,%ld", &rounds, &fanout, &depth, &work) != 4) {
			fprintf(stderr, "shape %s: want rounds,fanout,depth,work\n", argv[s]);
			return 2;
		}
		printf("%lld\n", cal_shape(rounds, fanout, depth));
	}
	return 0;
}
