package ttlset

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestSet(t *testing.T) {
	m := New(3, time.Minute)
	t0 := time.Unix(1000, 0)
	m.Remember("a", t0)
	m.Remember("b", t0.Add(time.Second))
	m.Remember("c", t0.Add(2*time.Second))
	at, ok := m.Recall("a", t0.Add(59*time.Second))
	assert.True(t, ok)
	assert.Equal(t, t0, at)

	// Full: the oldest goes.
	m.Remember("d", t0.Add(3*time.Second))
	assert.Equal(t, 3, m.Len())
	_, ok = m.Recall("a", t0.Add(4*time.Second))
	assert.False(t, ok, "the oldest entry was evicted")
	for _, k := range []string{"b", "c", "d"} {
		_, ok = m.Recall(k, t0.Add(4*time.Second))
		assert.True(t, ok, k)
	}
	// Remembering again refreshes, without evicting anything.
	m.Remember("b", t0.Add(30*time.Second))
	assert.Equal(t, 3, m.Len())

	// Expired entries are not recalled, and are dropped.
	_, ok = m.Recall("c", t0.Add(62*time.Second))
	assert.False(t, ok, "expired")
	assert.Equal(t, 2, m.Len())
	// When full, expired entries make room before any live one goes.
	m.Remember("e", t0.Add(62*time.Second))
	m.Remember("f", t0.Add(64*time.Second)) // d (t0+3s) has expired
	_, ok = m.Recall("b", t0.Add(64*time.Second))
	assert.True(t, ok, "a live entry stays while expired ones can go")
	assert.Equal(t, 3, m.Len())

	m.Forget("b")
	_, ok = m.Recall("b", t0.Add(64*time.Second))
	assert.False(t, ok)

	m.Clear()
	assert.Zero(t, m.Len())
}

// However many keys are remembered, the set holds at most max.
func TestSetBounded(t *testing.T) {
	const max = 1024
	m := New(max, time.Minute)
	t0 := time.Unix(1000, 0)
	for i := 0; i < 3*max; i++ {
		m.Remember("10.0.0.1:"+strconv.Itoa(i), t0.Add(time.Duration(i)*time.Millisecond))
	}
	assert.Equal(t, max, m.Len())
}
