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
 * hook mechanism, plainly for uprobes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long work;
static volatile long sink;

/* The local array gives cal_leaf a frame, so that its first instruction
 * is push %rbp as in most frame-pointer code: the instruction a uprobe
 * is cheapest on (the kernel emulates it instead of single-stepping). */
__attribute__((noinline)) void cal_leaf(void) {
	volatile char frame[16];
	frame[0] = 0;
	for (long i = 0; i < work; i++)
		sink += i;
	__asm__ volatile("" ::"r"(frame));
}

__attribute__((noinline)) void cal_link(long depth) {
	volatile char frame[16];
	frame[0] = 0;
	if (depth > 1)
		cal_link(depth - 1);
	else
		cal_leaf();
	__asm__ volatile("" ::"r"(frame));
}

__attribute__((noinline)) void cal_outer(long fanout, long depth) {
	volatile char frame[16];
	frame[0] = 0;
	for (long i = 0; i < fanout; i++) {
		if (depth > 0)
			cal_link(depth);
		else
			cal_leaf();
	}
	__asm__ volatile("" ::"r"(frame));
}

__attribute__((noinline)) long long cal_shape(long rounds, long fanout, long depth) {
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < rounds; i++)
		cal_outer(fanout, depth);
	clock_gettime(CLOCK_MONOTONIC, &b);
	return (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec);
}

int main(int argc, char **argv) {
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
