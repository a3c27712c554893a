// Page faults in bulk: four threads each map, touch page by page and
// unmap 50 regions of 1,000 pages, 200,000 faults in all, as fast as the
// kernel takes them. The loss test records it.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#define THREADS 4
#define REGIONS 50
#define PAGES 1000

static void *fault(void *arg) {
	long sum = 0;
	for (int r = 0; r < REGIONS; r++) {
		volatile char *p = mmap(NULL, PAGES * 4096L, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			exit(1);
		for (long i = 0; i < PAGES; i++)
			p[i * 4096] = (char)i;
		sum += p[4096];
		munmap((void *)p, PAGES * 4096L);
	}
	return (void *)sum;
}

int main(void) {
	pthread_t t[THREADS];
	for (int i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, fault, NULL);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	puts("done");
	return 0;
}
