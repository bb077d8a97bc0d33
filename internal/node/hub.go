package node

import (
	"math/bits"
	"slices"
	"sync"
	"time"
)

// ChannelPrefix starts the pub/sub channel on which the release script
// announces that a lock key was deleted: the channel is ChannelPrefix + key,
// and the message is the token that held it.
const ChannelPrefix = "quorumlock:released:"

// Channel returns the release channel of key.
func Channel(key string) string { return ChannelPrefix + key }

// hub dispatches release notifications to the waiters of one node set in
// this process. Each release is published by every node that deleted the key,
// with the token as message. The hub counts the copies of each token and,
// when a majority of the nodes have announced the release (so an attempt now
// finds a majority free), wakes only the waiter that has waited longest for
// that key. Waking every waiter would make them all ask the nodes at once and
// split the votes so that none gets a majority; waking one hands the lock over
// in first-come order, which also bounds how long anyone waits. Each waiter
// keeps its own timers, so a lost message only costs time.
type hub struct {
	mu       sync.Mutex
	nodes    []*Node
	sessions []*session // one per node while any channel is watched; nil entries for nodes without pub/sub
	channels map[string]*queue
}

type queue struct {
	waiters   []*Waiter // first come, first woken
	confirmed bool      // some node confirmed the subscription
	listening uint64    // bit i: node i confirmed the subscription (nodes beyond 64 are not counted)
	recent    []release // the latest releases, to count their copies
}

type release struct {
	token  string
	copies int
}

// Waiter is one LockContext call's place in the queue of a key. Its methods
// are safe for concurrent use.
type Waiter struct {
	h       *hub
	channel string
	wake    chan struct{} // one slot
	once    sync.Once
}

// Wake is signalled when the waiter should look at the lock again: when the
// subscription is confirmed by a node (a release from then on is heard), when
// it joins a confirmed, empty queue (a release since its last attempt woke
// nobody), and when a release reaches it at the head of the queue.
func (w *Waiter) Wake() <-chan struct{} { return w.wake }

// Stop leaves the queue. The last waiter of a key unsubscribes from its
// channel; the last waiter of the set closes the pub/sub connections.
func (w *Waiter) Stop() { w.once.Do(func() { w.h.leave(w, false) }) }

// GiveUp leaves the queue like Stop, for a waiter that did not get the lock
// (its ctx ended, or its tries ran out): if it was the head, the new head is
// woken to look at the lock at once, since a release may have woken only the
// one that is leaving.
func (w *Waiter) GiveUp() { w.once.Do(func() { w.h.leave(w, true) }) }

// Wait queues a waiter for releases of the key whose release channel is
// channel (Channel(key)) on the set's nodes. It never blocks: subscriptions
// are made in the background.
func (s *Set) Wait(channel string) *Waiter { return s.hubs().join(channel) }

// Queued reports whether waiters of this process are already queued on a
// release channel. A new LockContext call then queues behind them instead of
// trying first, so that in a process the lock passes in first-come order.
func (s *Set) Queued(channel string) bool {
	h := s.hubs()
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.channels[channel]
	return q != nil && q.confirmed && len(q.waiters) > 0
}

// Waiting returns how many LockContext calls of this process are queued on a
// release channel.
func (s *Set) Waiting(channel string) int {
	h := s.hubs()
	h.mu.Lock()
	defer h.mu.Unlock()
	if q := h.channels[channel]; q != nil {
		return len(q.waiters)
	}
	return 0
}

func (s *Set) hubs() *hub {
	s.hubOnce.Do(func() { s.hub = &hub{nodes: s.Nodes, channels: map[string]*queue{}} })
	return s.hub
}

func (h *hub) join(channel string) *Waiter {
	w := &Waiter{h: h, channel: channel, wake: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sessions == nil {
		h.sessions = make([]*session, len(h.nodes))
		for i, n := range h.nodes {
			h.sessions[i] = h.openSession(n, i)
		}
	}
	q := h.channels[channel]
	if q == nil {
		q = &queue{}
		h.channels[channel] = q
		h.broadcast(request{subscribe: true, channel: channel})
	}
	q.waiters = append(q.waiters, w)
	if q.confirmed && len(q.waiters) == 1 {
		// The new head: a release since its last attempt woke nobody.
		signal(w.wake)
	}
	return w
}

func (h *hub) leave(w *Waiter, passOn bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.channels[w.channel]
	wasHead := len(q.waiters) > 0 && q.waiters[0] == w
	q.waiters = slices.DeleteFunc(q.waiters, func(x *Waiter) bool { return x == w })
	if len(q.waiters) > 0 {
		if passOn && wasHead {
			signal(q.waiters[0].wake)
		}
		return
	}
	delete(h.channels, w.channel)
	h.broadcast(request{channel: w.channel})
	if len(h.channels) == 0 {
		h.broadcast(request{close: true})
		h.sessions = nil // the next waiter opens new connections
	}
}

// broadcast sends a request to every node's session. h.mu must be held.
func (h *hub) broadcast(r request) {
	for _, s := range h.sessions {
		if s != nil {
			s.send(r)
		}
	}
}

// released handles one node's release message: the copy that makes a
// majority wakes the head of the queue. While fewer than a majority of the
// nodes have confirmed the subscription (some are down, or still subscribing),
// a majority of copies may never come, so the first copy wakes the head too.
func (h *hub) released(channel, token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.channels[channel]
	if q == nil {
		return
	}
	r := q.release(token)
	r.copies++
	need := len(h.nodes)/2 + 1
	switch {
	case r.copies == need || (r.copies == 1 && bits.OnesCount64(q.listening) < need):
		q.wakeHead()
	case r.copies == 1:
		// A node whose subscription was confirmed only after the release
		// was published on it never sends its copy, so the majority may
		// never come although the key is free. The copies of one release
		// arrive within a round trip of one another: if they have not
		// within lateCopies, wake the head anyway.
		time.AfterFunc(lateCopies, func() { h.lateCopies(channel, token, need) })
	}
}

// lateCopies is how long after the first copy of a release the hub waits for
// a majority of copies before it wakes the head of the queue anyway.
const lateCopies = 20 * time.Millisecond

// lateCopies wakes the head if the release of token on channel still has
// fewer than need copies (and is not a local release, whose copies are
// ignored).
func (h *hub) lateCopies(channel, token string, need int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.channels[channel]
	if q == nil {
		return
	}
	for _, r := range q.recent {
		if r.token == token && r.copies > 0 && r.copies < need {
			q.wakeHead()
		}
	}
}

// Released tells the set's waiters in this process that a Mutex of the set
// has just released the key of channel with token on a majority: the head of
// the queue is woken at once, without waiting for the nodes' messages, whose
// copies are then ignored.
func (s *Set) Released(channel, token string) {
	h := s.hubs()
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.channels[channel]
	if q == nil {
		return
	}
	q.release(token).copies = -len(h.nodes) // never reaches a majority now
	q.wakeHead()
}

// release returns the record of token's release, creating it.
func (q *queue) release(token string) *release {
	for i := range q.recent {
		if q.recent[i].token == token {
			return &q.recent[i]
		}
	}
	if len(q.recent) == 8 {
		q.recent = q.recent[1:]
	}
	q.recent = append(q.recent, release{token: token})
	return &q.recent[len(q.recent)-1]
}

func (q *queue) wakeHead() {
	if len(q.waiters) > 0 {
		signal(q.waiters[0].wake)
	}
}

// confirmed handles node i's confirmation of a subscription: the first one
// makes every waiter queued so far look again, since a release before the
// subscription was not heard.
func (h *hub) confirmed(channel string, i int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.channels[channel]
	if q == nil {
		return
	}
	if i < 64 {
		q.listening |= 1 << i
	}
	if q.confirmed {
		return
	}
	q.confirmed = true
	for _, w := range q.waiters {
		signal(w.wake)
	}
}

// signal sends on a channel with a buffer of one, without blocking.
func signal(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
