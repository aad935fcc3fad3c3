package phase

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMarkReachesTheRecorderOnlyWhileSet(t *testing.T) {
	Mark("before") // no recorder: nothing happens
	var mu sync.Mutex
	var got []string
	Record(func(s string) {
		mu.Lock()
		got = append(got, s)
		mu.Unlock()
	})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			Mark("a")
		}()
	}
	wg.Wait()
	Mark("b")
	Record(nil)
	Mark("after")
	assert.Equal(t, []string{"a", "a", "a", "a", "b"}, got)
}

func TestMarkWithoutRecorderAllocatesNothing(t *testing.T) {
	Record(nil)
	assert.Zero(t, testing.AllocsPerRun(100, func() { Mark("x") }))
}
