package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"

	"github.com/quorumlock/quorumlock/mutex"
)

// burstConfig is one burst of scenario 8.
type burstConfig struct {
	Concurrent int
	TTL        time.Duration // 0: the library's default (8s)
}

// burstResult is one burst of scenario 8 for one library.
type burstResult struct {
	burstConfig
	Calls, Obtained int
	Elapsed         time.Duration
	// Failures by kind: "nodes unavailable" (quorumlock's ErrNodesUnavailable,
	// redsync's *RedisError), "deadline" (the call's ctx ended), "taken"
	// (another owner held it: impossible here, every name is distinct),
	// "other".
	Kinds        map[string]int
	First        string
	UnlockFailed int
	FirstUnlock  string
}

// Failed is the number of TryLock calls that failed, whatever the kind.
func (b *burstResult) Failed() int { return b.Calls - b.Obtained }

// burstScenario is scenario 8: for each config of s.bursts and each library
// (in turns), a fresh instance on its own clients, warmed with as many
// connections per node as calls in flight, makes s.burstCalls TryLock on
// distinct names, cfg.Concurrent at a time; each success is unlocked at once.
func burstScenario(ctx context.Context, out io.Writer, addrs []string, s settings) ([][]burstResult, error) {
	results := make([][]burstResult, numLoadLibs)
	for i := range results {
		results[i] = make([]burstResult, len(s.bursts))
	}
	for bi, cfg := range s.bursts {
		for _, lib := range order(numLoadLibs, bi) {
			r, err := runBurst(ctx, lib, addrs, cfg, s.burstCalls, bi)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", loadNames[lib], err)
			}
			results[lib][bi] = r
			fmt.Fprintf(out, "%-12s %-20s %d calls, %d at a time, TTL %v: %d obtained in %v; failed %v%s; %d failed unlocks%s\n",
				"burst", loadNames[lib], r.Calls, cfg.Concurrent, ttlName(cfg.TTL), r.Obtained, r.Elapsed.Round(time.Millisecond),
				kindsNote(r.Kinds), firstNote(r.First), r.UnlockFailed, firstNote(r.FirstUnlock))
		}
	}
	return results, nil
}

func ttlName(ttl time.Duration) string {
	if ttl == 0 {
		return "8s (default)"
	}
	return ttl.String()
}

func runBurst(ctx context.Context, kind int, addrs []string, cfg burstConfig, calls, round int) (burstResult, error) {
	lib, err := newLoadLib(kind, addrs)
	if err != nil {
		return burstResult{}, err
	}
	defer lib.Close()
	if err := lib.warm(ctx, cfg.Concurrent); err != nil {
		return burstResult{}, err
	}
	res := burstResult{burstConfig: cfg, Calls: calls, Kinds: map[string]int{}}
	var mu sync.Mutex
	sem := make(chan struct{}, cfg.Concurrent)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range calls {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return burstResult{}, ctx.Err()
		}
		lk := lib.newLock(fmt.Sprintf("bench:burst:%s:%d:%d:%d", loadNames[kind], round, start.UnixNano(), i), cfg.TTL)
		wg.Go(func() {
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, opTimeout)
			defer cancel()
			err := lk.TryLock(cctx)
			var uerr error
			if err == nil {
				uerr = lk.Unlock(cctx)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.Kinds[burstKind(err)]++
				if res.First == "" {
					res.First = err.Error()
				}
				return
			}
			res.Obtained++
			if uerr != nil {
				res.UnlockFailed++
				if res.FirstUnlock == "" {
					res.FirstUnlock = uerr.Error()
				}
			}
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	return res, ctx.Err()
}

// burstKind names the kind of a failed TryLock.
func burstKind(err error) string {
	var taken *redsync.ErrTaken
	var rerr *redsync.RedisError
	switch {
	case errors.Is(err, mutex.ErrNodesUnavailable), errors.As(err, &rerr):
		return "nodes unavailable"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	case errors.As(err, &taken), errors.Is(err, redsync.ErrFailed), errors.Is(err, mutex.ErrNotObtained):
		return "taken"
	}
	return errBurstOther.Error()
}

// kindsNote lists the failures by kind, "none" if there were none.
func kindsNote(kinds map[string]int) string {
	var parts []string
	for _, k := range []string{"nodes unavailable", "deadline", "taken", errBurstOther.Error()} {
		if kinds[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", kinds[k], k))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// errBurstOther names the failures of no known kind.
var errBurstOther = errors.New("other")
