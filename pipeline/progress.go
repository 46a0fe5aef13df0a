package pipeline

// Progresser is implemented by sources that know how much of their input
// they read (a file source: bytes of its files; a generator with count:
// its records). Progress returns what the source read and the size of its
// whole input, in a unit of its own; total <= 0: not known (yet). It is
// called from goroutines other than the task's, from the moment the
// source was made (before Open, when it knows nothing yet), and must be
// safe there.
type Progresser interface {
	Progress() (done, total int64)
}

// SourceProgress is how far one source of a job read its input: Done of
// Total, summed over its subtasks in the source's unit. Total is 0 when
// the source does not say, or one of its subtasks does not know yet.
type SourceProgress struct {
	ID          string
	Done, Total int64
}

// Progress returns how far each source of the job read its input, in the
// order of the plan's source tasks. Safe from any goroutine.
func (j *Job) Progress() []SourceProgress {
	var out []SourceProgress
	at := map[string]int{}    // index in out, by source id
	unknown := map[int]bool{} // a subtask of out[i] does not know its total
	for _, t := range j.tasks {
		if t.head.src == nil {
			continue
		}
		i, ok := at[t.head.node.ID]
		if !ok {
			i = len(out)
			at[t.head.node.ID] = i
			out = append(out, SourceProgress{ID: t.head.node.ID})
		}
		p, ok := t.head.src.(Progresser)
		if !ok {
			unknown[i] = true
			continue
		}
		done, total := p.Progress()
		out[i].Done += done
		out[i].Total += total
		unknown[i] = unknown[i] || total <= 0
	}
	for i, u := range unknown {
		if u {
			out[i].Total = 0
		}
	}
	return out
}

// Progress returns how far each source of the current job read its input
// (Job.Progress), or nil while no job runs. Safe from any goroutine.
func (r *Runner) Progress() []SourceProgress {
	r.mu.Lock()
	job := r.job
	r.mu.Unlock()
	if job == nil {
		return nil
	}
	return job.Progress()
}
