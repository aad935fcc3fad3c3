//go:build cgo && linux

package rdmacore

import "sync"

// wrappers maps C objects to their Go wrappers, for the objects C hands
// back by pointer (an event's ID, a CM ID's device context). Safe for
// concurrent use.
type wrappers[P comparable, W any] struct {
	mu sync.Mutex
	m  map[P]*W
}

// get is p's wrapper, nil if none.
func (t *wrappers[P, W]) get(p P) *W {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[p]
}

// getOrAdd is p's wrapper, made by wrap (under the lock) if p has none.
func (t *wrappers[P, W]) getOrAdd(p P, wrap func() *W) *W {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.m[p]
	if w == nil {
		if t.m == nil {
			t.m = map[P]*W{}
		}
		w = wrap()
		t.m[p] = w
	}
	return w
}

// add records w as p's wrapper, in place of any before.
func (t *wrappers[P, W]) add(p P, w *W) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[P]*W{}
	}
	t.m[p] = w
}

// remove forgets p's wrapper.
func (t *wrappers[P, W]) remove(p P) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, p)
}
