package safety_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/idempotency"
	"github.com/quorumlock/quorumlock/mutex"
	"github.com/quorumlock/quorumlock/redlock"
)

// The chaos clients' other primitives: a semaphore whose limit is below the
// number of clients, so that they contend for its permits, and a read-write
// lock. Multi-name locks take two of chaosNames, in either order, beside the
// Mutexes on those names.
const (
	chaosSemaphore = "chaos:sem"
	chaosLimit     = 2
	chaosRW        = "chaos:rw"
	chaosElection  = "chaos:elect"
)

// grant is one acquisition of any primitive, as the client loop drives it.
type grant struct {
	kind    string
	names   []string // the names its critical section holds
	limit   int      // a permit's semaphore limit
	until   func() time.Time
	fence   func() uint64
	extend  func(ctx context.Context) error
	release func(ctx context.Context) error
	// ended, if set, reports whether the acquisition ended by itself (a
	// leadership lost): the section is then not counted as protected.
	ended func() bool
	token string // a Mutex's: one seen before came by a pass within the process
}

// seenTokens holds the tokens of the Mutex acquisitions of this process: a
// pass hands the giver's token on (docs/design.md, "Passing a lock within a
// process"), so a token seen twice counts a pass.
var seenTokens sync.Map

// client is one chaos client's primitives over its own node set. Each
// primitive draws its TTL from chaosTTLs once.
type client struct {
	rs      *redlock.Redlock
	rng     *rand.Rand
	mutexes map[string]*mutex.Mutex // by name, or by names joined with "+" for a multi-name lock
	sem     *mutex.Semaphore
	rw      *mutex.RWMutex
	once    *idempotency.Store
	elect   *mutex.Election
	hot     string // if set, the only lock the client takes: a Mutex on this name
}

func newClient(rs *redlock.Redlock, rng *rand.Rand) *client {
	return &client{rs: rs, rng: rng, mutexes: map[string]*mutex.Mutex{},
		sem:  rs.NewSemaphore(chaosSemaphore, chaosLimit, clientOptions(rng)...),
		rw:   rs.NewRWMutex(chaosRW, clientOptions(rng)...),
		once: idempotency.New(rs, idempotency.WithRetention(onceRetention), idempotency.WithLockTTL(chaosTTLs[rng.IntN(len(chaosTTLs))])),
		// A leadership's TTL leaves its loss margin (TTL/10) room for a
		// starved scheduler: 1s or 2s.
		elect: rs.NewElection(chaosElection, mutex.WithTTL(chaosTTLs[1+rng.IntN(len(chaosTTLs)-1)]), mutex.WithRetryDelay(time.Millisecond, 32*time.Millisecond))}
}

// clientOptions are the options of one primitive: a TTL drawn from
// chaosTTLs, short retry delays, fencing tokens.
func clientOptions(rng *rand.Rand) []mutex.Option {
	return []mutex.Option{
		mutex.WithTTL(chaosTTLs[rng.IntN(len(chaosTTLs))]),
		mutex.WithRetryDelay(time.Millisecond, 32*time.Millisecond),
		mutex.WithFencing()}
}

// acquire draws a primitive (a Mutex or a permit 2 times in 9, a read lock 2
// in 9, the write lock, a multi-name lock or leadership 1 in 9) and waits
// for it until ctx ends.
func (c *client) acquire(ctx context.Context) (*grant, error) {
	if c.hot != "" {
		return c.lock(ctx, kindMutex, []string{c.hot})
	}
	switch k := c.rng.IntN(9); {
	case k == 8:
		return c.lead(ctx)
	case k < 2:
		return c.lock(ctx, kindMutex, []string{chaosNames[c.rng.IntN(len(chaosNames))]})
	case k < 4:
		p, err := c.sem.AcquireContext(ctx)
		if err != nil {
			return nil, err
		}
		return &grant{kind: kindPermit, names: []string{chaosSemaphore}, limit: chaosLimit,
			until: p.Until, fence: p.FencingToken, extend: p.ExtendContext, release: p.ReleaseContext}, nil
	case k < 6:
		return c.rwLock(ctx, kindRead, c.rw.RLockContext, c.rw.RUnlockContext)
	case k < 7:
		return c.rwLock(ctx, kindWrite, c.rw.LockContext, c.rw.UnlockContext)
	default:
		pick := c.rng.Perm(len(chaosNames))[:2]
		return c.lock(ctx, kindMulti, []string{chaosNames[pick[0]], chaosNames[pick[1]]})
	}
}

// lock takes the Mutex on names (a multi-name lock for two). A Mutex whose
// earlier Unlock could not reach a majority still holds its lock: it is
// released first, and the error (ErrAlreadyHeld) returned.
func (c *client) lock(ctx context.Context, kind string, names []string) (*grant, error) {
	key := strings.Join(names, "+")
	m := c.mutexes[key]
	switch {
	case m != nil:
	case kind == kindMulti:
		m = c.rs.NewMultiMutex(names, clientOptions(c.rng)...)
	default:
		// One TTL per name, so that the callers of a Redlock may pass its
		// Mutex among themselves (a pass needs the same TTL).
		ttl := chaosTTLs[(slices.Index(chaosNames, names[0])+len(chaosTTLs))%len(chaosTTLs)]
		m = c.rs.NewMutex(names[0], append(clientOptions(c.rng), mutex.WithTTL(ttl))...)
	}
	c.mutexes[key] = m
	if err := m.LockContext(ctx); err != nil {
		if errors.Is(err, mutex.ErrAlreadyHeld) && m.UnlockContext(context.WithoutCancel(ctx)) != nil {
			sleepCtx(ctx, 10*time.Millisecond) // nodes are down; do not spin
		}
		return nil, err
	}
	return &grant{kind: kind, names: names, until: m.Until, fence: m.FencingToken, extend: m.ExtendContext, release: m.UnlockContext, token: m.Value()}, nil
}

// lead campaigns in the election with a fresh value and reads back its
// fencing token with Leader. Its "extension" is a Proclaim, its release a
// Resign; its validity is not known to the client, so a section whose
// leadership ended (Done) before its exit is not counted as protected. A
// candidate still leading after a Resign failed resigns first, and the
// error (ErrAlreadyHeld) is returned.
func (c *client) lead(ctx context.Context) (*grant, error) {
	e, value := c.elect, strconv.FormatUint(c.rng.Uint64(), 36)
	if err := e.Campaign(ctx, value); err != nil {
		if errors.Is(err, mutex.ErrAlreadyHeld) && e.Resign(context.WithoutCancel(ctx)) != nil {
			sleepCtx(ctx, 10*time.Millisecond) // nodes are down; do not spin
		}
		return nil, err
	}
	done := e.Done()
	l, err := e.Leader(context.WithoutCancel(ctx))
	if err == nil && l.Value != value {
		err = fmt.Errorf("leads as %q, but Leader reads %+v", value, l)
	}
	if err != nil {
		_ = e.Resign(context.WithoutCancel(ctx))
		return nil, err
	}
	ended := func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
	return &grant{kind: kindLeader, names: []string{chaosElection}, fence: func() uint64 { return l.FencingToken },
		until:   func() time.Time { return time.Now().Add(time.Hour) }, // cut by ended
		extend:  func(ctx context.Context) error { return e.Proclaim(ctx, value+"+") },
		release: e.Resign, ended: ended}, nil
}

// observeLeaders counts what Observe delivers until ctx ends, and every
// leader older (by fencing token) than one delivered before it.
func observeLeaders(ctx context.Context, e *mutex.Election, stats *clientStats) {
	var last uint64
	for l := range e.Observe(ctx) {
		if l.FencingToken == 0 {
			continue // nobody leads
		}
		stats.observed.Add(1)
		if l.FencingToken < last {
			stats.observedBack.Add(1)
		}
		last = l.FencingToken
	}
}

// rwLock takes a read or the write lock with lock; unlock releases it. An
// RWMutex still holding an acquisition whose release failed is released
// first (RUnlock, or Unlock when what it holds is the write lock).
func (c *client) rwLock(ctx context.Context, kind string, lock, unlock func(context.Context) error) (*grant, error) {
	if err := lock(ctx); err != nil {
		if errors.Is(err, mutex.ErrAlreadyHeld) {
			release := context.WithoutCancel(ctx)
			if errors.Is(c.rw.RUnlockContext(release), mutex.ErrInvalid) {
				_ = c.rw.UnlockContext(release) // a failure leaves it to its TTL
			}
		}
		return nil, err
	}
	return &grant{kind: kind, names: []string{chaosRW}, until: c.rw.Until, fence: c.rw.FencingToken, extend: c.rw.ExtendContext, release: unlock}, nil
}

// runClient is one client's loop, observing the election all along
// (observeLeaders): until ctx ends, one time in 8 call an
// idempotency Store (runOnce); otherwise acquire a random
// primitive (bounded to 0.2 to 1s), run a critical section as long as
// pace says (sometimes extending the acquisition in the middle), writing
// to the fenced resource at its entry, middle and exit, record it into o
// with the acquisition's fencing token, release. It returns when ctx is
// done and its last acquisition is released.
func runClient(ctx context.Context, id string, rs *redlock.Redlock, rng *rand.Rand, hot string, work pace, o *oracle, stats *clientStats) {
	c := newClient(rs, rng)
	c.hot = hot
	var observer sync.WaitGroup
	defer observer.Wait()
	observer.Go(func() { observeLeaders(ctx, c.elect, stats) })
	for ctx.Err() == nil {
		if hot == "" && rng.IntN(8) == 0 {
			c.runOnce(ctx, id, o.record, stats)
			continue
		}
		lockCtx, cancel := context.WithTimeout(ctx, time.Duration(200+rng.IntN(800))*time.Millisecond)
		g, err := c.acquire(lockCtx)
		cancel()
		switch {
		case err == nil:
			stats.acquired.Add(1)
			stats.count(g.kind)
			if _, seen := seenTokens.LoadOrStore(g.token, true); seen && g.token != "" {
				stats.passes.Add(1)
			}
		case errors.Is(err, mutex.ErrAlreadyHeld):
			stats.alreadyHeld.Add(1)
			continue
		case errors.Is(err, mutex.ErrNodesUnavailable):
			stats.unavailable.Add(1)
			continue
		case errors.Is(err, mutex.ErrNotObtained):
			stats.held.Add(1)
			continue
		default:
			stats.otherLockErr.Add(1)
			continue
		}
		fence := g.fence()
		var stale *staleWrite
		writeResource := func() {
			if writesTo(g.kind) {
				stale = o.writeAll(g.names, fence, stale)
			}
		}
		enterWall, enter := time.Now(), monoNow()
		until := enter + g.until().Sub(enterWall).Nanoseconds()
		writeResource()
		time.Sleep(work(rng, g.kind, time.Duration(until-enter)))
		if rng.IntN(4) == 0 { // extend in the middle of the section
			switch err := g.extend(context.WithoutCancel(ctx)); {
			case err == nil:
				stats.extended.Add(1)
				now, mono := time.Now(), monoNow()
				until = mono + g.until().Sub(now).Nanoseconds()
				writeResource()
				time.Sleep(work(rng, g.kind, time.Duration(until-mono)))
			case errors.Is(err, mutex.ErrNotHeld):
				stats.extendLost.Add(1)
			default:
				stats.extendErr.Add(1)
			}
		}
		writeResource()
		exit := monoNow()
		if g.ended != nil && g.ended() {
			until = min(until, enter)
		}
		for _, name := range g.names {
			o.record(section{Client: id, Name: name, Enter: enter, Exit: exit, Until: until, Fence: fence, Kind: g.kind, Limit: g.limit, Stale: stale})
		}
		switch err := g.release(context.WithoutCancel(ctx)); {
		case err == nil:
			stats.unlocked.Add(1)
		case errors.Is(err, mutex.ErrNotHeld):
			stats.unlockNotHeld.Add(1)
		default:
			stats.unlockErr.Add(1)
		}
	}
}
