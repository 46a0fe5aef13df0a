package cmd

import "strings"

// Go hands the heap it frees back to the kernel (its scavenger keeps about
// the live heap of the last collection), on Linux with MADV_DONTNEED: the
// pages are gone at once, and the next allocation there faults each 4 KiB
// page in again, zeroed by the kernel. With GC percent 400 the heap grows
// to five times the live heap between collections, so after every
// collection most of it is returned and faulted in again: on the
// checkpoint benchmark (1 GiB of state, 1 KiB per record) that was 2 to
// 3 million page faults and 5 to 12 s of system CPU per 30 s, a third of
// the throughput with checkpoints. With MADV_FREE (GODEBUG
// madvdontneed=0) the kernel takes such pages only when it needs memory,
// and until then the heap reuses them without a fault. The runtime reads
// GODEBUG only when the process starts, so `eddy run` re-executes itself
// with it, unless GODEBUG already sets madvdontneed.
const (
	godebugKey     = "madvdontneed"
	lazyReleaseSet = godebugKey + "=0"
)

// lazyReleaseEnv returns env with madvdontneed=0 added to GODEBUG, and
// whether it added it: not when GODEBUG sets madvdontneed already (the
// user's choice wins).
func lazyReleaseEnv(env []string) ([]string, bool) {
	for i, kv := range env {
		v, ok := strings.CutPrefix(kv, "GODEBUG=")
		if !ok {
			continue
		}
		if _, set := godebugSetting(v, godebugKey); set {
			return env, false
		}
		out := append([]string(nil), env...)
		if v == "" {
			out[i] = "GODEBUG=" + lazyReleaseSet
		} else {
			out[i] = kv + "," + lazyReleaseSet
		}
		return out, true
	}
	return append(append([]string(nil), env...), "GODEBUG="+lazyReleaseSet), true
}

// godebugSetting returns the value of key in a GODEBUG list, the last one
// where it is repeated (as the runtime reads it at start).
func godebugSetting(godebug, key string) (value string, ok bool) {
	for field := range strings.SplitSeq(godebug, ",") {
		if k, v, found := strings.Cut(field, "="); found && k == key {
			value, ok = v, true
		}
	}
	return value, ok
}
