package node

// WithAtStep sets o's hook called as Serve starts each step of its start,
// with the step's name and the bound HTTP address.
func WithAtStep(o *ServeOptions, f func(step, httpAddr string)) {
	o.atStep = f
}
