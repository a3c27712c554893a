#include "textflag.h"

// costPlain is costPush's body, never probed: the loop's own cost.
TEXT costPlain<>(SB), NOSPLIT|NOFRAME, $0-0
	PUSHQ BP
	POPQ  BP
	RET

// costPush begins with PUSHQ BP, an instruction the kernel emulates when
// it is probed.
TEXT costPush<>(SB), NOSPLIT|NOFRAME, $0-0
	PUSHQ BP
	POPQ  BP
	RET

// costPushRet is costPush again, for an entry probe with a uretprobe.
TEXT costPushRet<>(SB), NOSPLIT|NOFRAME, $0-0
	PUSHQ BP
	POPQ  BP
	RET

// costMov begins with MOVL DI, DX, an instruction the kernel must
// single-step out of line.
TEXT costMov<>(SB), NOSPLIT|NOFRAME, $0-0
	MOVL DI, DX
	RET

// costMovRet is costMov again, probed on its RET at +2 (stepped too).
TEXT costMovRet<>(SB), NOSPLIT|NOFRAME, $0-0
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

DATA ·costPlainPC+0(SB)/8, $costPlain<>(SB)
GLOBL ·costPlainPC(SB), RODATA|NOPTR, $8
DATA ·costPushPC+0(SB)/8, $costPush<>(SB)
GLOBL ·costPushPC(SB), RODATA|NOPTR, $8
DATA ·costPushRetPC+0(SB)/8, $costPushRet<>(SB)
GLOBL ·costPushRetPC(SB), RODATA|NOPTR, $8
DATA ·costMovPC+0(SB)/8, $costMov<>(SB)
GLOBL ·costMovPC(SB), RODATA|NOPTR, $8
DATA ·costMovRetPC+0(SB)/8, $costMovRet<>(SB)
GLOBL ·costMovRetPC(SB), RODATA|NOPTR, $8
