package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"
)

// waitersResult is scenario 7 for one library.
type waitersResult struct {
	Instances   int
	Obtained    int
	AllIn       time.Duration // from the start to the last successful Lock's return
	Failed      int           // waiters that gave up at their deadline or failed
	First       string        // the first failure
	Unlocks     int           // failed Unlock calls
	FirstUnlock string        // the first failed Unlock
}

// waitersScenario is scenario 7: for each library, s.waiters independent
// instances (each its own clients, warm) with one waiter each, all calling
// Lock on one name at once (ctx of s.waitersTimeout), holding s.hold and
// unlocking. Libraries in turn, quorumlock first.
func waitersScenario(ctx context.Context, out io.Writer, addrs []string, s settings) ([]waitersResult, error) {
	results := make([]waitersResult, numLoadLibs)
	for lib := range numLoadLibs {
		r, err := runWaiters(ctx, lib, addrs, s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", loadNames[lib], err)
		}
		results[lib] = r
		fmt.Fprintf(out, "%-12s %-20s %d of %d obtained, all in %v; %d failed%s; %d failed unlocks%s\n", "waiters", loadNames[lib],
			r.Obtained, r.Instances, r.AllIn.Round(time.Millisecond), r.Failed, firstNote(r.First), r.Unlocks, firstNote(r.FirstUnlock))
	}
	return results, nil
}

func runWaiters(ctx context.Context, lib int, addrs []string, s settings) (waitersResult, error) {
	libs := make([]*loadLib, 0, s.waiters)
	defer func() {
		for _, l := range libs {
			_ = l.Close()
		}
	}()
	for range s.waiters {
		l, err := newLoadLib(lib, addrs)
		if err != nil {
			return waitersResult{}, err
		}
		libs = append(libs, l)
		if err := l.warm(ctx, 1); err != nil {
			return waitersResult{}, err
		}
	}
	name := fmt.Sprintf("bench:waiters:%s:%d", loadNames[lib], time.Now().UnixNano())
	res := waitersResult{Instances: s.waiters}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for _, l := range libs {
		lk := l.newLock(name, 0)
		wg.Go(func() {
			lockCtx, cancel := context.WithTimeout(ctx, s.waitersTimeout)
			defer cancel()
			err := lk.Lock(lockCtx)
			got := time.Since(start)
			var uerr error
			if err == nil {
				time.Sleep(s.hold)
				uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
				uerr = lk.Unlock(uctx)
				ucancel()
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				res.Failed++
				if res.First == "" {
					res.First = err.Error()
				}
			default:
				res.Obtained++
				res.AllIn = max(res.AllIn, got)
			}
			if uerr != nil {
				res.Unlocks++
				if res.FirstUnlock == "" {
					res.FirstUnlock = uerr.Error()
				}
			}
		})
	}
	wg.Wait() // bounded by s.waitersTimeout + opTimeout
	if err := ctx.Err(); err != nil {
		return waitersResult{}, err
	}
	return res, nil
}

func firstNote(first string) string {
	if first == "" {
		return ""
	}
	return ", first: " + first
}
