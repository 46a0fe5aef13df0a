package statestore

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// forEachParallel calls every index once and reports the failure of the
// smallest index, whatever order the goroutines ran in.
func TestForEachParallel(t *testing.T) {
	for _, n := range []int{0, 1, 2, 7, 1000} {
		calls := make([]atomic.Int32, n)
		require.NoError(t, forEachParallel(n, func(i int) error {
			calls[i].Add(1)
			return nil
		}))
		for i := range calls {
			require.Equal(t, int32(1), calls[i].Load(), "n %d, index %d", n, i)
		}
	}
	err := forEachParallel(100, func(i int) error {
		if i%30 == 29 {
			return fmt.Errorf("index %d: %w", i, errInjectedTest)
		}
		return nil
	})
	require.ErrorIs(t, err, errInjectedTest)
	require.EqualError(t, err, "index 29: injected")
}

var errInjectedTest = errors.New("injected")
