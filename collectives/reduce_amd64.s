#include "textflag.h"

// Element-wise reductions of two buffers into a third, 64 bytes a round
// with SSE2 (every amd64 CPU): dst[i] = a[i] op b[i], a the first operand
// of each instruction as in the Go loops (reduce.go). n is a multiple of
// 64; dst may be a or b (a round loads both before it stores).
//
// Every function is the same loop; they differ only in the move (MOVUPS,
// MOVUPD or MOVOU: the same bytes, each kept in its domain) and the
// operation, so the loop is written once as REDUCE64.

// REDUCE64 is the body of func(dst, a, b *byte, n uintptr): four 16-byte
// lanes of a and of b loaded, combined by OP into a's registers, stored.
#define REDUCE64(MOV, OP) \
	MOVQ	dst+0(FP), DI; \
	MOVQ	a+8(FP), SI; \
	MOVQ	b+16(FP), DX; \
	MOVQ	n+24(FP), CX; \
	SHRQ	$6, CX; \
	JZ	done; \
loop: \
	MOV	0(SI), X0; \
	MOV	16(SI), X1; \
	MOV	32(SI), X2; \
	MOV	48(SI), X3; \
	MOV	0(DX), X4; \
	MOV	16(DX), X5; \
	MOV	32(DX), X6; \
	MOV	48(DX), X7; \
	OP	X4, X0; \
	OP	X5, X1; \
	OP	X6, X2; \
	OP	X7, X3; \
	MOV	X0, 0(DI); \
	MOV	X1, 16(DI); \
	MOV	X2, 32(DI); \
	MOV	X3, 48(DI); \
	ADDQ	$64, SI; \
	ADDQ	$64, DX; \
	ADDQ	$64, DI; \
	DECQ	CX; \
	JNZ	loop; \
done: \
	RET

// func sumF32(dst, a, b *byte, n uintptr)
TEXT ·sumF32(SB), NOSPLIT, $0-32
	REDUCE64(MOVUPS, ADDPS)

// func sumF64(dst, a, b *byte, n uintptr)
TEXT ·sumF64(SB), NOSPLIT, $0-32
	REDUCE64(MOVUPD, ADDPD)

// func sumI32(dst, a, b *byte, n uintptr)
TEXT ·sumI32(SB), NOSPLIT, $0-32
	REDUCE64(MOVOU, PADDL)

// func sumI64(dst, a, b *byte, n uintptr)
TEXT ·sumI64(SB), NOSPLIT, $0-32
	REDUCE64(MOVOU, PADDQ)

// func prodF32(dst, a, b *byte, n uintptr)
TEXT ·prodF32(SB), NOSPLIT, $0-32
	REDUCE64(MOVUPS, MULPS)

// func prodF64(dst, a, b *byte, n uintptr)
TEXT ·prodF64(SB), NOSPLIT, $0-32
	REDUCE64(MOVUPD, MULPD)
