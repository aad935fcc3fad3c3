#include "textflag.h"

// Element-wise reductions of two buffers into a third, 64 bytes a round
// with SSE2 (every amd64 CPU): dst[i] = a[i] op b[i], a the first operand
// of each instruction as in the Go loops (reduce.go). n is a multiple of
// 64; dst may be a or b (a round loads both before it stores).

// func sumF32(dst, a, b *byte, n uintptr)
TEXT ·sumF32(SB), NOSPLIT, $0-32
	MOVQ	dst+0(FP), DI
	MOVQ	a+8(FP), SI
	MOVQ	b+16(FP), DX
	MOVQ	n+24(FP), CX
	SHRQ	$6, CX
	JZ	done
loop:
	MOVUPS	0(SI), X0
	MOVUPS	16(SI), X1
	MOVUPS	32(SI), X2
	MOVUPS	48(SI), X3
	MOVUPS	0(DX), X4
	MOVUPS	16(DX), X5
	MOVUPS	32(DX), X6
	MOVUPS	48(DX), X7
	ADDPS	X4, X0
	ADDPS	X5, X1
	ADDPS	X6, X2
	ADDPS	X7, X3
	MOVUPS	X0, 0(DI)
	MOVUPS	X1, 16(DI)
	MOVUPS	X2, 32(DI)
	MOVUPS	X3, 48(DI)
	ADDQ	$64, SI
	ADDQ	$64, DX
	ADDQ	$64, DI
	DECQ	CX
	JNZ	loop
done:
	RET

// func sumF64(dst, a, b *byte, n uintptr)
TEXT ·sumF64(SB), NOSPLIT, $0-32
	MOVQ	dst+0(FP), DI
	MOVQ	a+8(FP), SI
	MOVQ	b+16(FP), DX
	MOVQ	n+24(FP), CX
	SHRQ	$6, CX
	JZ	done
loop:
	MOVUPD	0(SI), X0
	MOVUPD	16(SI), X1
	MOVUPD	32(SI), X2
	MOVUPD	48(SI), X3
	MOVUPD	0(DX), X4
	MOVUPD	16(DX), X5
	MOVUPD	32(DX), X6
	MOVUPD	48(DX), X7
	ADDPD	X4, X0
	ADDPD	X5, X1
	ADDPD	X6, X2
	ADDPD	X7, X3
	MOVUPD	X0, 0(DI)
	MOVUPD	X1, 16(DI)
	MOVUPD	X2, 32(DI)
	MOVUPD	X3, 48(DI)
	ADDQ	$64, SI
	ADDQ	$64, DX
	ADDQ	$64, DI
	DECQ	CX
	JNZ	loop
done:
	RET

// func sumI32(dst, a, b *byte, n uintptr)
TEXT ·sumI32(SB), NOSPLIT, $0-32
	MOVQ	dst+0(FP), DI
	MOVQ	a+8(FP), SI
	MOVQ	b+16(FP), DX
	MOVQ	n+24(FP), CX
	SHRQ	$6, CX
	JZ	done
loop:
	MOVOU	0(SI), X0
	MOVOU	16(SI), X1
	MOVOU	32(SI), X2
	MOVOU	48(SI), X3
	MOVOU	0(DX), X4
	MOVOU	16(DX), X5
	MOVOU	32(DX), X6
	MOVOU	48(DX), X7
	PADDL	X4, X0
	PADDL	X5, X1
	PADDL	X6, X2
	PADDL	X7, X3
	MOVOU	X0, 0(DI)
	MOVOU	X1, 16(DI)
	MOVOU	X2, 32(DI)
	MOVOU	X3, 48(DI)
	ADDQ	$64, SI
	ADDQ	$64, DX
	ADDQ	$64, DI
	DECQ	CX
	JNZ	loop
done:
	RET

// func sumI64(dst, a, b *byte, n uintptr)
TEXT ·sumI64(SB), NOSPLIT, $0-32
	MOVQ	dst+0(FP), DI
	MOVQ	a+8(FP), SI
	MOVQ	b+16(FP), DX
	MOVQ	n+24(FP), CX
	SHRQ	$6, CX
	JZ	done
loop:
	MOVOU	0(SI), X0
	MOVOU	16(SI), X1
	MOVOU	32(SI), X2
	MOVOU	48(SI), X3
	MOVOU	0(DX), X4
	MOVOU	16(DX), X5
	MOVOU	32(DX), X6
	MOVOU	48(DX), X7
	PADDQ	X4, X0
	PADDQ	X5, X1
	PADDQ	X6, X2
	PADDQ	X7, X3
	MOVOU	X0, 0(DI)
	MOVOU	X1, 16(DI)
	MOVOU	X2, 32(DI)
	MOVOU	X3, 48(DI)
	ADDQ	$64, SI
	ADDQ	$64, DX
	ADDQ	$64, DI
	DECQ	CX
	JNZ	loop
done:
	RET

// func prodF32(dst, a, b *byte, n uintptr)
TEXT ·prodF32(SB), NOSPLIT, $0-32
	MOVQ	dst+0(FP), DI
	MOVQ	a+8(FP), SI
	MOVQ	b+16(FP), DX
	MOVQ	n+24(FP), CX
	SHRQ	$6, CX
	JZ	done
loop:
	MOVUPS	0(SI), X0
	MOVUPS	16(SI), X1
	MOVUPS	32(SI), X2
	MOVUPS	48(SI), X3
	MOVUPS	0(DX), X4
	MOVUPS	16(DX), X5
	MOVUPS	32(DX), X6
	MOVUPS	48(DX), X7
	MULPS	X4, X0
	MULPS	X5, X1
	MULPS	X6, X2
	MULPS	X7, X3
	MOVUPS	X0, 0(DI)
	MOVUPS	X1, 16(DI)
	MOVUPS	X2, 32(DI)
	MOVUPS	X3, 48(DI)
	ADDQ	$64, SI
	ADDQ	$64, DX
	ADDQ	$64, DI
	DECQ	CX
	JNZ	loop
done:
	RET

// func prodF64(dst, a, b *byte, n uintptr)
TEXT ·prodF64(SB), NOSPLIT, $0-32
	MOVQ	dst+0(FP), DI
	MOVQ	a+8(FP), SI
	MOVQ	b+16(FP), DX
	MOVQ	n+24(FP), CX
	SHRQ	$6, CX
	JZ	done
loop:
	MOVUPD	0(SI), X0
	MOVUPD	16(SI), X1
	MOVUPD	32(SI), X2
	MOVUPD	48(SI), X3
	MOVUPD	0(DX), X4
	MOVUPD	16(DX), X5
	MOVUPD	32(DX), X6
	MOVUPD	48(DX), X7
	MULPD	X4, X0
	MULPD	X5, X1
	MULPD	X6, X2
	MULPD	X7, X3
	MOVUPD	X0, 0(DI)
	MOVUPD	X1, 16(DI)
	MOVUPD	X2, 32(DI)
	MOVUPD	X3, 48(DI)
	ADDQ	$64, SI
	ADDQ	$64, DX
	ADDQ	$64, DI
	DECQ	CX
	JNZ	loop
done:
	RET
