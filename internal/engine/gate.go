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
	set   *Set
	key   string
	turn  chan struct{} // one slot: taken by the attempt in progress
	users int           // attempts holding or waiting for turn; guarded by set.gatesMu
}

// gatePool recycles gates: an attempt on a key nobody else tries allocates nothing.
var gatePool = sync.Pool{New: func() any { return &Gate{turn: make(chan struct{}, 1)} }}

// BeginAttempt waits for key's turn and returns the gate End gives back (ctx
// ending first: its error). If optional and another attempt runs or waits,
// it returns no gate and no error.
func (s *Set) BeginAttempt(ctx context.Context, key string, optional bool) (*Gate, error) {
	s.gatesMu.Lock()
	g := s.gates[key]
	if g != nil && optional {
		s.gatesMu.Unlock()
		return nil, nil
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
		return g, nil
	default: // a free turn is taken even if ctx has ended
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
