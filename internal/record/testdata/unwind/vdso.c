// The [vdso] fixture of TestUnwindVDSO: most samples fall in the vdso's
// clock_gettime, called from spin through libc, built without frame
// pointers.
#include <stdio.h>
#include <time.h>

__attribute__((noinline)) long spin(void) {
	struct timespec t;
	long s = 0;
	for (int i = 0; i < 6000000; i++) {
		clock_gettime(CLOCK_MONOTONIC, &t);
		s += t.tv_nsec;
	}
	return s;
}

int main(void) {
	printf("%ld\n", spin());
	return 0;
}
