package node_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// The lock scripts take the uncontended case (free keys, no queue; our keys,
// no queue) before their helpers are made. What that leaves on the node, the
// reply and the release message must be what the general path does: forced
// here by a queue holding only a lapsed waiter, which the general path
// prunes, and so finds no queue either.
func TestUncontendedPathsDoWhatTheGeneralPathsDo(t *testing.T) {
	c := redistest.StartOne(t).Client(t)
	n := node.New(c, "n", clock.Real())
	for _, tc := range []struct {
		name             string
		acquire, release *node.Script
		names            int
	}{
		{"mutex", node.AcquireScript, node.ReleaseScript, 1},
		{"read", node.ReadAcquireScript, node.ReadReleaseScript, 1},
		{"write", node.WriteAcquireScript, node.WriteReleaseScript, 1},
		{"multi", node.MultiAcquireScript, node.MultiReleaseScript, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fast := runUncontended(t, c, n, tc.acquire, tc.release, tc.name+"-fast", tc.names, false)
			general := runUncontended(t, c, n, tc.acquire, tc.release, tc.name+"-general", tc.names, true)
			assert.Equal(t, general, fast)
		})
	}
}

// runUncontended acquires and releases tag's keys with token "a" and returns
// what it saw, with key names relative to tag and times checked against the
// 10s TTL, then left out.
func runUncontended(t *testing.T, c *redis.Client, n *node.Node, acquire, release *node.Script, tag string, names int, lapsed bool) []string {
	ctx := t.Context()
	var locks, acquireKeys, releaseKeys, channels []string
	for i := range names {
		key := fmt.Sprintf("{%s}k%d", tag, i)
		locks, channels = append(locks, key), append(channels, "ch:"+key)
		acquireKeys = append(acquireKeys, key, key+":q", key+":qx")
		releaseKeys = append(releaseKeys, key, key+":q", key+":qx", key+":rel")
	}
	lapse := func() {
		if lapsed {
			for _, key := range locks {
				require.NoError(t, c.ZAdd(ctx, key+":q", redis.Z{Score: 1, Member: "gone"}).Err())
				require.NoError(t, c.ZAdd(ctx, key+":qx", redis.Z{Score: 1, Member: "gone"}).Err())
			}
		}
	}
	sub := c.Subscribe(ctx, channels...)
	defer sub.Close()
	for range channels {
		_, err := sub.ReceiveTimeout(ctx, 5*time.Second) // the confirmations
		require.NoError(t, err)
	}
	var seen []string
	lapse()
	r := call(t, n, acquire, acquireKeys, "a", 10000, "w", 1, "-1", channels[0], "", "0")
	require.NoError(t, r.Err)
	seen = append(seen, fmt.Sprint("acquire: ", r.Reply))
	seen = append(seen, state(t, c, tag)...)
	lapse()
	r = call(t, n, release, releaseKeys, "a", channels[0], "release", "w", 1, 1000, 2000)
	require.NoError(t, r.Err)
	seen = append(seen, fmt.Sprint("release: ", r.Reply))
	seen = append(seen, state(t, c, tag)...)
	for range channels {
		m, err := sub.ReceiveMessage(context.WithoutCancel(ctx))
		require.NoError(t, err)
		seen = append(seen, "told "+m.Channel[len("ch:{"+tag+"}"):]+": "+m.Payload)
	}
	sort.Strings(seen[len(seen)-len(channels):])
	return seen
}

// state lists tag's keys, their values (a reader's expiry as its distance
// from now, checked) and TTLs (checked).
func state(t *testing.T, c *redis.Client, tag string) []string {
	ctx := t.Context()
	keys, err := c.Keys(ctx, "{"+tag+"}*").Result()
	require.NoError(t, err)
	sort.Strings(keys)
	var out []string
	for _, key := range keys {
		name := key[len("{"+tag+"}"):]
		pttl := c.PTTL(ctx, key).Val()
		switch typ := c.Type(ctx, key).Val(); typ {
		case "string":
			out = append(out, name+" = "+c.Get(ctx, key).Val())
			assert.True(t, pttl > 0 && pttl <= 10*time.Second, "%s's TTL %v", name, pttl)
		case "hash":
			for field, v := range c.HGetAll(ctx, key).Val() {
				if field != "w" {
					at, err := strconv.ParseInt(v, 10, 64)
					require.NoError(t, err)
					left := time.Until(time.UnixMilli(at))
					assert.True(t, left > 8*time.Second && left <= 10*time.Second, "%s's reader expires in %v", name, left)
					v = "a reader"
				}
				out = append(out, name+"."+field+" = "+v)
			}
			assert.True(t, pttl > 8*time.Second && pttl <= 10*time.Second, "%s's TTL %v", name, pttl)
		default:
			out = append(out, name+" is a "+typ)
		}
	}
	return out
}
