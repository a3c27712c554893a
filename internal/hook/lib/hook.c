/*
 * trueprof's hook library: interposes the -finstrument-functions hooks
 * __cyg_profile_func_enter and __cyg_profile_func_exit and writes one
 * 16-byte record per event into a per-thread single-producer ring in the
 * shared memory the recorder created (package trueprof/internal/hook,
 * doc.go describes the protocol and region.go the layout this file
 * mirrors).
 *
 * The recorder passes the memfd down as TRUEPROF_HOOK_FD and checks that
 * it is its own region with TRUEPROF_HOOK_ID. Both survive fork and exec,
 * so every process of the target attaches lazily on its first event.
 *
 * Nothing in here may be instrumented itself (the hooks would recurse):
 * every function is no_instrument_function and the library is built
 * without -finstrument-functions. The fast path takes no lock and makes no
 * system call; only a thread's first event, a full ring and thread exit
 * do.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#define NOINST __attribute__((no_instrument_function))
#define EXPORT __attribute__((visibility("default")))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define barrier() __asm__ volatile("" ::: "memory")

#define TP_MAGIC 0x314b4f4f48505254ull /* "TRPHOOK1" little endian */
#define TP_VERSION 2

enum { ST_FREE = 0, ST_OWNED = 1, ST_DEAD = 2 };
/* Record kinds, in a record's top byte (rec_word). */
enum { K_ENTRY = 1, K_EXIT = 2, K_WAIT = 3, K_DROP = 4 };
#define K_SHIFT 56
#define PAYLOAD_MASK ((1ull << K_SHIFT) - 1)
enum { CLK_MONO = 0, CLK_TSC = 1 };

/* Mirrors header in region.go. */
struct tp_header {
	uint64_t magic;
	uint32_t version;
	uint32_t clock;
	uint64_t id;
	uint32_t nslots;
	uint32_t nevents;
	uint64_t slot_off;
	uint64_t ring_off;
	uint64_t size;
	uint64_t max_wait;       /* in clock units */
	uint64_t noslot_dropped; /* events of threads that found no slot */
};

/* Mirrors slot in region.go: owner fields, head and tail on separate
 * cache lines so the producer and the recorder do not share one. */
struct tp_slot {
	uint32_t state, pid, tid, pad;
	uint64_t pend_dropped; /* dropped, not yet reported in the ring */
	uint64_t pend_wait;    /* clock units waited before those drops */
	uint64_t pend_since;   /* clock value of the first of them */
	uint64_t nested;       /* events dropped because the hook was interrupted */
	uint64_t pad1[2];
	uint64_t head;
	uint64_t pad2[7];
	uint64_t tail;
	uint64_t pad3[7];
};

/* Mirrors rec in region.go: the time, and the kind in the top byte over
 * a 56-bit payload: the function (entry, exit; x86-64 user addresses
 * have 47 bits, 56 with 5-level paging), the clock units waited (wait)
 * or the events dropped (drop). */
struct tp_rec {
	uint64_t time, w;
};

_Static_assert(sizeof(struct tp_header) == 72, "header layout");
_Static_assert(sizeof(struct tp_slot) == 192, "slot layout");
_Static_assert(sizeof(struct tp_rec) == 16, "record layout");

enum { M_NONE = 0, M_ATTACHED = 1, M_NOSLOT = 2, M_OFF = 3 };

/* Per-thread state, one cache line, initial-exec TLS (no __tls_get_addr
 * call): the library is preloaded, so it is in the static TLS block. */
struct tstate {
	uint64_t head;  /* next index to write */
	uint64_t room;  /* inline fast path while head < room; 0 forces slow() */
	uint64_t limit; /* room, also without the TSC: slow() writes while head < limit */
	uint64_t mask;  /* ring size - 1 */
	struct tp_rec *ring;
	struct tp_slot *slot;
	uint64_t frontier; /* ring records from here on are not yet populated */
	uint64_t chunk;    /* records populated at the next frontier */
	uint64_t populated;
	uint32_t busy;  /* inside a hook: a nested call (signal) is dropped */
	uint32_t mode;
	uint32_t retry; /* M_NOSLOT: events until the next claim attempt */
	uint32_t dropping; /* waited max_wait: drop without waiting until there is room */
	/* paused is the time (clock units) this thread lost in the hooks so
	 * far, waiting for a slot or ring space or mapping ring pages: what
	 * its wait records say. A calibration burst leaves it out of its
	 * loops' times, as the recorder does (lib/calib.c). */
	uint64_t paused;
};

static __thread struct tstate T __attribute__((tls_model("initial-exec"), aligned(64)));

static struct tp_header *g_hdr;
static struct tp_slot *g_slots;
static char *g_rings;
static uint64_t g_cap, g_maxwait;
static uint32_t g_nslots, g_pid;
static int g_tsc;
static int g_state; /* 0 new, 1 initializing, 2 ready, 3 off */
static pthread_key_t g_key;

static inline NOINST uint64_t now(void)
{
#if defined(__x86_64__) || defined(__i386__)
	if (likely(g_tsc))
		return __rdtsc();
#endif
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* tsc is the inline fast path's clock; room stays 0 (no fast path) when
 * the recorder did not choose the TSC. */
static inline NOINST uint64_t tsc(void)
{
#if defined(__x86_64__) || defined(__i386__)
	return __rdtsc();
#else
	return 0;
#endif
}

static NOINST uint64_t parse_u64(const char *s, int base)
{
	uint64_t v = 0;
	if (!s || !*s)
		return 0;
	for (; *s; s++) {
		int d;
		if (*s >= '0' && *s <= '9')
			d = *s - '0';
		else if (*s >= 'a' && *s <= 'f')
			d = *s - 'a' + 10;
		else
			return 0;
		if (d >= base)
			return 0;
		v = v * base + d;
	}
	return v;
}

static NOINST void thread_exit(void *unused);

/* after_fork resets the forking thread's state in the child: the child
 * claims its own slot, with its own pid, on its next event. */
static NOINST void after_fork(void)
{
	g_pid = (uint32_t)getpid();
	T.head = T.room = T.limit = 0;
	T.ring = 0;
	T.slot = 0;
	T.dropping = 0;
	T.mode = M_NONE;
}

static NOINST int do_init(void)
{
	const char *fds = getenv("TRUEPROF_HOOK_FD");
	const char *ids = getenv("TRUEPROF_HOOK_ID");
	if (!fds || !ids)
		return 0;
	int fd = (int)parse_u64(fds, 10);
	uint64_t id = parse_u64(ids, 16);
	if (fd < 0 || id == 0)
		return 0;
	/* Check the header with pread before mapping: after an exec the fd
	 * number may name something else. */
	struct tp_header h;
	if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h)
		return 0;
	if (h.magic != TP_MAGIC || h.version != TP_VERSION || h.id != id)
		return 0;
	struct stat st;
	if (fstat(fd, &st) != 0 || (uint64_t)st.st_size < h.size)
		return 0;
	if (h.nevents < 4 || (h.nevents & (h.nevents - 1)) || h.nslots == 0 ||
	    h.slot_off < sizeof h || h.slot_off + (uint64_t)h.nslots * sizeof(struct tp_slot) > h.ring_off ||
	    h.ring_off + (uint64_t)h.nslots * h.nevents * sizeof(struct tp_rec) > h.size)
		return 0;
	void *m = mmap(0, h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		return 0;
	if (pthread_key_create(&g_key, thread_exit) != 0) {
		munmap(m, h.size);
		return 0;
	}
	g_hdr = m;
	g_slots = (struct tp_slot *)((char *)m + h.slot_off);
	g_rings = (char *)m + h.ring_off;
	g_cap = h.nevents;
	g_nslots = h.nslots;
	g_maxwait = h.max_wait;
#if defined(__x86_64__) || defined(__i386__)
	g_tsc = h.clock == CLK_TSC;
#else
	if (h.clock != CLK_MONO) {
		munmap(m, h.size);
		return 0;
	}
#endif
	g_pid = (uint32_t)getpid();
	pthread_atfork(0, 0, after_fork);
	return 1;
}

/* init maps the region once per process image; threads racing here wait
 * for the first. */
static NOINST int init(void)
{
	int st = __atomic_load_n(&g_state, __ATOMIC_ACQUIRE);
	if (likely(st >= 2))
		return st == 2;
	int zero = 0;
	if (__atomic_compare_exchange_n(&g_state, &zero, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		int ok = do_init();
		__atomic_store_n(&g_state, ok ? 2 : 3, __ATOMIC_RELEASE);
		return ok;
	}
	while ((st = __atomic_load_n(&g_state, __ATOMIC_ACQUIRE)) == 1)
		sched_yield();
	return st == 2;
}

/* pause_for backs off while waiting for the recorder: spin briefly, then
 * yield, then sleep 50 µs at a time. */
static NOINST void pause_for(unsigned n)
{
	if (n < 64) {
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#endif
	} else if (n < 128) {
		sched_yield();
	} else {
		struct timespec ts = {0, 50000};
		nanosleep(&ts, 0);
	}
}

static NOINST void use_slot(struct tstate *t, uint32_t i)
{
	struct tp_slot *s = &g_slots[i];
	t->slot = s;
	t->ring = (struct tp_rec *)(g_rings + (uint64_t)i * g_cap * sizeof(struct tp_rec));
	t->mask = g_cap - 1;
	t->head = s->head;
	t->room = t->limit = 0; /* the caller's slow path computes them */
	t->frontier = t->head;
	t->dropping = 0;
	t->chunk = 512;
	t->populated = 0;
	t->mode = M_ATTACHED;
	pthread_setspecific(g_key, (void *)1);
}

/* claim gives the thread a slot: the one a previous image of this very
 * thread owned before it called exec (so that its events stay in order),
 * or a free one. */
static NOINST int claim(struct tstate *t)
{
	uint32_t pid = g_pid, tid = (uint32_t)syscall(SYS_gettid);
	for (uint32_t i = 0; i < g_nslots; i++) {
		struct tp_slot *s = &g_slots[i];
		if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == ST_OWNED &&
		    __atomic_load_n(&s->pid, __ATOMIC_RELAXED) == pid &&
		    __atomic_load_n(&s->tid, __ATOMIC_RELAXED) == tid) {
			use_slot(t, i);
			return 1;
		}
	}
	for (uint32_t k = 0; k < g_nslots; k++) {
		uint32_t i = (tid + k) % g_nslots;
		struct tp_slot *s = &g_slots[i];
		uint32_t want = ST_FREE;
		if (__atomic_load_n(&s->state, __ATOMIC_RELAXED) == ST_FREE &&
		    __atomic_compare_exchange_n(&s->state, &want, ST_OWNED, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
			__atomic_store_n(&s->pid, pid, __ATOMIC_RELAXED);
			__atomic_store_n(&s->tid, tid, __ATOMIC_RELAXED);
			use_slot(t, i);
			return 1;
		}
	}
	return 0;
}

static inline NOINST uint64_t rec_word(uint64_t kind, uint64_t payload)
{
	return kind << K_SHIFT | (payload & PAYLOAD_MASK);
}

static inline NOINST void put(struct tstate *t, uint64_t time, uint64_t kind, uint64_t payload)
{
	struct tp_rec *r = &t->ring[t->head & t->mask];
	r->time = time;
	r->w = rec_word(kind, payload);
	t->head++;
}

/* ADJ_RECS is the room a pending adjust takes: a wait and a drop record. */
#define ADJ_RECS 2

/* put_pending writes the slot's pending adjust (its drops and waits since
 * pend_since), a record for each that is not zero, and clears it. The
 * drop first: the recorder stamps a wait with its end, so the two stay in
 * time order. */
static inline NOINST void put_pending(struct tstate *t, struct tp_slot *s)
{
	if (s->pend_dropped)
		put(t, s->pend_since, K_DROP, s->pend_dropped);
	if (s->pend_wait)
		put(t, s->pend_since, K_WAIT, s->pend_wait);
	s->pend_dropped = s->pend_wait = s->pend_since = 0;
}

static inline NOINST void publish(struct tstate *t)
{
	__atomic_store_n(&t->slot->head, t->head, __ATOMIC_RELEASE);
}

/* pend adds dropped events to the slot's pending adjust. */
static inline NOINST void pend(struct tp_slot *s, uint64_t t0, uint64_t dropped, uint64_t wait)
{
	if (s->pend_dropped == 0 && s->pend_wait == 0)
		s->pend_since = t0;
	s->pend_dropped += dropped;
	s->pend_wait += wait;
}

static NOINST void noslot_drop(void)
{
	__atomic_fetch_add(&g_hdr->noslot_dropped, 1, __ATOMIC_RELAXED);
}

/* populate maps ring pages ahead of the writer, a growing chunk at a
 * time, with one madvise instead of a page fault per 128 records. Once the
 * whole ring is mapped the frontier goes away. */
static NOINST void populate(struct tstate *t)
{
	uint64_t n = t->chunk, off = t->frontier & t->mask;
	if (off + n > g_cap)
		n = g_cap - off;
	uintptr_t start = (uintptr_t)&t->ring[off] & ~(uintptr_t)4095;
	uintptr_t end = (uintptr_t)&t->ring[off + n];
	t->populated += n;
	if (madvise((void *)start, end - start, 23 /* MADV_POPULATE_WRITE */) != 0 || t->populated >= g_cap) {
		t->frontier = ~0ull;
		return;
	}
	t->frontier += n;
	if (t->chunk < 16384)
		t->chunk *= 2;
}

/* set_room keeps one record free for an adjust and stops at the
 * populate frontier; the inline fast path only runs with the TSC (a
 * clock_gettime call there would make every hook save registers). */
static inline NOINST void set_room(struct tstate *t, uint64_t limit)
{
	if (limit && t->head + 1 >= t->frontier)
		populate(t);
	if (limit > t->frontier)
		limit = t->frontier;
	t->limit = limit;
	t->room = g_tsc ? limit : 0;
}

static NOINST __attribute__((noinline)) void slow(struct tstate *t, uint64_t kind, void *fn)
{
	if (likely(t->head < t->limit)) {
		/* Fast path without the TSC. */
		put(t, now(), kind, (uint64_t)fn);
		publish(t);
		return;
	}
	if (t->mode == M_NONE && !init()) {
		t->mode = M_OFF;
		return;
	}
	uint64_t t0 = now(); /* after init: it chooses the clock */
	if (t->mode == M_NONE) {
		if (!claim(t)) {
			/* Wait for the recorder to free a slot, as for a full ring. */
			uint64_t w;
			unsigned n = 0;
			do {
				pause_for(n++);
				if (claim(t))
					break;
				w = now() - t0;
			} while (w < g_maxwait);
			if (t->mode != M_ATTACHED) {
				t->mode = M_NOSLOT;
				t->retry = 4096;
				noslot_drop();
				return;
			} else {
				w = now() - t0;
				pend(t->slot, t0, 0, w);
				t->paused += w;
			}
		}
	}
	if (t->mode == M_OFF)
		return;
	if (t->mode == M_NOSLOT) {
		if (--t->retry > 0 || !claim(t)) {
			if (t->retry == 0)
				t->retry = 4096;
			noslot_drop();
			return;
		}
		/* claimed: record this event normally */
	}
	struct tp_slot *s = t->slot;
	if (__atomic_load_n(&s->nested, __ATOMIC_RELAXED)) {
		uint64_t n = __atomic_exchange_n(&s->nested, 0, __ATOMIC_ACQ_REL);
		pend(s, t0, n, 0);
	}
	uint64_t cap = g_cap;
	uint64_t tail = __atomic_load_n(&s->tail, __ATOMIC_ACQUIRE);
	int pending = s->pend_dropped || s->pend_wait;
	if (cap - (t->head - tail) < (pending ? 1 + ADJ_RECS : 2)) {
		if (t->dropping) {
			/* Dropping until the recorder makes room: no waiting again. */
			s->pend_dropped++;
			set_room(t, 0);
			return;
		}
		/* Full: wait for the recorder, up to max_wait, for room for the
		 * pending adjust, the event and the adjust of this wait. */
		unsigned n = 0;
		uint64_t w = 0, need = pending ? 2 + ADJ_RECS : 2;
		for (;;) {
			pause_for(n++);
			tail = __atomic_load_n(&s->tail, __ATOMIC_ACQUIRE);
			w = now() - t0;
			if (cap - (t->head - tail) >= need)
				break;
			if (w >= g_maxwait) {
				pend(s, t0, 1, w);
				t->paused += w;
				t->dropping = 1;
				set_room(t, 0);
				return;
			}
		}
		/* The event, then the time its thread lost, charged to the calls
		 * open after it. */
		if (pending)
			put_pending(t, s);
		put(t, t0, kind, (uint64_t)fn);
		put(t, t0, K_WAIT, w);
		t->paused += w;
		publish(t);
		set_room(t, tail + cap - 1);
		return;
	}
	uint64_t frontier = t->frontier;
	set_room(t, tail + cap - 1);
	if (pending) {
		put_pending(t, s);
		t->dropping = 0;
	}
	put(t, t0, kind, (uint64_t)fn);
	if (t->frontier != frontier && t->head < t->limit + 1) {
		/* Mapping ring pages (set_room) is time the uninstrumented
		 * program would not spend: an adjust, like a wait. */
		uint64_t w = now() - t0;
		put(t, t0, K_WAIT, w);
		t->paused += w;
	}
	publish(t);
}

/* nested counts an event that interrupted this thread's own hook (a
 * signal handler built with -finstrument-functions): it is dropped and
 * reported with the next adjust. */
static NOINST void nested(struct tstate *t)
{
	if (t->mode == M_ATTACHED) {
		__atomic_fetch_add(&t->slot->nested, 1, __ATOMIC_RELAXED);
		t->room = t->limit = 0;
	} else if (t->mode == M_NOSLOT || (t->mode == M_NONE && __atomic_load_n(&g_state, __ATOMIC_ACQUIRE) == 2)) {
		__atomic_fetch_add(&g_hdr->noslot_dropped, 1, __ATOMIC_RELAXED);
	}
}

static inline NOINST void emit(uint64_t kind, void *fn)
{
	struct tstate *t = &T;
	if (unlikely(t->busy)) {
		nested(t);
		return;
	}
	t->busy = 1;
	barrier();
	uint64_t h = t->head;
	if (likely(h < t->room)) {
		struct tp_rec *r = &t->ring[h & t->mask];
		r->time = tsc();
		r->w = rec_word(kind, (uint64_t)fn);
		t->head = h + 1;
		__atomic_store_n(&t->slot->head, h + 1, __ATOMIC_RELEASE);
	} else {
		slow(t, kind, fn);
	}
	barrier();
	t->busy = 0;
}

/* thread_exit (the pthread key destructor) writes what the thread still
 * owes the ring if there is room and hands the slot back: the recorder
 * frees it once drained. A thread that exits otherwise (exit, exec,
 * a signal) is found by the recorder's liveness check instead. */
static NOINST void thread_exit(void *unused)
{
	(void)unused;
	struct tstate *t = &T;
	if (t->mode != M_ATTACHED)
		return;
	t->busy = 1;
	barrier();
	struct tp_slot *s = t->slot;
	uint64_t tail = __atomic_load_n(&s->tail, __ATOMIC_ACQUIRE);
	if ((s->pend_dropped || s->pend_wait) && g_cap - (t->head - tail) >= ADJ_RECS) {
		put_pending(t, s);
		publish(t);
	}
	__atomic_store_n(&s->state, ST_DEAD, __ATOMIC_RELEASE);
	t->slot = 0;
	t->ring = 0;
	t->head = t->room = t->limit = 0;
	t->mode = M_NONE;
	barrier();
	t->busy = 0;
}

/* The call site is not recorded: the recorder names a call by its
 * function, and the caller is the function entered before it. */
EXPORT NOINST void __cyg_profile_func_enter(void *this_fn, void *call_site)
{
	(void)call_site;
	emit(K_ENTRY, this_fn);
}

EXPORT NOINST void __cyg_profile_func_exit(void *this_fn, void *call_site)
{
	(void)call_site;
	emit(K_EXIT, this_fn);
}
