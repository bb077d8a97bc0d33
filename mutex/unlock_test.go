package mutex_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// A release whose answer a hung node never gave is sent to it again once it
// answers again, also when this process has nothing more to send it (the
// node is probed): the node may not have run it (its script cache was
// emptied, so its answer was NOSCRIPT, read by nobody), and its key would
// otherwise hold the lock up until its TTL.
func TestAReleaseLostOnAHungNodeIsSentAgain(t *testing.T) {
	b := realBackend(t, 5)
	failed := make(chan struct{}, 1)
	var urls []string // the clients users make: a 1s read timeout
	for _, a := range b.addrs {
		urls = append(urls, "redis://"+a)
	}
	rs, err := redlock.NewFromURLs(t.Context(), urls, redlock.WithObserver(&redlock.Observer{NodeError: func(e redlock.NodeFailure) {
		if e.Node == urls[0] {
			select {
			case failed <- struct{}{}:
			default:
			}
		}
	}}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = rs.Close() })
	key := "rel-again"
	for _, i := range []int{3, 4} { // others' keys: the lock lands on nodes 0, 1 and 2
		require.NoError(t, b.admin[i].Set(t.Context(), key, "foreign", 3*time.Second).Err())
	}
	m := rs.NewMutex(key, mutex.WithTTL(6*time.Second))
	require.NoError(t, m.TryLockContext(t.Context()))
	require.NoError(t, b.admin[0].ScriptFlush(t.Context()).Err())
	b.real[0].Pause()
	err = m.UnlockContext(t.Context())
	require.Error(t, err, "two of five released it, two held others' keys, one did not answer")
	select { // the hung node's answer is lost
	case <-failed:
	case <-time.After(5 * time.Second):
		t.Fatal("the hung node's release never failed")
	}
	b.real[0].Resume() // and this process has nothing more to send it
	require.Eventually(t, func() bool { return b.present(t, key, 0) == 0 }, 3*time.Second, 20*time.Millisecond,
		"the key is left on the node that was hung, %v before it expires", b.pttl(t, 0, key))
}
