// Package prefetch asks the processor to start loading memory that the
// caller will read soon, without waiting for it. A snapshot's encoder
// (statestore) walks state scattered over the heap, entry after entry, and
// each entry is a chain of pointers (entry, value, the strings a value
// holds). A load waits for its cache miss; a prefetch does not, so the
// encoder asks for the memory of entries it reaches a few batches later
// while it encodes the ones whose memory has arrived.
//
// A prefetch is a hint: it never faults, even on memory that cannot be
// read, and never changes what a program computes, only how long its loads
// take. On amd64 it is PREFETCHT1 (into the second-level cache, where a
// few batches of entries fit, not the small first one); elsewhere, and
// under the build tag noprefetch, the functions do nothing and Enabled is
// false.
//
// Dependencies: the standard library only. statestore (the snapshot
// encoder) and operators/agg (the strings an aggregate row holds) import it.
package prefetch
