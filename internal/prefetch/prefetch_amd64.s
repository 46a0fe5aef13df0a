#include "textflag.h"

// func rangeLines(p unsafe.Pointer, n uintptr)
TEXT ·rangeLines(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), AX
	MOVQ n+8(FP), CX
	LEAQ -1(AX)(CX*1), CX // the last byte
	ANDQ $~63, AX         // the first byte's line
loop:
	PREFETCHT1 (AX)
	ADDQ $64, AX
	CMPQ AX, CX
	JLS  loop
	RET

