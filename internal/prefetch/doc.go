// Package prefetch asks the processor to start loading memory that the
// caller will read soon, without waiting for it: a snapshot's encoder
// walks a gigabyte of state scattered over the heap, entry after entry,
// and each entry is a chain of pointers (entry, accumulator, string
// header, bytes). A load waits for its cache miss; a prefetch does not, so
// the encoder can ask for the memory of entries it reaches later while it
// encodes the ones whose memory has arrived.
//
// A prefetch is a hint: it never faults and never changes what a program
// computes, only how long its loads take. On amd64 it is PREFETCHT1 (into
// the second-level cache, not the small first one), which measured faster
// for the encoder than PREFETCHT0 and PREFETCHNTA (docs/checkpoints.md,
// "The encoder prefetches each entry's chain of pointers ahead").
// Elsewhere the functions do nothing.
//
// Dependencies: the standard library only. statestore (the snapshot
// encoder) and operators/agg (the values it encodes) import it.
package prefetch
