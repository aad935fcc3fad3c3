package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRunLocal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, n := range []int{1, 3} {
		require.NoError(t, runLocal(ctx, n, 10007, 1), "n=%d", n)
	}
	require.Error(t, runLocal(ctx, 0, 1, 1))
}
