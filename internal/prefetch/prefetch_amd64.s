//go:build !noprefetch

#include "textflag.h"

// func rangeLines(p unsafe.Pointer, n uintptr)
TEXT ·rangeLines(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), AX
	MOVQ n+8(FP), CX
	JMP  lines<>(SB)

// func Pointee(v any, n uintptr)
TEXT ·Pointee(SB), NOSPLIT, $0-24
	MOVQ v_data+8(FP), AX
	MOVQ n+16(FP), CX
	JMP  lines<>(SB)

// lines prefetches every cache line of the CX bytes at AX, unless AX is
// nil or CX is 0.
TEXT lines<>(SB), NOSPLIT|NOFRAME, $0-0
	TESTQ AX, AX
	JZ    done
	TESTQ CX, CX
	JZ    done
	LEAQ  -1(AX)(CX*1), CX // the last byte
	ANDQ  $~63, AX         // the first byte's line

loop:
	PREFETCHT1 (AX)
	ADDQ       $64, AX
	CMPQ       AX, CX
	JLS        loop

done:
	RET
