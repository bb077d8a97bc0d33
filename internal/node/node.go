package node

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Node is one independent Redis primary of a lock's node set. It is safe for
// concurrent use.
type Node struct {
	client redis.Scripter
	addr   string
	health health
}

// New wraps client. addr names the node in errors and logs.
func New(client redis.Scripter, addr string) *Node { return &Node{client: client, addr: addr} }

// Addr returns the address the node is reported under.
func (n *Node) Addr() string { return n.addr }

// Client returns the node's client.
func (n *Node) Client() redis.Scripter { return n.client }

// Acquire runs the acquire script: it sets key to token with the TTL unless
// another token holds it. It reports whether the key now holds token, and
// otherwise the other holder's remaining TTL (-1ms if the key has none). ttl is
// sent in whole milliseconds and must be at least 1ms.
func (n *Node) Acquire(ctx context.Context, key, token string, ttl time.Duration) (acquired bool, holderTTL time.Duration, err error) {
	v, err := acquireScript.Run(ctx, n.client, []string{key}, token, ttl.Milliseconds()).Result()
	if err != nil {
		return false, 0, err
	}
	r, ok := v.([]any)
	if !ok || len(r) != 2 {
		return false, 0, unexpected("acquire", v)
	}
	got, ok1 := r[0].(int64)
	pttl, ok2 := r[1].(int64)
	if !ok1 || !ok2 || (got != 0 && got != 1) {
		return false, 0, unexpected("acquire", v)
	}
	return got == 1, time.Duration(pttl) * time.Millisecond, nil
}

// Reply is what the extended acquire script found on a node.
type Reply struct {
	Acquired  bool          // the key now holds the token
	HolderTTL time.Duration // the other holder's remaining TTL when not acquired (-1ms: none)
	Marker    string        // the node's marker after the call; "" when not asked
	// Fence is the fencing counter after its increment when the key was
	// acquired and a number was asked for; 0 when the node has no counter
	// (it lost its data, or never had one); -1 otherwise.
	Fence int64
}

// AcquireExt runs the extended acquire script (acquire_ext.lua). With
// newMarker non-empty it reads the node's marker at markerKey, creating it with
// newMarker if missing; with fence it draws a fencing number from the counter at
// fenceKey when the key is taken.
func (n *Node) AcquireExt(ctx context.Context, key, markerKey, fenceKey, token string, ttl time.Duration, newMarker string, fence bool) (Reply, error) {
	f := "0"
	if fence {
		f = "1"
	}
	v, err := acquireExtScript.Run(ctx, n.client, []string{key, markerKey, fenceKey}, token, ttl.Milliseconds(), newMarker, f).Result()
	if err != nil {
		return Reply{}, err
	}
	r, ok := v.([]any)
	if !ok || len(r) != 4 {
		return Reply{}, unexpected("acquire", v)
	}
	acquired, ok1 := r[0].(int64)
	pttl, ok2 := r[1].(int64)
	marker, ok3 := r[2].(string)
	fenceN, ok4 := r[3].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 || (acquired != 0 && acquired != 1) || fenceN < -1 || (newMarker != "" && marker == "") {
		return Reply{}, unexpected("acquire", v)
	}
	return Reply{Acquired: acquired == 1, HolderTTL: time.Duration(pttl) * time.Millisecond, Marker: marker, Fence: fenceN}, nil
}

// CommitFence runs the fence script: it raises the counter at fenceKey to
// value (never lowers it) while key holds token, and reports whether key did.
func (n *Node) CommitFence(ctx context.Context, key, fenceKey, token string, value uint64) (bool, error) {
	return flag("fence", fenceScript.Run(ctx, n.client, []string{key, fenceKey}, token, value))
}

// Extend runs the extend script: it resets key's TTL to ttl while key holds
// token, and reports whether it did. It never creates the key.
func (n *Node) Extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	return flag("extend", extendScript.Run(ctx, n.client, []string{key}, token, ttl.Milliseconds()))
}

// Release is what the release script found.
type Release int8

const (
	Released Release = 1  // the key held the token and was deleted
	Missing  Release = 0  // the key did not exist: expired, or released already
	Taken    Release = -1 // the key holds another token; it was left alone
)

// Release runs the release script: it deletes key while key holds token, and
// reports what it found.
func (n *Node) Release(ctx context.Context, key, token string) (Release, error) {
	v, err := releaseScript.Run(ctx, n.client, []string{key}, token).Result()
	if err != nil {
		return 0, err
	}
	switch v {
	case int64(Released), int64(Missing), int64(Taken):
		return Release(v.(int64)), nil
	}
	return 0, unexpected("release", v)
}

// flag reads a script reply that must be the integer 0 or 1. Anything else
// (nil, a string, another number) is an error, never a vote.
func flag(script string, cmd *redis.Cmd) (bool, error) {
	v, err := cmd.Result()
	if err != nil {
		return false, err
	}
	switch v {
	case int64(1):
		return true, nil
	case int64(0):
		return false, nil
	}
	return false, unexpected(script, v)
}

func unexpected(script string, v any) error {
	return fmt.Errorf("node: unexpected reply to the %s script: %T %#v", script, v, v)
}
