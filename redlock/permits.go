package redlock

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/quorumlock/quorumlock/internal/engine"
	"github.com/quorumlock/quorumlock/internal/keyspace"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/internal/timing"
)

// searchPermits runs do on every node for the keys fixed and, after
// searching every node for them, the permits of the semaphore named name,
// on each node as soon as its own search is done (a hung node does not hold
// up the others until ctx ends): out[k][i] is keys[k] (fixed, then the
// permits) on node i; errs[i], node i's failure to search. A node whose
// search succeeded without finding a permit gets a zero answer for it; one
// whose search failed, its error. On a Cluster node the search runs on the
// shard of the semaphore's slot, where all its permits are.
func searchPermits[T any](ctx context.Context, s *engine.Set, name string, fixed []string,
	do func(context.Context, *engine.Set, []string, func(int) bool) [][]answer[T]) (errs []error, keys []string, out [][]answer[T]) {
	key := s.Keys.Prefix + name
	found, errs := make([][]string, len(s.Nodes)), make([]error, len(s.Nodes))
	mine := make([]map[string]answer[T], len(s.Nodes)) // per node, its permits' results; each written by its node's search
	var wg sync.WaitGroup
	wg.Go(func() { out = do(ctx, s, fixed, nil) })
	for i := range s.Nodes {
		wg.Go(func() {
			if found[i], errs[i] = scan(ctx, s, i, s.Keys.Limit(key), permitPattern(s.Keys.Permit(key, 0))); errs[i] == nil {
				keys := permitKeys(found[i : i+1])
				res := do(ctx, s, keys, func(j int) bool { return j == i })
				mine[i] = map[string]answer[T]{}
				for k, key := range keys {
					mine[i][key] = res[k][i]
				}
			}
		})
	}
	wg.Wait()
	permits := permitKeys(found)
	for k, key := range permits {
		out = append(out, make([]answer[T], len(s.Nodes)))
		for i := range s.Nodes {
			r, ok := mine[i][key]
			if !ok {
				r = answer[T]{Err: errs[i]}
			}
			out[len(fixed)+k][i] = r
		}
	}
	return errs, slices.Concat(fixed, permits), out
}

// scanCount is how many keys one step of a search looks at on a node.
const scanCount = 1000

// maxScanSteps bounds the steps of a search on one node: ten billion keys.
const maxScanSteps = 10_000_000

// scan searches node i for the keys matching pattern with SCAN, one round
// trip per scanCount keys, until it is done, fails (keys then holds what it
// found before) or ctx ends; on a Cluster node, on the shard of at's slot.
func scan(ctx context.Context, s *engine.Set, i int, at, pattern string) (keys []string, err error) {
	n, cursor := s.Nodes[i], "0"
	for range maxScanSteps {
		r := n.Read(ctx, s.Timeout(timing.DefaultTTL), node.ScanScript, []string{at}, []any{cursor, pattern, scanCount})
		var step []string
		if err = r.Err; err == nil {
			cursor, step, err = node.ParseScan(r.Reply)
		}
		if keys = append(keys, step...); err != nil {
			return keys, s.Errors.NodeFailure(n.Addr(), err)
		}
		if cursor == "0" {
			return keys, nil
		}
	}
	return keys, s.Errors.Node(n.Addr(), fmt.Errorf("the search for %q did not end after %d steps", pattern, maxScanSteps))
}

// permitPattern is the SCAN pattern of the permits of a semaphore whose
// permit 0 has the key permit0: permit0, its glob characters escaped, up to
// the number, then "*".
func permitPattern(permit0 string) string {
	var b strings.Builder
	for _, c := range strings.TrimSuffix(permit0, "0") {
		if strings.ContainsRune(`*?[]\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String() + "*"
}

// permitKeys returns the permit keys any node found, by permit number. Keys
// with more after the number (a permit's own queue, say) are not permits.
func permitKeys(found [][]string) []string {
	number := func(key string) int {
		_, after, _ := strings.Cut(key[strings.LastIndex(key, keyspace.PermitInfix):], keyspace.PermitInfix)
		n, err := strconv.Atoi(after)
		if err != nil || n < 0 || strconv.Itoa(n) != after {
			return -1
		}
		return n
	}
	var keys []string
	for _, some := range found {
		for _, key := range some {
			if number(key) >= 0 && !slices.Contains(keys, key) {
				keys = append(keys, key)
			}
		}
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Compare(number(a), number(b)) })
	return keys
}
