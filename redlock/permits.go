package redlock

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/quorumlock/quorumlock/internal/engine"
)

// searchPermits searches every node for the permits of the semaphore named
// name and runs do on them, on each node as soon as its own search is done
// (a hung node does not hold up the others until ctx ends): out[k][i] is
// permits[k] on node i. A node whose search succeeded without finding a
// permit gets absent(nil) for it; one whose search failed, absent(its
// error). Nodes not searched (Cluster) get do on every permit found, and on
// the permits below the limit in the semaphore's limit record on them (at
// most maxProbed), after the search.
func searchPermits[R any](ctx context.Context, s *engine.Set, name string, do func(keys []string, want func(int) bool) [][]R,
	absent func(error) R) (found []engine.Found, permits []string, out [][]R) {
	key := s.KeyPrefix + name
	mine := make([]map[string]R, len(s.Nodes)) // per node, its permits' results; each written by its node's search
	var limits []engine.KeyRead                // the limit record on the unsearched nodes
	var wg sync.WaitGroup
	wg.Go(func() {
		limits = s.Read(ctx, []string{s.Beside(key, engine.LimitSuffix)}, func(i int) bool { return !s.Nodes[i].MultiKey() })[0]
	})
	found = s.Scan(ctx, permitPattern(s.PermitKey(key, 0)), func(i int, keys []string) {
		keys = permitKeys([]engine.Found{{Keys: keys}})
		res := do(keys, func(j int) bool { return j == i })
		mine[i] = map[string]R{}
		for k, key := range keys {
			mine[i][key] = res[k][i]
		}
	})
	wg.Wait()
	probed := 0
	for i, kr := range limits {
		if limit, err := strconv.Atoi(kr.Value); !found[i].Searched && kr.Err == nil && kr.Type == "string" && err == nil {
			probed = max(probed, min(limit, maxProbed))
		}
	}
	for i := range probed {
		found = append(found, engine.Found{Keys: []string{s.PermitKey(key, i)}})
	}
	permits, found = permitKeys(found), found[:len(s.Nodes)]
	var rest [][]R // the unsearched nodes'
	if len(permits) > 0 && slices.ContainsFunc(found, func(f engine.Found) bool { return !f.Searched }) {
		rest = do(permits, func(i int) bool { return !found[i].Searched })
	}
	out = make([][]R, len(permits))
	for k, key := range permits {
		out[k] = make([]R, len(s.Nodes))
		for i, f := range found {
			r, ok := mine[i][key]
			switch {
			case !f.Searched:
				r = rest[k][i]
			case f.Err != nil:
				r = absent(f.Err)
			case !ok:
				r = absent(nil)
			}
			out[k][i] = r
		}
	}
	return found, permits, out
}

// maxProbed bounds the permits looked for on a node that is not searched:
// those below its limit record's limit, up to this many.
const maxProbed = 1024

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
func permitKeys(found []engine.Found) []string {
	number := func(key string) int {
		_, after, _ := strings.Cut(key[strings.LastIndex(key, engine.PermitInfix):], engine.PermitInfix)
		n, err := strconv.Atoi(after)
		if err != nil || n < 0 || strconv.Itoa(n) != after {
			return -1
		}
		return n
	}
	var keys []string
	for _, f := range found {
		for _, key := range f.Keys {
			if number(key) >= 0 && !slices.Contains(keys, key) {
				keys = append(keys, key)
			}
		}
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Compare(number(a), number(b)) })
	return keys
}
