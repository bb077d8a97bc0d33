package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/examples/internal/demo"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the program as `go run ./examples/fencing` does, on embedded
// nodes and with -nodes pointing at 3 real redis-servers; run fails if any
// claim it prints does not hold.
func TestRun(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		require.NoError(t, run(t.Context(), t.Output(), ""))
	})
	t.Run("redis", func(t *testing.T) {
		require.NoError(t, run(t.Context(), t.Output(), urls(redistest.Start(t, 3))))
	})
}

// TestPausedHolderIsFencedOff checks the story's claims one by one, on
// embedded nodes and on 3 real redis-servers: B got the lock only after A's
// TTL, with a larger token; the store refused A's late write and kept B's
// value; A's unlock reported mutex.ErrNotHeld and left B's lock intact.
func TestPausedHolderIsFencedOff(t *testing.T) {
	for name, urls := range map[string]func(t *testing.T) string{
		"embedded": func(*testing.T) string { return "" },
		"redis":    func(t *testing.T) string { return urls(redistest.Start(t, 3)) },
	} {
		t.Run(name, func(t *testing.T) {
			list, stop, err := demo.URLs(urls(t), 5)
			require.NoError(t, err)
			t.Cleanup(stop)
			rs, err := demo.Open(t.Context(), list, redlock.WithKeyPrefix("fencing:"))
			require.NoError(t, err)
			t.Cleanup(func() { _ = rs.Close() })

			store := &Store{}
			o, err := play(t.Context(), t.Output(), rs, store)
			require.NoError(t, err)

			assert.Greater(t, o.TokenB, o.TokenA, "fencing tokens must increase from one holder to the next")
			// B could not get in while A's keys lived: a lower bound only.
			assert.GreaterOrEqual(t, o.BWaited, ttl/2)
			require.ErrorIs(t, o.WriteA, ErrStaleToken, "the store must refuse the paused holder's write")
			value, token := store.Value()
			assert.Equal(t, valueB, value)
			assert.Equal(t, o.TokenB, token)
			require.ErrorIs(t, o.UnlockA, mutex.ErrNotHeld)
			require.ErrorIs(t, o.UnlockA, mutex.ErrNotHeld)
			assert.NoError(t, o.UnlockB, "A's unlock must not have released B's lock")
		})
	}
}

// TestStoreRefusesOlderTokens checks the store alone.
func TestStoreRefusesOlderTokens(t *testing.T) {
	var s Store
	require.NoError(t, s.Write(5, "a"))
	require.NoError(t, s.Write(5, "b"), "the same holder may write again")
	require.ErrorIs(t, s.Write(4, "c"), ErrStaleToken)
	require.NoError(t, s.Write(9, "d"))
	value, token := s.Value()
	assert.Equal(t, "d", value)
	assert.Equal(t, uint64(9), token)
}

func urls(servers []*redistest.Server) string {
	var list []string
	for _, a := range redistest.Addrs(servers) {
		list = append(list, "redis://"+a)
	}
	return strings.Join(list, ",")
}
