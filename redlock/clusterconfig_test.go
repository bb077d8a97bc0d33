package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-multierror"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// Node sets that count one Cluster twice, or give a server under the wrong
// scheme, on one set of Clusters: NewFromURLs refuses each with ErrInvalid
// naming the nodes and what to change, writing nothing; found later when it
// could not wait, both nodes refused by every lock call. A plain client of a
// Cluster server given to New fails on its node with a *mutex.NodeError that
// says so, and Check calls it unfit.
func TestNewFromURLsRefusesBadClusterNodeSets(t *testing.T) {
	clusters := redistest.StartClusters(t, 2, 3, 0)
	standalone := redistest.Start(t, 1)[0]
	a, b := clusters[0], clusters[1]
	seeds := func(addrs ...string) string {
		u := "redis+cluster://" + addrs[0]
		if len(addrs) > 1 {
			u += "?addr=" + strings.Join(addrs[1:], "&addr=")
		}
		return u
	}
	at := func(c *redistest.Cluster, i int) string { return c.Primaries[i].Addr() }
	A, A2, B := seeds(at(a, 0)), seeds(at(a, 1), at(a, 2)), seeds(b.Addrs()...)
	S := "redis://" + standalone.Addr()
	// NewFromURLs waits for its pings at most the node timeout: a loaded
	// machine needs more than the default 200ms for a Cluster's few round trips.
	wait := redlock.WithNodeTimeout(2 * time.Second)

	for _, tt := range []struct {
		name string
		urls []string
		want string
	}{
		{"one Cluster URL twice", []string{A, B, A}, "nodes 0 and 2 both connect to " + at(a, 0)},
		{"two seed lists of one Cluster", []string{A, B, A2},
			fmt.Sprintf("node 0 (%s) and node 2 (%s) ", A, A2)}, // the same Cluster, or the same server: whichever is seen first
		{"a Cluster's server by name", []string{A, B, seeds(fmt.Sprintf("localhost:%d", a.Primaries[0].Port()))},
			fmt.Sprintf("node 0 (%s) and node 2 (%s) ", A, seeds(fmt.Sprintf("localhost:%d", a.Primaries[0].Port())))},
		{"a Cluster and one of its servers as redis://", []string{A, S, "redis://" + at(a, 1)},
			fmt.Sprintf("node 2 (redis://%s) is a Redis Cluster server: use a redis+cluster:// URL", at(a, 1))},
		{"a seed list over two Clusters", []string{S, seeds(at(a, 0), at(b, 0))},
			fmt.Sprintf("node 1 (%s) reaches two Redis Clusters", seeds(at(a, 0), at(b, 0)))},
		{"a standalone server as redis+cluster://", []string{A, B, seeds(standalone.Addr())},
			"node 2 (" + seeds(standalone.Addr()) + ") reaches " + standalone.Addr() + ", a redis-server in standalone mode, not a Redis Cluster server: use a redis:// URL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := redlock.NewFromURLs(t.Context(), tt.urls, wait)
			require.ErrorIs(t, err, mutex.ErrInvalid)
			assert.ErrorContains(t, err, tt.want)
			assert.Nil(t, rs)
		})
	}
	for _, s := range append(append(a.Servers(), b.Servers()...), standalone) {
		require.Zero(t, s.Do(t, "DBSIZE"), "nothing written to %s", s.Addr())
	}
	rs, err := redlock.NewFromURLs(t.Context(), []string{A, B, S}, wait)
	require.NoError(t, err, "two Clusters and a server: three nodes")
	require.NoError(t, rs.Close())

	t.Run("found later", func(t *testing.T) {
		done, cancel := context.WithCancel(t.Context())
		cancel() // NewFromURLs does not wait for its pings
		urls := []string{A, B, A2}
		rs, err := redlock.NewFromURLs(done, urls)
		if err != nil { // the pings were fast enough anyway
			require.ErrorIs(t, err, mutex.ErrInvalid)
			return
		}
		t.Cleanup(func() { require.NoError(t, rs.Close()) })
		for range 10 { // a round may go out before the pings' connections are checked
			err = rs.NewMutex("later").TryLockContext(t.Context())
			if err != nil && invalidOn(err, urls[0]) && invalidOn(err, urls[2]) {
				break
			}
			if err == nil {
				_ = rs.NewMutex("later").UnlockContext(t.Context())
			}
		}
		require.ErrorIs(t, err, mutex.ErrInvalid, "both names of the Cluster refused")
		assert.True(t, invalidOn(err, urls[0]) && invalidOn(err, urls[2]), "%v", err)
	})

	t.Run("Check: Cluster clients of the wrong servers", func(t *testing.T) {
		for _, tt := range []struct {
			seeds         []string
			setting, want string
		}{
			{[]string{standalone.Addr()}, "", "cluster support disabled"},
			{[]string{at(a, 0), at(b, 0)}, "seeds", "are members of different Clusters"},
		} {
			cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: tt.seeds, MaxRetries: -1})
			t.Cleanup(func() { _ = cc.Close() })
			rs, err := redlock.New([]redis.UniversalClient{cc})
			require.NoError(t, err, "New sends nothing")
			f := findings(check(t, rs), rs.Nodes()[0], tt.setting)
			require.Len(t, f, 1, tt.want)
			assert.Equal(t, redlock.Unfit, f[0].Severity)
			assert.Contains(t, f[0].Message, tt.want)
		}
	})
	t.Run("a plain client of a Cluster server", func(t *testing.T) {
		plain := a.Primaries[0].Client(t, func(o *redis.Options) { o.MaxRetries = -1 })
		name := "plain:0"
		for i := 1; a.Shard(name) == 0; i++ { // a name of another shard: MOVED
			name = fmt.Sprintf("plain:%d", i)
		}
		for _, other := range []redis.UniversalClient{b.Client(t), standalone.Client(t)} { // MOVED, CROSSSLOT
			rs, err := redlock.New([]redis.UniversalClient{plain, other})
			require.NoError(t, err)
			err = rs.NewMutex(name).TryLockContext(t.Context())
			require.ErrorIs(t, err, mutex.ErrNodesUnavailable)
			var merr *multierror.Error
			require.ErrorAs(t, err, &merr)
			var said []string
			for _, e := range merr.Errors {
				var ne *mutex.NodeError
				if errors.As(e, &ne) && ne.Node == at(a, 0) {
					said = append(said, ne.Error())
				}
			}
			require.Len(t, said, 1, "%v", err)
			assert.Contains(t, said[0], "a Redis Cluster server given as one server")
			rep := check(t, rs)
			f := findings(rep, at(a, 0), "redis_mode")
			require.Len(t, f, 1, "Check names it")
			assert.Equal(t, redlock.Unfit, f[0].Severity)
		}
	})
}
