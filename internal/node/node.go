package node

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Node is one independent Redis primary of a lock's node set. It is safe for
// concurrent use.
type Node struct {
	client   redis.Scripter
	addr     string
	health   health
	inFlight atomic.Int32 // commands sent by any Mutex and not completed
}

// MaxInFlight is how many commands, from all the Mutexes of a set, may be
// outstanding on one node before acquisitions and extensions skip it. It
// bounds the goroutines that acquisitions and extensions leave on a paused or
// black-holed node, whatever the number of Mutexes. Releases are not capped
// (one must reach every node it may have to clean): each Mutex that unlocks
// or rolls back leaves at most one more per node. Every such goroutine ends
// when the client's own timeouts end its command.
const MaxInFlight = 64

// Begin counts a command about to be sent; End counts it completed. Busy
// reports whether MaxInFlight commands are outstanding.
func (n *Node) Begin()     { n.inFlight.Add(1) }
func (n *Node) End()       { n.inFlight.Add(-1) }
func (n *Node) Busy() bool { return n.inFlight.Load() >= MaxInFlight }

// New wraps client. addr names the node in errors and logs.
func New(client redis.Scripter, addr string) *Node { return &Node{client: client, addr: addr} }

// Addr returns the address the node is reported under.
func (n *Node) Addr() string { return n.addr }

// SetAddr changes the name the node is reported under; only before use.
func (n *Node) SetAddr(addr string) { n.addr = addr }

// Client returns the node's client.
func (n *Node) Client() redis.Scripter { return n.client }

// Call is one script invocation's keys and arguments, built once per round
// and shared, read-only, by the commands sent to every node.
type Call struct {
	keys []string
	args []any
}

// Calls builds the calls of one lock: its key, TTL and release channel are
// turned into script arguments once, so a round only adds its token.
type Calls struct {
	keys    []string
	ttl     any // the TTL in whole milliseconds
	channel any // the release channel, "" for none
}

// NewCalls returns the calls of the lock on key, with the TTL sent in whole
// milliseconds, releases announced on channel (Channel(key), or "" for none).
func NewCalls(key string, ttl time.Duration, channel string) *Calls {
	return &Calls{keys: []string{key}, ttl: ttl.Milliseconds(), channel: channel}
}

// Acquire is the acquire script's call for token.
func (c *Calls) Acquire(token string) Call { return Call{keys: c.keys, args: []any{token, c.ttl}} }

// Extend is the extend script's call for token.
func (c *Calls) Extend(token string) Call { return Call{keys: c.keys, args: []any{token, c.ttl}} }

// Release is the release script's call for token.
func (c *Calls) Release(token string) Call {
	return Call{keys: c.keys, args: []any{token, c.channel}}
}

// Acquire runs the acquire script: it sets the key to the token with the TTL
// unless another token holds it. It reports whether the key now holds the
// token, and otherwise the other holder's remaining TTL (-1ms if the key has
// none, -2ms if it vanished meanwhile). The TTL must be at least 1ms.
func (n *Node) Acquire(ctx context.Context, c Call) (acquired bool, holderTTL time.Duration, err error) {
	v, err := acquireScript.Run(ctx, n.client, c.keys, c.args...).Result()
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
	// Counter is the fencing counter's value after the call when a number was
	// asked for, whether or not the key was acquired; 0 if missing.
	Counter int64
	// ScriptMissing reports that the node did not have the script cached
	// (EVALSHA answered NOSCRIPT): with a script unique to this client, the
	// node restarted, or its script cache was flushed, since this client last
	// ran it.
	ScriptMissing bool
}

// AcquireExt runs the extended acquire script (acquire_ext.lua). With
// newMarker non-empty it reads the node's marker at markerKey, creating it with
// newMarker if missing; with fence it draws a fencing number from the counter at
// fenceKey when the key is taken.
//
// script is the extended acquire script to run: ExtScript's result, or nil
// for the one shared by every client. It runs with EVALSHA first, and with
// EVAL if the node answers NOSCRIPT, which the reply reports.
func (n *Node) AcquireExt(ctx context.Context, script *redis.Script, key, markerKey, fenceKey, token string, ttl time.Duration, newMarker string, fence bool) (Reply, error) {
	f := "0"
	if fence {
		f = "1"
	}
	if script == nil {
		script = acquireExtScript
	}
	keys := []string{key, markerKey, fenceKey}
	args := []any{token, ttl.Milliseconds(), newMarker, f}
	missing := false
	v, err := script.EvalSha(ctx, n.client, keys, args...).Result()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		missing = true
		// Before the EVAL reloads the script: a concurrent command whose
		// EVALSHA then succeeds must not count the node unchecked.
		n.SuspectRestart()
		v, err = script.Eval(ctx, n.client, keys, args...).Result()
	}
	if err != nil {
		return Reply{}, err
	}
	r, ok := v.([]any)
	if !ok || len(r) != 5 {
		return Reply{}, unexpected("acquire", v)
	}
	acquired, ok1 := r[0].(int64)
	pttl, ok2 := r[1].(int64)
	marker, ok3 := r[2].(string)
	fenceN, ok4 := r[3].(int64)
	counter, ok5 := r[4].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || (acquired != 0 && acquired != 1) || fenceN < -1 || counter < 0 || (newMarker != "" && marker == "") {
		return Reply{}, unexpected("acquire", v)
	}
	return Reply{Acquired: acquired == 1, HolderTTL: time.Duration(pttl) * time.Millisecond, Marker: marker, Fence: fenceN, Counter: counter, ScriptMissing: missing}, nil
}

// ExtScript returns a copy of the extended acquire script made unique by id,
// so its digest is this client's alone: a NOSCRIPT answer to it then means
// the node lost its script cache since this client last ran it, which a
// restart does, even one that reloaded the data from a snapshot.
func ExtScript(id string) *redis.Script {
	return redis.NewScript(acquireExtSrc + "\n-- client " + id + "\n")
}

// CommitFence runs the fence script: it raises the counter at fenceKey to
// value (never lowers it) while key holds token, and reports whether key did.
func (n *Node) CommitFence(ctx context.Context, key, fenceKey, token string, value uint64) (bool, error) {
	return flag("fence", fenceScript.Run(ctx, n.client, []string{key, fenceKey}, token, value))
}

// Extend runs the extend script (a Calls.Extend call): it resets the key's TTL
// while the key holds the token, and reports whether it did. It never creates
// the key.
func (n *Node) Extend(ctx context.Context, c Call) (bool, error) {
	return flag("extend", extendScript.Run(ctx, n.client, c.keys, c.args...))
}

// Release is what the release script found.
type Release int8

const (
	Released Release = 1  // the key held the token and was deleted
	Missing  Release = 0  // the key did not exist: expired, or released already
	Taken    Release = -1 // the key holds another token; it was left alone
)

// Release runs the release script (a Calls.Release call): it deletes the key while
// it holds the token, and reports what it found. When the call names a
// channel and the key was deleted, the script also publishes the token there,
// which wakes the waiters of every process.
func (n *Node) Release(ctx context.Context, c Call) (Release, error) {
	v, err := releaseScript.Run(ctx, n.client, c.keys, c.args...).Result()
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
