// Package admin is eddy's admin endpoint: the HTTP interface of a running
// pipeline (health, readiness, metrics, checkpoints, savepoints, Go's
// profiles) that `eddy run` serves on --admin-addr, and `eddy serve`'s
// Manager, which runs every pipeline file of a folder in one process behind
// one such endpoint with a REST interface to list, add, stop, restart and
// delete them (docs/running.md).
//
// The package holds the lifecycle logic the command line only wires up:
// cmd parses flags and environment variables, builds a Pipeline or a
// Manager, and listens with Listen. State-changing requests go through
// Guard: a bearer token (EDDY_ADMIN_TOKEN) when one is set, which
// CheckAddr requires on any address other than a loopback one, and never
// a cross-origin request.
package admin
