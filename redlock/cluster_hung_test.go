package redlock_test

import (
	"context"
	"crypto/fips140"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// A hung (paused) shard primary fails its Cluster node for the names of its
// slots only, in a new process too, where go-redis's Cluster client has no
// slot map yet: it asks one seed at a time for one, here the hung one half
// the time (NewFromURLs's clients ask every seed at once), and it asks
// COMMAND of its servers in random order before a command it cannot route
// alone (the library's commands say where their keys are). With one plain
// node, every call needs the Cluster. Without the first fix, 20
// NewFromURLs pass about 0.3% of the time; without the second, 15 New with
// clients whose slot map was loaded before the pause about 0.2%.
func TestAHungShardFailsOnlyItsNamesInANewProcess(t *testing.T) {
	if fips140.Enabled() {
		// Known limit (docs/design.md, "Cluster nodes"): without SHA-1 the
		// scripts are loaded by SCRIPT LOAD, which has no key, so a new
		// ClusterClient may send it to the hung shard and wait on it.
		t.Skip("FIPS 140-only mode: SCRIPT LOAD may go to the hung shard")
	}
	plain := redistest.StartOne(t) // older than the quarantine below when the Cluster is up
	cl := redistest.StartClusters(t, 1, 3, 0, redistest.WithArgs("--cluster-require-full-coverage", "no"))[0]
	name := "hung"
	for i := 0; cl.Shard(name) != 0; i++ {
		name = fmt.Sprintf("hung:%d", i)
	}
	const quarantine = 500 * time.Millisecond // its first INFO goes to name's shard too
	opts := []redlock.Option{redlock.WithRestartQuarantine(quarantine)}
	rs, err := redlock.New([]redis.UniversalClient{cl.Client(t), plain.Client(t)}, opts...)
	require.NoError(t, err)
	require.NoError(t, rs.NewMutex(name, mutex.WithTTL(quarantine)).LockContext(t.Context())) // the nodes' markers
	marked := time.Now()
	require.NoError(t, rs.Close())
	warm := make([]*redis.ClusterClient, 15)
	for i := range warm {
		warm[i] = cl.Client(t, func(o *redis.ClusterOptions) { o.MaxRetries, o.MaxRedirects, o.ReadTimeout = -1, -1, time.Second })
		_, err := warm[i].Pipelined(t.Context(), func(p redis.Pipeliner) error { return p.Exists(t.Context(), name).Err() })
		require.NoError(t, err) // a pipeline asks no COMMAND
	}
	cl.Primaries[1].Pause()
	t.Cleanup(cl.Primaries[1].Resume)
	// A marker younger than the quarantine would need every node's answer.
	time.Sleep(time.Until(marked.Add(quarantine)))

	lock := func(rs *redlock.Redlock, what string) {
		m := rs.NewMutex(name, mutex.WithTTL(quarantine))
		if assert.NoError(t, m.TryLockContext(t.Context()), what) {
			require.NoError(t, m.UnlockContext(t.Context()))
		}
		require.NoError(t, rs.Close())
	}
	seeds := cl.Addrs()
	urls := []string{"redis+cluster://" + seeds[1] + "?addr=" + seeds[0], "redis://" + plain.Addr()}
	for i := range 20 {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond) // NewFromURLs's pings
		rs, err := redlock.NewFromURLs(ctx, urls, opts...)
		cancel()
		require.NoError(t, err)
		_, err = rs.Inspect(t.Context(), name)
		assert.NoError(t, err, "NewFromURLs %d: inspect", i)
		lock(rs, fmt.Sprintf("NewFromURLs %d: lock", i))
	}
	for i, c := range warm {
		rs, err := redlock.New([]redis.UniversalClient{c, plain.Client(t)}, opts...)
		require.NoError(t, err)
		lock(rs, fmt.Sprintf("New %d: lock", i))
	}
}
