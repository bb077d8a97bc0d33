package engine

import (
	"context"
	"strconv"
	"sync"

	"github.com/quorumlock/quorumlock/internal/keyspace"
)

// Gate is an attempt's turn on a key among this process's attempts, which
// so never split the nodes' votes ("Waiting").
type Gate struct {
	set    *Set
	key    string
	turn   chan struct{} // one slot: taken by the attempt in progress
	users  int           // attempts holding or waiting for turn; guarded by set.gatesMu
	latest error         // the outcome of the latest decided attempt, nil if obtained or none; guarded by set.gatesMu
}

// gatePool recycles gates: an attempt on a key nobody else tries allocates nothing.
var gatePool = sync.Pool{New: func() any { return &Gate{turn: make(chan struct{}, 1)} }}

// BeginAttempt waits for key's turn and returns the gate End gives back (ctx
// ending first: its error). If optional and another attempt runs or waits,
// it returns no gate and no error. Without a gate, latest is the error of
// the latest attempt on key decided meanwhile, if any: what the nodes said
// last ("Waiting").
func (s *Set) BeginAttempt(ctx context.Context, key string, optional bool) (g *Gate, latest, err error) {
	s.gatesMu.Lock()
	g = s.gates[key]
	if g != nil && optional {
		defer s.gatesMu.Unlock()
		return nil, g.latest, nil
	}
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
		return g, nil, nil
	default: // a free turn is taken even if ctx has ended
	}
	select {
	case g.turn <- struct{}{}:
		return g, nil, nil
	case <-ctx.Done():
		return nil, g.leave(), ctx.Err()
	}
}

// End ends the attempt, decided with outcome if decided: the next one
// waiting on the key goes.
func (g *Gate) End(outcome error, decided bool) {
	if decided {
		g.set.gatesMu.Lock()
		g.latest = outcome
		g.set.gatesMu.Unlock()
	}
	<-g.turn
	g.leave()
}

// leave gives up g's use, and returns the latest outcome it recorded.
func (g *Gate) leave() (latest error) {
	s := g.set
	s.gatesMu.Lock()
	defer s.gatesMu.Unlock()
	latest = g.latest
	if g.users--; g.users == 0 {
		delete(s.gates, g.key)
		g.set, g.key, g.latest = nil, "", nil
		gatePool.Put(g)
	}
	return latest
}

// firsts holds, per node set this process met (Set.Identity: whichever of
// its Redlocks on the same nodes and key prefix) and on Cluster nodes per
// hash slot, a channel closed when the first attempt there ended.
var firsts sync.Map

// firstContact returns once this process's first attempt on the set, and on
// Cluster nodes the first on key's slot, has ended; or, if there is none
// yet, makes this attempt the first: end, called when it ends, lets the
// others go (ctx ending first: its error). With the restart quarantine on,
// one process's first locks so make the nodes' markers in one acquisition:
// the later ones of several would keep their nodes out ("Restart quarantine").
func (s *Set) firstContact(ctx context.Context, key string) (end func(), err error) {
	groups := []string{s.Identity()} // the set; then, on Cluster nodes, key's slot
	if s.Keys.Cluster {
		groups = append(groups, groups[0]+":"+strconv.Itoa(keyspace.Slot(key)))
	}
	for _, g := range groups {
		ended, begun := firsts.Load(g)
		if !begun {
			if ended, begun = firsts.LoadOrStore(g, make(chan struct{})); !begun {
				return func() { close(ended.(chan struct{})) }, nil
			}
		}
		select {
		case <-ended.(chan struct{}):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return func() {}, nil
}
