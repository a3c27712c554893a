#include "textflag.h"

// costPush begins with PUSHQ BP, an instruction the kernel emulates when
// it is probed.
TEXT costPush<>(SB), NOSPLIT|NOFRAME, $0-0
	PUSHQ BP
	POPQ  BP
	RET

// costMov begins with MOVL DI, DX, an instruction the kernel must
// single-step out of line; its RET at +2 is stepped too.
TEXT costMov<>(SB), NOSPLIT|NOFRAME, $0-0
	MOVL DI, DX
	RET

// func costLoop(fn uintptr, n int)
TEXT ·costLoop(SB), NOSPLIT, $0-16
	MOVQ fn+0(FP), AX
	MOVQ n+8(FP), CX

loop:
	CALL AX
	DECQ CX
	JNZ  loop
	RET

DATA ·costPushPC+0(SB)/8, $costPush<>(SB)
GLOBL ·costPushPC(SB), RODATA|NOPTR, $8
DATA ·costMovPC+0(SB)/8, $costMov<>(SB)
GLOBL ·costMovPC(SB), RODATA|NOPTR, $8
