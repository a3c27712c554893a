// jit.c is a minimal JIT for trueprof's end-to-end tests: it copies a
// hand-assembled x86-64 hot loop into anonymous executable memory, names it
// the way real JITs do (a perf map or a jitdump file), and runs it.
//
//	jit perfmap NOTES UID SECONDS   write /tmp/perf-PID.map, chown it to UID
//	                                unless UID is -1, then run jit_hot_loop
//	jit lateperfmap NOTES SECONDS   run unnamed code for SECONDS, then write
//	                                the perf map and run it for SECONDS more
//	jit jitdump NOTES DIR SECONDS   announce DIR/jit-PID.dump by mapping it,
//	                                load jit_first at an address and run it
//	                                for SECONDS, then load jit_second at the
//	                                same address and run it for SECONDS
//	jit exitperfmap NOTES SECONDS   run code at one address for SECONDS, then
//	                                other code at another for SECONDS, and
//	                                name both in the perf map only as it
//	                                exits (the JVM's -XX:+DumpPerfMapAtExit)
//	jit exitjitdump NOTES DIR SECONDS  as jitdump, but the code loads are
//	                                written (with the times of the loads)
//	                                only as it exits
//
// SECONDS are CPU seconds, so that a loaded machine slows the fixture down
// rather than starving it of samples. NOTES receives "key value" lines for
// the test: the perf map path before it is created, CLOCK_MONOTONIC times.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

// hot_loop(n) counts n down to zero with a frame-pointer frame, so that a
// frame-pointer walk from inside it continues into its caller.
static const unsigned char hot_loop[] = {
	0x55,             // push %rbp
	0x48, 0x89, 0xe5, // mov  %rsp,%rbp
	0x48, 0x89, 0xf8, // mov  %rdi,%rax
	0x48, 0xff, 0xc8, // 1: dec %rax
	0x75, 0xfb,       // jnz  1b
	0x5d,             // pop  %rbp
	0xc3,             // ret
};

typedef unsigned long (*loop_fn)(unsigned long);

static FILE *notes;

static void die(const char *what) {
	perror(what);
	exit(2);
}

static uint64_t now_ns(clockid_t clk) {
	struct timespec ts;
	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void note(const char *key, uint64_t v) {
	fprintf(notes, "%s %llu\n", key, (unsigned long long)v);
	fflush(notes);
}

static unsigned char *code_region(void) {
	unsigned char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		die("mmap code");
	return p;
}

// install copies the loop to p and makes it executable, as a JIT does:
// writable while it emits, executable when it runs.
static void install(unsigned char *p) {
	if (mprotect(p, 4096, PROT_READ | PROT_WRITE) != 0)
		die("mprotect rw");
	memcpy(p, hot_loop, sizeof hot_loop);
	if (mprotect(p, 4096, PROT_READ | PROT_EXEC) != 0)
		die("mprotect rx");
	__builtin___clear_cache((char *)p, (char *)p + sizeof hot_loop);
}

// run calls the code for the given CPU time; the calls are made from main
// (run is inlined nowhere: BuildC compiles with -fno-inline), so stacks
// read jit code; run; main.
static void run(loop_fn fn, double seconds) {
	uint64_t end = now_ns(CLOCK_PROCESS_CPUTIME_ID) + (uint64_t)(seconds * 1e9);
	while (now_ns(CLOCK_PROCESS_CPUTIME_ID) < end)
		fn(2000000);
}

// write_perf_map names n pieces of code in /tmp/perf-PID.map.
static void write_perf_map(unsigned char **code, const char **names, int n, int uid) {
	char path[64];
	snprintf(path, sizeof path, "/tmp/perf-%d.map", getpid());
	fprintf(notes, "map %s\n", path);
	fflush(notes);
	FILE *f = fopen(path, "w");
	if (!f)
		die(path);
	for (int i = 0; i < n; i++)
		fprintf(f, "%lx %zx %s\n", (unsigned long)code[i], sizeof hot_loop, names[i]);
	if (fclose(f) != 0)
		die(path);
	if (uid >= 0 && chown(path, uid, uid) != 0)
		die("chown");
}

// jitdump format: the Linux tree's tools/perf/Documentation/jitdump-specification.txt.
struct jitheader {
	uint32_t magic, version, total_size, elf_mach, pad1, pid;
	uint64_t timestamp, flags;
};

struct jr_code_load {
	uint32_t id, total_size;
	uint64_t timestamp;
	uint32_t pid, tid;
	uint64_t vma, code_addr, code_size, code_index;
};

static void code_load(int fd, unsigned char *code, const char *name, uint64_t index, uint64_t ts) {
	unsigned char buf[256];
	struct jr_code_load r = {
		.id = 0, // JIT_CODE_LOAD
		.timestamp = ts,
		.pid = getpid(),
		.tid = syscall(SYS_gettid),
		.vma = (uintptr_t)code,
		.code_addr = (uintptr_t)code,
		.code_size = sizeof hot_loop,
		.code_index = index,
	};
	size_t n = strlen(name) + 1;
	r.total_size = sizeof r + n + sizeof hot_loop;
	memcpy(buf, &r, sizeof r);
	memcpy(buf + sizeof r, name, n);
	memcpy(buf + sizeof r + n, code, sizeof hot_loop);
	// One write: a reader never sees half a record (it would wait anyway).
	if (write(fd, buf, r.total_size) != (ssize_t)r.total_size)
		die("write jitdump");
}

// open_jitdump creates DIR/jit-PID.dump with its header and maps it, which
// is how a JIT announces it to perf.
static int open_jitdump(const char *dir) {
	char path[4096];
	snprintf(path, sizeof path, "%s/jit-%d.dump", dir, getpid());
	int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0644);
	if (fd < 0)
		die(path);
	struct jitheader h = {
		.magic = 0x4A695444,
		.version = 1,
		.total_size = sizeof h,
		.elf_mach = 62, // EM_X86_64
		.pid = getpid(),
		.timestamp = now_ns(CLOCK_MONOTONIC),
	};
	if (write(fd, &h, sizeof h) != sizeof h)
		die("write jitdump header");
	if (mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0) == MAP_FAILED)
		die("mmap jitdump");
	return fd;
}

int main(int argc, char **argv) {
	if (argc < 3) {
		fprintf(stderr, "usage: jit perfmap|lateperfmap|jitdump|exitperfmap|exitjitdump NOTES ...\n");
		return 2;
	}
	notes = fopen(argv[2], "w");
	if (!notes)
		die(argv[2]);
	unsigned char *code = code_region();
	loop_fn fn = (loop_fn)code;

	if (strcmp(argv[1], "perfmap") == 0 && argc == 5) {
		install(code);
		const char *name = "jit_hot_loop";
		write_perf_map(&code, &name, 1, atoi(argv[3]));
		run(fn, atof(argv[4]));
	} else if (strcmp(argv[1], "lateperfmap") == 0 && argc == 4) {
		install(code);
		run(fn, atof(argv[3]));
		note("named", now_ns(CLOCK_MONOTONIC));
		const char *name = "jit_hot_loop";
		write_perf_map(&code, &name, 1, -1);
		run(fn, atof(argv[3]));
	} else if (strcmp(argv[1], "exitperfmap") == 0 && argc == 4) {
		unsigned char *codes[] = {code, code_region()};
		const char *names[] = {"jit_exit_first", "jit_exit_second"};
		install(codes[0]);
		install(codes[1]);
		note("first", now_ns(CLOCK_MONOTONIC));
		run((loop_fn)codes[0], atof(argv[3]));
		note("second", now_ns(CLOCK_MONOTONIC));
		run((loop_fn)codes[1], atof(argv[3]));
		write_perf_map(codes, names, 2, -1);
	} else if (strcmp(argv[1], "exitjitdump") == 0 && argc == 5) {
		int fd = open_jitdump(argv[3]);
		double seconds = atof(argv[4]);
		install(code);
		uint64_t t1 = now_ns(CLOCK_MONOTONIC);
		note("first", t1);
		run(fn, seconds);
		install(code);
		uint64_t t2 = now_ns(CLOCK_MONOTONIC);
		note("second", t2);
		run(fn, seconds);
		code_load(fd, code, "jit_first", 1, t1);
		code_load(fd, code, "jit_second", 2, t2);
	} else if (strcmp(argv[1], "jitdump") == 0 && argc == 5) {
		int fd = open_jitdump(argv[3]);
		double seconds = atof(argv[4]);

		install(code);
		uint64_t t1 = now_ns(CLOCK_MONOTONIC);
		code_load(fd, code, "jit_first", 1, t1);
		note("first", t1);
		run(fn, seconds);

		// New code at the same address: the same bytes will do, the
		// jitdump says what is there from t2 on.
		install(code);
		uint64_t t2 = now_ns(CLOCK_MONOTONIC);
		code_load(fd, code, "jit_second", 2, t2);
		note("second", t2);
		run(fn, seconds);
		note("end", now_ns(CLOCK_MONOTONIC));
	} else {
		fprintf(stderr, "jit: bad arguments\n");
		return 2;
	}
	fprintf(notes, "done 1\n");
	fclose(notes);
	return 0;
}
