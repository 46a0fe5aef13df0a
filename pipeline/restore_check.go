package pipeline

// CheckRestore tells whether a job of plan can start from the checkpoint
// or savepoint cp, as Start checks before it builds the job: it fails with
// ErrRestore when cp holds keyed state of a step the plan no longer has
// (unless allowNonRestoredState) or pending output of a sink it no longer
// has. `eddy serve` asks it of a changed pipeline file against a
// savepoint of the running one before it replaces the running one.
func CheckRestore(plan *Plan, cp RestoredCheckpoint, allowNonRestoredState bool) error {
	return checkRestore(plan, JobOptions{Restore: cp, AllowNonRestoredState: allowNonRestoredState})
}
