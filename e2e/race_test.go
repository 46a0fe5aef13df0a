//go:build race

package e2e_test

// raceEnabled: the tests run with -race, so the binary is built with it.
const raceEnabled = true
