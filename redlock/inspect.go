package redlock

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/internal/engine"
	"github.com/quorumlock/quorumlock/internal/keyspace"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/timing"
)

// Inspection is what [Redlock.Inspect] read on the nodes for one name: a
// snapshot, stale as soon as it is returned.
type Inspection struct {
	Name   string      // the name inspected
	Quorum int         // the nodes a lock needs: N/2+1
	Fence  uint64      // the fencing counter (on Cluster nodes, of name's slot): the highest any node holds; 0 if none
	Nodes  []NodeState // one per node, in the order of [Redlock.Nodes]
	// Locks are the name's lock keys present on some node: the Mutex's
	// (also a name of a multi-name lock), the read-write lock's, then the
	// Semaphore's permits by number. Empty when no node holds any.
	Locks []LockState
}

// NodeState is what one node answered to [Redlock.Inspect] or
// [Redlock.ForceUnlock].
type NodeState struct {
	Node  string // as in [Redlock.Nodes]
	Fence uint64 // the fencing counter (of name's slot on a Cluster) on the node; 0 if missing or unknown
	Err   error  // the node's first failure (a *mutex.NodeError; ctx's error if ctx ended before it was asked); nil if it answered every command
}

// LockState is one lock key of the name, on every node.
type LockState struct {
	Key  string // the Redis key, key prefix included
	Kind string // "mutex" (a Mutex, or one name of a multi-name lock), "rwmutex" or "permit"
	// Holder is the token found on a majority of the nodes (a Mutex's, a
	// permit's, a writer's), "" if none; TTL is how long it keeps that
	// majority unless renewed (negative: forever, the keys have no TTL).
	Holder string
	TTL    time.Duration
	// Readers are a read-write lock's readers found on a majority, sorted.
	Readers []string
	// Metadata is what the holder's acquisition stored with a Mutex's key
	// (mutex.WithMetadata), when a majority holds the same; else "".
	Metadata string
	Values   []KeyValue // one per node, in node order
}

// KeyValue is a lock key on one node.
type KeyValue struct {
	Token string        // the key's token (a read-write lock's writer's); "" if none
	TTL   time.Duration // the key's remaining TTL; 0 when missing; negative when it has none
	// Readers maps a read-write lock's readers to the time left before their
	// expiry; readers whose expiry is past hold nothing and are left out.
	Readers  map[string]time.Duration
	Type     string // the key's Redis type when a lock's key has another (a data key named like it); else ""
	Metadata string // the metadata stored with Token on the node (mutex.WithMetadata); "" if none
	Err      error  // the node's failure (a *mutex.NodeError; ctx's error if it was not asked): the rest is unknown
}

// The fields of a read-write lock's key (name+keyspace.RWSuffix, a hash).
const (
	rwWriter  = "w"  // the writer's token
	rwReaders = "r:" // "r:<token>": a reader's expiry, node ms
)

// Inspect reads, without writing, the lock keys of name on every node in
// parallel: per node the token and remaining TTL of each key (a Mutex's, a
// multi-name lock's, a read-write lock's, every permit of a Semaphore named
// name), the holder found on a majority, and the fencing counter. Finding
// permits SCANs each node's keyspace (on a Cluster node, the shard of the
// semaphore's slot): about 1s per million keys, on loopback.
// Each command waits at most the per-node timeout; when ctx ends first, only
// the nodes yet to answer fail, with ctx's error (docs/design.md, "Inspection
// and forced unlock"). Failed nodes are reported per node; the error matches
// mutex.ErrNodesUnavailable, with the partial Inspection, when they leave who
// holds a key unknown (ctx's error alone when ctx ended first);
// mutex.ErrInvalid for bad input and mutex.ErrClosed after Close (nothing sent).
func (r *Redlock) Inspect(ctx context.Context, name string) (*Inspection, error) {
	if err := r.checkAdmin(ctx, "inspect", name); err != nil {
		return nil, err
	}
	s, key := r.set, r.set.Keys.Prefix+name
	searchErrs, keys, reads := searchPermits(ctx, s, name, []string{s.Keys.Fence(key), key, key + keyspace.RWSuffix, s.Keys.Metadata(key)}, read)
	metadata := reads[3] // the Mutex's metadata record, not a lock key
	keys, reads = slices.Delete(keys, 3, 4), slices.Delete(reads, 3, 4)
	in := &Inspection{Name: name, Quorum: s.Need(), Nodes: make([]NodeState, len(s.Nodes))}
	errs, answered := make([]error, len(s.Nodes)), 0
	for i, n := range s.Nodes {
		st := NodeState{Node: n.Addr(), Err: cmp.Or(searchErrs[i], metadata[i].Err)}
		for _, kr := range reads {
			st.Err = cmp.Or(st.Err, kr[i].Err)
		}
		if fence := reads[0][i]; fence.Err == nil && fence.V.Type == "string" {
			st.Fence, _ = strconv.ParseUint(fence.V.Value, 10, 64)
			in.Fence = max(in.Fence, st.Fence)
		}
		if in.Nodes[i], errs[i] = st, st.Err; st.Err == nil {
			answered++
		}
	}
	for k, key := range keys[1:] {
		kind := "permit"
		if k < 2 {
			kind = []string{"mutex", "rwmutex"}[k]
		}
		if ls, ok := lockState(key, kind, reads[k+1], in.Quorum); ok {
			if k == 0 {
				addMetadata(&ls, metadata, in.Quorum)
			}
			in.Locks = append(in.Locks, ls)
		}
	}
	at := fmt.Sprintf("redlock: inspect %q", name)
	if answered < in.Quorum {
		msg := fmt.Sprintf("%d of %d nodes answered, fewer than a majority: who holds it is unknown", answered, len(in.Nodes))
		return in, s.UnavailableError(ctx, at, msg, errs)
	}
	for _, ls := range in.Locks {
		if token, n, failed := ls.undecided(in.Quorum); failed > 0 {
			msg := fmt.Sprintf("%s: token %s is on %d nodes, and %d failed: who holds it is unknown", ls.Key, token, n, failed)
			return in, s.UnavailableError(ctx, at, msg, errs)
		}
	}
	return in, nil
}

// undecided returns, when no token holds the key on a majority, a token
// that would with the nodes that failed, the nodes it is on, and how many
// failed; failed is 0 otherwise.
func (ls LockState) undecided(quorum int) (token string, n, failed int) {
	count := map[string]int{}
	for _, v := range ls.Values {
		switch {
		case v.Err != nil:
			failed++
		case v.Token != "":
			count[v.Token]++
		}
	}
	for t, c := range count {
		if c > n || c == n && t < token {
			token, n = t, c
		}
	}
	if ls.Holder != "" || n == 0 || n+failed < quorum {
		return "", 0, 0
	}
	return token, n, failed
}

// answer is one node's answer to one call, or its failure (a *mutex.NodeError,
// or ctx's error when the call was not sent).
type answer[T any] struct {
	V   T
	Err error
}

// eachKey makes, with send (node.Node's Read or Call), the calls of script
// for each key, in parallel, on the nodes want selects (nil: all), call(key)
// giving the script's keys and arguments: out[k][i] is node i's answer for
// keys[k]; zero on a node not selected.
func eachKey[T any](ctx context.Context, s *engine.Set, keys []string, want func(int) bool, send sender, script *node.Script,
	call func(key string) ([]string, []any), parse func(any) (T, error)) [][]answer[T] {
	out := make([][]answer[T], len(keys))
	var wg sync.WaitGroup
	for k, key := range keys {
		wg.Go(func() {
			scriptKeys, args := call(key)
			values, errs := node.Each(ctx, s.Nodes, want, func(ctx context.Context, n *node.Node) (T, error) {
				return node.Parse(send(n, ctx, s.Timeout(timing.DefaultTTL), script, scriptKeys, args), parse)
			}, s.Errors.NodeFailure, nil)
			out[k] = make([]answer[T], len(values))
			for i := range values {
				out[k][i] = answer[T]{values[i], errs[i]}
			}
		})
	}
	wg.Wait()
	return out
}

// sender is node.Node's Read (fails at once on a stalled node) or Call.
type sender = func(*node.Node, context.Context, time.Duration, *node.Script, []string, []any) node.Result

// read reads each key: reads[k][i] is keys[k] on node i, as eachKey says.
func read(ctx context.Context, s *engine.Set, keys []string, want func(int) bool) [][]answer[node.Peek] {
	return eachKey(ctx, s, keys, want, (*node.Node).Read, node.PeekScript, func(key string) ([]string, []any) { return []string{key}, nil }, node.ParsePeek)
}

// lockState reads one lock key's reads as a LockState; false when no node
// has the key.
func lockState(key, kind string, reads []answer[node.Peek], quorum int) (LockState, bool) {
	ls := LockState{Key: key, Kind: kind, Values: make([]KeyValue, len(reads))}
	want := "string"
	if kind == "rwmutex" {
		want = "hash"
	}
	present := false
	holders := map[string][]time.Duration{} // token -> its TTL on each node holding it
	readers := map[string]int{}
	for i, a := range reads {
		v, kr := &ls.Values[i], a.V
		switch {
		case a.Err != nil:
			v.Err = a.Err
			continue
		case kr.Type == "none" || kr.Type == "": // "": a permit its node's search did not find
			continue
		case kr.Type != want:
			present, v.Type = true, kr.Type
			continue
		}
		present = true
		v.TTL = kr.TTL
		v.Token = kr.Value
		if want == "hash" {
			v.Token = kr.Fields[rwWriter]
			for field, expiry := range kr.Fields {
				token, ok := strings.CutPrefix(field, rwReaders)
				ms, err := strconv.ParseInt(expiry, 10, 64)
				if left := time.UnixMilli(ms).Sub(kr.Now); ok && err == nil && left > 0 {
					if v.Readers == nil {
						v.Readers = map[string]time.Duration{}
					}
					v.Readers[token] = left
					readers[token]++
				}
			}
		}
		if v.Token != "" {
			holders[v.Token] = append(holders[v.Token], v.TTL)
		}
	}
	for token, ttls := range holders {
		if len(ttls) >= quorum {
			// Longest first, none (negative) longest of all: the lock keeps
			// its majority until the quorum-th longest runs out.
			slices.SortFunc(ttls, func(a, b time.Duration) int { return cmp.Compare(forever(b), forever(a)) })
			ls.Holder, ls.TTL = token, ttls[quorum-1]
		}
	}
	for token, n := range readers {
		if n >= quorum {
			ls.Readers = append(ls.Readers, token)
		}
	}
	slices.Sort(ls.Readers)
	return ls, present
}

// addMetadata fills in a Mutex's metadata from its record's reads: on each
// node, the record's metadata when it is the token's the key holds there;
// ls.Metadata when a majority has the holder's token with the same.
func addMetadata(ls *LockState, records []answer[node.Peek], quorum int) {
	seen := map[string]int{}
	for i, a := range records {
		token, md, ok := node.ParseMetadata(a.V.Value)
		if a.Err != nil || a.V.Type != "string" || !ok || token != ls.Values[i].Token {
			continue
		}
		ls.Values[i].Metadata = md
		if token == ls.Holder {
			seen[md]++
		}
	}
	for md, n := range seen {
		if n >= quorum {
			ls.Metadata = md
		}
	}
}

func forever(d time.Duration) time.Duration {
	if d < 0 {
		return time.Duration(1<<63 - 1)
	}
	return d
}

// String returns the inspection for people: a line for the name, then for
// each lock key its holder and one line per node.
func (in *Inspection) String() string {
	if in == nil {
		return "<nil inspection>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%q on %d nodes (a lock needs %d): fencing counter %d\n", in.Name, len(in.Nodes), in.Quorum, in.Fence)
	if len(in.Locks) == 0 {
		answered := 0
		for _, n := range in.Nodes {
			if n.Err == nil {
				answered++
			}
		}
		if answered >= in.Quorum {
			b.WriteString("free: no node that answered has a lock key of this name\n")
		} else {
			fmt.Fprintf(&b, "unknown: %d of %d nodes answered, fewer than a majority, and none of them has a lock key of this name\n", answered, len(in.Nodes))
		}
		for _, n := range in.Nodes {
			if n.Err != nil {
				fmt.Fprintf(&b, "  %s: failed: %v\n", n.Node, n.Err)
			}
		}
	}
	for _, ls := range in.Locks {
		summary := ls.summary()
		if token, n, failed := ls.undecided(in.Quorum); failed > 0 {
			summary = fmt.Sprintf("holder unknown: %s is on %d nodes, and %d failed, which may hold it too", token, n, failed)
		}
		fmt.Fprintf(&b, "%s (%s): %s\n", ls.Key, ls.Kind, summary)
		for i, v := range ls.Values {
			fmt.Fprintf(&b, "  %s: %s\n", in.Nodes[i].Node, v.String())
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// summary says who holds the key on a majority.
func (ls LockState) summary() string {
	var parts []string
	switch {
	case ls.Holder != "" && ls.TTL < 0:
		parts = append(parts, "held by "+ls.Holder+" on a majority, with no TTL")
	case ls.Holder != "":
		parts = append(parts, fmt.Sprintf("held by %s on a majority, for %v unless renewed", ls.Holder, ls.TTL.Round(time.Millisecond)))
	}
	if ls.Kind == "rwmutex" && ls.Holder != "" {
		parts[0] = "written by" + strings.TrimPrefix(parts[0], "held by")
	}
	if ls.Metadata != "" {
		parts = append(parts, fmt.Sprintf("metadata %q", ls.Metadata))
	}
	if len(ls.Readers) > 0 {
		parts = append(parts, "read by "+strings.Join(ls.Readers, ", ")+" on a majority")
	}
	if len(parts) == 0 {
		return "held by no token on a majority"
	}
	return strings.Join(parts, "; ")
}

// String returns the key on one node: its token and TTL, "absent", the
// node's failure, or the key's type when it is not a lock's.
func (v KeyValue) String() string {
	switch {
	case v.Err != nil:
		return "failed: " + v.Err.Error()
	case v.Type != "":
		return "a " + v.Type + ", not a lock key (ForceUnlock leaves it alone)"
	case v.TTL == 0:
		return "absent"
	}
	ttl := "no TTL"
	if v.TTL > 0 {
		ttl = v.TTL.Round(time.Millisecond).String() + " left"
	}
	if v.Readers == nil { // a Mutex's, a permit's
		return cmp.Or(v.Token, `""`) + " (" + ttl + ")"
	}
	parts := []string{"no writer"}
	if v.Token != "" {
		parts[0] = "writer " + v.Token
	}
	parts[0] += " (key: " + ttl + ")"
	for _, r := range slices.Sorted(maps.Keys(v.Readers)) {
		parts = append(parts, fmt.Sprintf("reader %s (%v left)", r, v.Readers[r].Round(time.Millisecond)))
	}
	return strings.Join(parts, ", ")
}
