package node

import (
	"slices"
	"sync"
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
func (w *Waiter) Stop() { w.once.Do(func() { w.h.leave(w) }) }

// Wait queues a waiter for releases of key on the set's nodes. It never
// blocks: subscriptions are made in the background.
func (s *Set) Wait(key string) *Waiter { return s.hubs().join(Channel(key)) }

// Queued reports whether waiters of this process are already queued for key.
// A new LockContext call then queues behind them instead of trying first, so
// that in a process the lock passes in first-come order.
func (s *Set) Queued(key string) bool {
	h := s.hubs()
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.channels[Channel(key)]
	return q != nil && q.confirmed && len(q.waiters) > 0
}

// Waiting returns how many LockContext calls of this process are queued for
// key's release.
func (s *Set) Waiting(key string) int {
	h := s.hubs()
	h.mu.Lock()
	defer h.mu.Unlock()
	if q := h.channels[Channel(key)]; q != nil {
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
			h.sessions[i] = h.openSession(n)
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

func (h *hub) leave(w *Waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.channels[w.channel]
	q.waiters = slices.DeleteFunc(q.waiters, func(x *Waiter) bool { return x == w })
	if len(q.waiters) > 0 {
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
// majority wakes the head of the queue.
func (h *hub) released(channel, token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.channels[channel]
	if q == nil {
		return
	}
	r := q.release(token)
	r.copies++
	if r.copies == len(h.nodes)/2+1 {
		q.wakeHead()
	}
}

// Released tells the set's waiters in this process that a Mutex of the set
// has just released key with token on a majority: the head of the key's
// queue is woken at once, without waiting for the nodes' messages, whose
// copies are then ignored.
func (s *Set) Released(key, token string) {
	h := s.hubs()
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.channels[Channel(key)]
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

// confirmed handles a node's confirmation of a subscription: every waiter
// queued so far looks again, since a release before the subscription was
// not heard.
func (h *hub) confirmed(channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.channels[channel]
	if q == nil || q.confirmed {
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
