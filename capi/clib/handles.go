package main

/*
#include <stdint.h>
*/
import "C"

import "sync"

// table maps the numbers handed to C for one kind of object (an rdma_mem*,
// an rdma_request*: numbers, never Go pointers) to the objects, from add
// until take. 0 is never handed out: it is C's NULL.
type table[T any] struct {
	mu   sync.Mutex
	next uint64
	m    map[uint64]T
	// What find says of NULL and of a number the table does not hold.
	null, stale error
}

func newTable[T any](null, stale error) *table[T] {
	return &table[T]{m: map[uint64]T{}, null: null, stale: stale}
}

// add gives v a number for C.
func (t *table[T]) add(v T) C.uintptr_t {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next++
	t.m[t.next] = v
	return C.uintptr_t(t.next)
}

// find is the object h names, or the table's error for NULL or a number it
// does not hold.
func (t *table[T]) find(h C.uintptr_t) (T, error) {
	var zero T
	if h == 0 {
		return zero, t.null
	}
	t.mu.Lock()
	v, ok := t.m[uint64(h)]
	t.mu.Unlock()
	if !ok {
		return zero, t.stale
	}
	return v, nil
}

// take removes h from the table and returns what it named, if anything.
func (t *table[T]) take(h C.uintptr_t) (T, bool) {
	t.mu.Lock()
	v, ok := t.m[uint64(h)]
	delete(t.m, uint64(h))
	t.mu.Unlock()
	return v, ok
}
