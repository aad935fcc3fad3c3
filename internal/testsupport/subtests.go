package testsupport

import (
	"slices"
	"testing"
)

// Subtests is a suite's list of subtests, each a function of the suite's
// state S, run in the order they were added (the suites add theirs from
// init functions, one file per concern).
type Subtests[S any] struct {
	names []string
	fns   []func(t *testing.T, s S)
}

// Add appends the subtest name.
func (st *Subtests[S]) Add(name string, fn func(t *testing.T, s S)) {
	st.names = append(st.names, name)
	st.fns = append(st.fns, fn)
}

// Names lists the subtests in the order Run runs them.
func (st *Subtests[S]) Names() []string { return slices.Clone(st.names) }

// Run runs every subtest on s; those skip names are skipped with the
// reason it gives.
func (st *Subtests[S]) Run(t *testing.T, s S, skip map[string]string) {
	for i, name := range st.names {
		fn := st.fns[i]
		t.Run(name, func(t *testing.T) {
			if why, ok := skip[name]; ok {
				t.Skip(why)
			}
			fn(t, s)
		})
	}
}
