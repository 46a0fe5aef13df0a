//go:build race

package hugeheap

// raceEnabled: the race detector shadows every heap allocation, and its
// shadow of a reservation of many GiB costs seconds of system time in each
// process, so Reserve does nothing in race-enabled builds.
const raceEnabled = true
