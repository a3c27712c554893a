// Package unwind walks x86-64 user stacks from a copy of the stack taken
// with a sample (perf's PERF_SAMPLE_STACK_USER and PERF_SAMPLE_REGS_USER):
// the recorder unwinds at record time and stores only the program
// counters, as stack ids. The walk follows each function's CFI rows
// (.eh_frame) where its code has them and frame pointers where it has
// not (Go, JIT code), and can end in the frame-pointer chain the kernel
// took with the same sample. It is pure: the code's rows come from a
// Code the caller provides, so tests use fakes.
//
//	frames, reason := unwind.Walk(code, unwind.Regs{IP: ip, SP: sp, BP: bp, BPValid: true},
//		unwind.Stack{SP: sp, Data: copy, Complete: short}, kernelUser, unwind.ModeAuto, frames[:0])
//
// A walk ends with ReasonNone when it reached the outermost frame (a
// return address the CFI marks undefined, as in _start and clone3), or
// with the Reason it could go no further.
package unwind
