package operators

import "github.com/eddy-stream/eddy/pipeline"

// plugins lists the step kinds of this package in the order their files
// registered them.
var plugins []pipeline.StepPlugin

// register is called from the init() of each kind's file: it adds the kind to
// pipeline.Default and remembers it for Register.
func register(p pipeline.StepPlugin) {
	plugins = append(plugins, p)
	pipeline.Default.RegisterStep(p)
}

// Register adds every step kind of this package to env, typically an Env made
// with pipeline.NewEnv in a test. pipeline.Default already holds them (from
// init), and an Env panics on a kind registered twice.
func Register(env *pipeline.Env) {
	for _, p := range plugins {
		env.RegisterStep(p)
	}
}
