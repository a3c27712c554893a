package testutil

import (
	"fmt"
	"strings"
)

// ManyFunctionsC returns C source with n functions f0 … f(n-1) that main
// calls once each after reading a byte from stdin (so that probes can be
// placed first), then prints their sum.
func ManyFunctionsC(n int) string {
	var b strings.Builder
	b.WriteString("#include <stdio.h>\n#include <unistd.h>\n")
	defineFunctions(&b, n, "int f%d(int x) { return x + %d; }\n")
	b.WriteString("int main(void) {\n\tchar c;\n\tif (read(0, &c, 1) < 0) return 1;\n\tlong s = 0;\n")
	for i := range n {
		fmt.Fprintf(&b, "\ts += f%d(%d);\n", i, i)
	}
	b.WriteString("\tprintf(\"%ld\\n\", s);\n\treturn 0;\n}\n")
	return b.String()
}

// ManyCallsC returns C source with n functions f0 … f(n-1) (noinline,
// for builds at -O2) that two threads call in turn, f<i> (i%5)+1 times
// a round, for the rounds of argv[1] (the hook tests' program of many
// functions, as a real program's hot code calls).
func ManyCallsC(n int) string {
	var b strings.Builder
	b.WriteString("#include <pthread.h>\n#include <stdlib.h>\nstatic volatile long sink;\n")
	defineFunctions(&b, n, "__attribute__((noinline)) void f%d(long x) { sink += x ^ %d; }\n")
	b.WriteString("static void (*const fns[])(long) = {")
	for i := range n {
		fmt.Fprintf(&b, "f%d,", i)
	}
	fmt.Fprintf(&b, `};
static long rounds;
static void *run(void *arg) {
	for (long r = 0; r < rounds; r++)
		for (int i = 0; i < %d; i++)
			for (int k = 0; k <= i %% 5; k++)
				fns[i](r);
	return arg;
}
int main(int argc, char **argv) {
	rounds = atol(argv[1]);
	pthread_t t;
	pthread_create(&t, 0, run, 0);
	run(0);
	pthread_join(t, 0);
	return 0;
}
`, n)
	return b.String()
}

// defineFunctions writes n function definitions f0 … f(n-1), from
// format with the function's number in both its verbs.
func defineFunctions(b *strings.Builder, n int, format string) {
	for i := range n {
		fmt.Fprintf(b, format, i, i)
	}
}

// CallsC is the dense call load of bench/hooks, bench/percall and the hook
// tests: main calls mid n times (n = argv[1]) and mid calls leaf twice, so
// 3n+1 calls and 6n+2 events when built with -finstrument-functions
// (-O1 -fno-inline keeps every call a call). It prints 3n+1.
const CallsC = `#include <stdio.h>
#include <stdlib.h>
volatile long sink;
long leaf(long x) { return x * 3 + 1; }
long mid(long x) { return leaf(x) + leaf(x + 1); }
int main(int argc, char **argv) {
	long n = atol(argv[1]), s = 0;
	for (long i = 0; i < n; i++)
		s += mid(i);
	sink = s;
	printf("%ld\n", 3 * n + 1);
	return 0;
}
`

// ColdPartsC has a function with a cold part when built with gcc -O2
// (work.cold, GCC's hot/cold splitting): every hundredth call of work
// runs an unlikely block there, which calls report and leaf and jumps
// back into work, either before work's own call of leaf or to the point
// where that call returns. It prints its own call counts, "work=N
// leaf=N report=N": for 1000 calls of work (argv[1]), 1000, 1005 and 10.
const ColdPartsC = `#include <stdio.h>
#include <stdlib.h>
volatile long sink;
long works, leaves, reports;
__attribute__((noinline, cold)) void report(long i) { reports++; sink += i; }
__attribute__((noinline)) void leaf(long i) { leaves++; sink += i; }
__attribute__((noinline)) long work(long i) {
	long s = 0;
	char buf[64];
	works++;
	for (long k = 0; k < 10; k++)
		s += k * i;
	if (i % 100 == 0) {
		snprintf(buf, sizeof buf, "%ld", i);
		report((long)buf[0]);
		leaf(i);
		s += sink * 3;
		if (s & 1)
			return s + 7;
	}
	leaf(s);
	return s;
}
int main(int argc, char **argv) {
	long n = argc > 1 ? atol(argv[1]) : 1000, s = 0;
	for (long i = 0; i < n; i++)
		s += work(i);
	sink = s;
	printf("work=%ld leaf=%ld report=%ld\n", works, leaves, reports);
	return 0;
}
`

// TailCallsCXX ends functions with indirect tail calls, in a module that
// can host C++ unwinding (so that uprobe exits are RET probes): via_slot
// jumps through a function pointer variable (jmp *slot(%rip) with g++
// -O2), via_reg calls helper, tears its frame down and jumps through a
// register, via_obj (no frame) loads an object's function pointer and
// jumps through it; table dispatches through a jump table inside
// itself, which leaves nothing. Each of argv[1] rounds calls via_slot,
// via_reg, via_obj and table once; helper throws once at the end. It
// prints its own call counts: for 1000 rounds "target=3000 helper=1001
// via_slot=1000 via_reg=1000 via_obj=1000 table=1000".
const TailCallsCXX = `#include <cstdio>
#include <cstdlib>
#include <stdexcept>
static volatile long sink;
long targets, helpers, tables, slots, regs, objs;
typedef long (*fn_t)(long);
extern "C" __attribute__((noinline)) long target(long x) { targets++; return x + 1; }
extern "C" __attribute__((noinline)) long helper(long x) { helpers++; if (x < 0) throw std::runtime_error("neg"); return x * 3; }
fn_t slot = target;
extern "C" __attribute__((noinline)) long via_slot(long x) { slots++; return slot(x * 2); }
struct ops { fn_t f; long k; };
extern "C" __attribute__((noinline)) long via_reg(ops *o, long x) { regs++; long y = helper(x + o->k); return o->f(y); }
extern "C" __attribute__((noinline)) long via_obj(ops *o, long x) { objs++; return o->f(x); }
extern "C" __attribute__((noinline)) long table(long x) {
	tables++;
	switch (x & 7) {
	case 0: return x + 11; case 1: return x * 13; case 2: return x - 17; case 3: return x ^ 19;
	case 4: return x + 23; case 5: return x * 29; case 6: return x - 31; default: return x ^ 37;
	}
}
int main(int argc, char **argv) {
	long n = argc > 1 ? atol(argv[1]) : 1000, s = 0;
	ops o{target, 5};
	for (long i = 0; i < n; i++) {
		s += via_slot(i);
		s += via_reg(&o, i);
		s += via_obj(&o, i);
		s += table(i);
	}
	try { helper(-1); } catch (const std::exception &) { s++; }
	sink = s;
	std::printf("target=%ld helper=%ld via_slot=%ld via_reg=%ld via_obj=%ld table=%ld\n", targets, helpers, slots, regs, objs, tables);
	return 0;
}
`
