#include "textflag.h"

// func copyNT(dst, src *byte, n uintptr)
//
// SSE2 (every amd64 CPU): unaligned 16-byte loads, MOVNTDQ stores of whole
// 64-byte lines, then SFENCE so that the stores are visible before any
// store that follows (they are weakly ordered).
TEXT ·copyNT(SB), NOSPLIT, $0-24
	MOVQ	dst+0(FP), DI
	MOVQ	src+8(FP), SI
	MOVQ	n+16(FP), CX
	SHRQ	$6, CX
	JZ	done
loop:
	MOVOU	0(SI), X0
	MOVOU	16(SI), X1
	MOVOU	32(SI), X2
	MOVOU	48(SI), X3
	MOVNTO	X0, 0(DI)
	MOVNTO	X1, 16(DI)
	MOVNTO	X2, 32(DI)
	MOVNTO	X3, 48(DI)
	ADDQ	$64, SI
	ADDQ	$64, DI
	DECQ	CX
	JNZ	loop
	SFENCE
done:
	RET
