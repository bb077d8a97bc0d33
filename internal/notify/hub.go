package notify

import (
	"math/bits"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/quorum"
)

// ChannelPrefix starts the pub/sub channels of release notifications. The
// scripts tell a waiter of this version on its hub's channel, ChannelPrefix +
// "@" + the hub's id, that a key was released and it is first in the key's
// queue; they tell a waiter of an earlier version (whose id names no hub) on
// the key's own channel, ChannelPrefix + key.
const ChannelPrefix = "quorumlock:released:"

// Channel returns the release channel of key, which names a key's waiters
// within a hub.
func Channel(key string) string { return ChannelPrefix + key }

// Hub dispatches the release messages of one node set's nodes to the waiters
// of this process. Every node set has its own channel on every node, and the
// scripts publish there only what concerns its waiters: a release ("r <token>
// <head> <key>") is published by every node that deleted the key, naming the
// waiter first in that node's queue; once a majority of the nodes have
// announced it (so an attempt now finds a majority free), the hub wakes that
// waiter. A turn message ("t <head> <key>") wakes the named waiter at once.
// So a release costs a message per node to one process, however many
// processes wait. Each waiter keeps its own timers, so a lost message only
// costs time. A Hub is safe for concurrent use.
type Hub struct {
	mu        sync.Mutex
	id        string // names this hub's waiters and channel
	channel   string // where the nodes tell this hub's waiters
	nodes     []*node.Node
	clock     clock.Clock
	sessions  []*session // one per node while anyone waits; nil entries for nodes without pub/sub
	listening uint64     // bit i: node i confirmed the subscription (nodes beyond 64 are not counted)
	confirmed bool       // some node confirmed the subscription since the sessions opened
	channels  map[string]*queue
	watchers  map[string][]*Watcher // by key release channel (watch.go)
	sweeping  bool                  // a sweep of idle queues is scheduled
}

// linger is how long a key's queue is kept after its last waiter left, and
// the pub/sub connections open after the last queue was dropped: a service
// that locks a name again and again (a worker loop, a job every few seconds)
// keeps its subscription instead of dialing and subscribing anew for every
// wait, and never misses a release while a subscription is being confirmed.
const linger = time.Second

type queue struct {
	waiters   []*Waiter // in the order they joined
	idleSince time.Time // when the last waiter left; zero while any waits
	recent    []release // the latest releases, to count their copies
	early     []string  // waiters woken before they joined (newest last)
}

type release struct {
	token  string
	copies int      // negative: released by this process, copies are ignored
	heads  []string // the head each copy named
}

// NewHub returns the hub of the node set made of nodes. Timers run on c.
func NewHub(nodes []*node.Node, c clock.Clock) *Hub {
	id := node.NewToken()
	return &Hub{id: id, channel: ChannelPrefix + "@" + id, nodes: nodes, clock: c, channels: map[string]*queue{}}
}

// NewID returns a new waiter id of this hub: the nodes tell the waiter known
// by it on the hub's channel.
func (h *Hub) NewID() string { return h.id + "." + node.NewToken() }

// Waiter is one waiting call's place among the waiters of a key in this
// process. Its methods are safe for concurrent use.
type Waiter struct {
	h        *Hub
	channels []string
	id       string
	wake     chan struct{} // one slot
	recheck  chan struct{} // one slot
	once     sync.Once
}

// Wake is signalled when the waiter should look at the lock again: when the
// nodes name it as the next owner.
func (w *Waiter) Wake() <-chan struct{} { return w.wake }

// Recheck is signalled when a node confirms the hub's subscription for the
// first time since the connections opened, or again after a reconnection: a
// release published before then was not heard, so the waiter may look once
// more, though nothing says the lock is free.
func (w *Waiter) Recheck() <-chan struct{} { return w.recheck }

// Stop leaves the queue. The last waiter of the set closes the pub/sub
// connections once they have lingered.
func (w *Waiter) Stop() { w.once.Do(func() { w.h.leave(w) }) }

// Wait queues a waiter, known to the nodes as id (from NewID), for the
// releases of the keys whose release channels are channels (one, or those of
// a lock on several keys). It never blocks: the subscription is made in the
// background. A wake-up the nodes sent to id before Wait is kept and
// signalled at once.
func (h *Hub) Wait(id string, channels ...string) *Waiter {
	w := &Waiter{h: h, channels: channels, id: id, wake: make(chan struct{}, 1), recheck: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.openSessionsLocked()
	for _, channel := range channels {
		q := h.queueLocked(channel)
		q.waiters = append(q.waiters, w)
		q.idleSince = time.Time{}
		if i := slices.Index(q.early, id); i >= 0 {
			q.early = slices.Delete(q.early, i, i+1)
			signal(w.wake)
		}
	}
	return w
}

// queueLocked returns the queue of channel, creating it idle. h.mu must be
// held.
func (h *Hub) queueLocked(channel string) *queue {
	q := h.channels[channel]
	if q == nil {
		q = &queue{idleSince: h.clock.Now()}
		h.channels[channel] = q
	}
	return q
}

// idleQueueLocked returns the queue of channel for a message, creating it
// idle, to be swept unless a waiter joins. h.mu must be held.
func (h *Hub) idleQueueLocked(channel string) *queue {
	q := h.queueLocked(channel)
	if len(q.waiters) == 0 {
		h.scheduleSweep()
	}
	return q
}

// Waiting returns how many calls of this process wait on a release channel.
func (h *Hub) Waiting(channel string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if q := h.channels[channel]; q != nil {
		return len(q.waiters)
	}
	return 0
}

func (h *Hub) leave(w *Waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, channel := range w.channels {
		q := h.channels[channel]
		q.waiters = slices.DeleteFunc(q.waiters, func(x *Waiter) bool { return x == w })
		if len(q.waiters) == 0 {
			q.idleSince = h.clock.Now()
			h.scheduleSweep()
		}
	}
}

// scheduleSweep arranges for idle queues to be dropped once they have
// lingered. h.mu must be held.
func (h *Hub) scheduleSweep() {
	if !h.sweeping {
		h.sweeping = true
		h.clock.AfterFunc(linger, h.sweep)
	}
}

// sweep drops the queues idle for linger, and closes the pub/sub connections
// when none is left.
func (h *Hub) sweep() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweeping = false
	h.dropIdleLocked(linger)
}

// CloseIdle drops at once every queue nobody waits in, and closes the pub/sub
// connections if none is left, instead of letting them linger: for the node
// set's Close.
func (h *Hub) CloseIdle() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dropIdleLocked(0)
}

// dropIdleLocked drops the queues idle for at least idle, and closes the
// connections when no queue is left. h.mu must be held.
func (h *Hub) dropIdleLocked(idle time.Duration) {
	now := h.clock.Now()
	for channel, q := range h.channels {
		switch {
		case len(q.waiters) > 0:
		case now.Sub(q.idleSince) >= idle:
			delete(h.channels, channel)
		default:
			h.scheduleSweep()
		}
	}
	if len(h.channels) == 0 && len(h.watchers) == 0 && h.sessions != nil {
		h.broadcast(request{close: true})
		h.sessions = nil // the next waiter opens new connections
		h.listening, h.confirmed = 0, false
	}
}

// broadcast sends a request to every node's session. h.mu must be held.
func (h *Hub) broadcast(r request) {
	for _, s := range h.sessions {
		if s != nil {
			s.send(r)
		}
	}
}

// message handles one message of a node on the hub's channel.
func (h *Hub) message(payload string) {
	kind, rest, _ := strings.Cut(payload, " ")
	switch kind {
	case "r":
		token, rest, _ := strings.Cut(rest, " ")
		head, key, _ := strings.Cut(rest, " ")
		h.released(Channel(key), token, head)
	case "t":
		head, key, _ := strings.Cut(rest, " ")
		h.turn(Channel(key), head)
	}
}

// released handles one node's copy of a release: the copy that makes a
// majority wakes the waiter the copies name. While fewer than a majority of
// the nodes have confirmed the subscription (some are down, or still
// subscribing), a majority of copies may never come, so the first copy
// wakes too.
func (h *Hub) released(channel, token, head string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sessions == nil {
		return
	}
	q := h.idleQueueLocked(channel)
	r := q.release(token)
	if r.copies < 0 {
		return
	}
	r.copies++
	r.heads = append(r.heads, head)
	need := quorum.Majority(len(h.nodes))
	switch {
	case r.copies == need || (r.copies == 1 && bits.OnesCount64(h.listening) < need):
		q.wake(r.head())
	case r.copies == 1:
		// A node whose subscription was confirmed only after the release
		// was published on it never sends its copy, so the majority may
		// never come although the key is free. The copies of one release
		// arrive within a round trip of one another: if they have not
		// within lateCopies, wake anyway.
		h.clock.AfterFunc(lateCopies, func() { h.lateCopies(channel, token, need) })
	}
}

// lateCopies is how long after the first copy of a release the hub waits for
// a majority of copies before it wakes the named waiter anyway.
const lateCopies = 20 * time.Millisecond

func (h *Hub) lateCopies(channel, token string, need int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.channels[channel]
	if q == nil {
		return
	}
	for i := range q.recent {
		if r := &q.recent[i]; r.token == token && r.copies > 0 && r.copies < need {
			q.wake(r.head())
		}
	}
}

// turn wakes the waiter named id.
func (h *Hub) turn(channel, id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sessions != nil && id != "" {
		h.idleQueueLocked(channel).wake(id)
	}
}

// Released tells the hub that a holder in this process has just released the
// key of channel with token on a majority, and that head is first in the
// nodes' queue: the waiter is woken at once if it is one of this hub's,
// without waiting for the nodes' messages, whose copies are then ignored.
func (h *Hub) Released(channel, token, head string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.channels[channel]
	if q == nil {
		return
	}
	q.release(token).copies = -1
	q.wake(head)
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

func (r *release) head() string { return Head(r.heads) }

// Head returns the waiter most of heads name (the first such on a tie): the
// next owner, by the nodes that released. "" (a node whose queue was empty)
// names no one, and does not outvote a node that names a waiter.
func Head(heads []string) string {
	best, bestN := "", 0
	for _, h := range heads {
		if h == "" {
			continue
		}
		n := 0
		for _, x := range heads {
			if x == h {
				n++
			}
		}
		if n > bestN {
			best, bestN = h, n
		}
	}
	return best
}

// wake signals the waiter named id; one that has not joined yet (its attempt
// queued it on the nodes, and it is about to wait) is signalled when it does.
func (q *queue) wake(id string) {
	if id == "" {
		return
	}
	for _, w := range q.waiters {
		if w.id == id {
			signal(w.wake)
			return
		}
	}
	if len(q.early) == 4 {
		q.early = q.early[1:]
	}
	q.early = append(q.early, id)
}

// confirm handles node i's confirmation of the hub's subscription: the first
// one since the connections opened, and one that comes again after a
// reconnection, make every waiter look again, since a release published
// before it was not heard.
func (h *Hub) confirm(i int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var bit uint64
	if i < 64 {
		bit = 1 << i
	}
	again := h.listening&bit != 0
	h.listening |= bit
	if h.confirmed && !again {
		return
	}
	h.confirmed = true
	for _, q := range h.channels {
		for _, w := range q.waiters {
			signal(w.recheck)
		}
	}
}

// signal sends on a channel with a buffer of one, without blocking.
func signal(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
