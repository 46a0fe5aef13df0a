package statestore

// DisableTimerCache makes m's timer services, created after it, encode
// every snapshot's timers anew (tests compare the cache with it).
func DisableTimerCache(m *Memory) { m.noTimerCache = true }
