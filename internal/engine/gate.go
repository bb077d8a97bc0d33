package engine

import (
	"context"
	"sync"
)

// Gate is the turn of one acquire attempt on one key among the attempts of a
// set in this process. Attempts that run at the same moment on the same key
// split the nodes between them so that none gets a majority (each fails, and
// releases what it took); taking turns, the first wins and the others find
// the lock held. Attempts in other processes can still split with ours: that
// is what the retry backoff is for.
type Gate struct {
	set   *Set
	key   string
	turn  chan struct{} // one slot: taken by the attempt in progress
	users int           // attempts holding or waiting for turn; guarded by set.gatesMu
}

// gatePool recycles gates, so that an attempt on a key nobody else is trying
// allocates nothing.
var gatePool = sync.Pool{New: func() any { return &Gate{turn: make(chan struct{}, 1)} }}

// BeginAttempt waits until no other attempt of this set on key is in
// progress, then returns the gate that End gives back. It blocks until then
// or until ctx ends, in which case it returns ctx.Err() and no gate. Safe for
// concurrent use.
func (s *Set) BeginAttempt(ctx context.Context, key string) (*Gate, error) {
	s.gatesMu.Lock()
	g := s.gates[key]
	if g == nil {
		if s.gates == nil {
			s.gates = map[string]*Gate{}
		}
		g = gatePool.Get().(*Gate)
		g.set, g.key = s, key
		s.gates[key] = g
	}
	g.users++
	s.gatesMu.Unlock()
	select {
	case g.turn <- struct{}{}:
		return g, nil
	default:
	}
	select {
	case g.turn <- struct{}{}:
		return g, nil
	case <-ctx.Done():
		g.leave()
		return nil, ctx.Err()
	}
}

// End ends the attempt: the next one waiting on the key goes.
func (g *Gate) End() {
	<-g.turn
	g.leave()
}

func (g *Gate) leave() {
	s := g.set
	s.gatesMu.Lock()
	defer s.gatesMu.Unlock()
	if g.users--; g.users == 0 {
		delete(s.gates, g.key)
		g.set, g.key = nil, ""
		gatePool.Put(g)
	}
}
