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

// channelPrefix starts the pub/sub channels of release notifications: a
// hub's own, channelPrefix + "@" + its id, and each key's, Channel(key).
const channelPrefix = "quorumlock:released:"

// Channel returns key's own channel, which also names its waiters in a hub.
func Channel(key string) string { return channelPrefix + key }

// Hub dispatches the release messages of one node set's nodes to the waiters
// of this process (docs/design.md, "Who is woken"): on the hub's channel, a
// release ("r <token> <head> <key>", one copy per node that deleted the key)
// wakes the waiter the nodes name once a majority of copies came; a turn
// ("t <head> <key>") wakes the one named at once. A lost message only costs a
// waiter its fallback timer. A Hub is safe for concurrent use.
type Hub struct {
	mu        sync.Mutex
	id        string // names this hub's waiters and channel
	channel   string // where the nodes tell this hub's waiters
	nodes     []*node.Node
	clock     clock.Clock
	sessions  []*session // one per node while anyone waits; nil for a node without pub/sub
	listening uint64     // bit i: node i confirmed the subscription (a set has at most 64 nodes)
	channels  map[string]*queue
	sweeping  bool // a sweep of idle queues is scheduled
}

// linger is how long a queue is kept after its last waiter left; the
// connections close when the last queue is dropped.
const linger = time.Second

type queue struct {
	waiters   []*Waiter // in the order they joined
	watchers  int       // waiters that watch the key's channel (Watch)
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
	return &Hub{id: id, channel: channelPrefix + "@" + id, nodes: nodes, clock: c, channels: map[string]*queue{}}
}

// NewID returns a new waiter id, by which the nodes tell its waiter on the
// hub's channel.
func (h *Hub) NewID() string { return h.id + "." + node.NewToken() }

// Waiter is one waiting call's place among the waiters of a key in this
// process, or an observer of the key's channel (Watch). Its methods are safe
// for concurrent use.
type Waiter struct {
	h        *Hub
	channels []string
	id       string        // "" for a watcher
	wake     chan struct{} // one slot
	recheck  chan struct{} // one slot
	once     sync.Once
}

// Wake is signalled when the nodes name the waiter as the next owner; a
// watcher's, on every message on the key's channel and each confirmation of
// that subscription (a message published before it was not heard).
func (w *Waiter) Wake() <-chan struct{} { return w.wake }

// Recheck is signalled when a node first confirms the hub's subscription,
// and again after a reconnection: a release published before was not heard.
func (w *Waiter) Recheck() <-chan struct{} { return w.recheck }

// Stop leaves the queue; calling it again does nothing.
func (w *Waiter) Stop() { w.once.Do(func() { w.h.leave(w) }) }

// Wait queues a waiter, known to the nodes as id (from NewID), for the
// releases of the keys whose channels are channels. It never blocks: the
// subscription is made in the background. A wake-up the nodes sent to id
// shortly before Wait is signalled at once.
func (h *Hub) Wait(id string, channels ...string) *Waiter {
	w := &Waiter{h: h, channels: channels, id: id, wake: make(chan struct{}, 1), recheck: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.openSessionsLocked()
	for _, channel := range channels {
		q := h.channels[channel]
		if q == nil {
			q = &queue{}
			h.channels[channel] = q
		}
		if id == "" {
			if q.watchers++; q.watchers == 1 {
				h.broadcast(request{subscribe: channel})
			}
		}
		q.waiters = append(q.waiters, w)
		q.idleSince = time.Time{}
		if i := slices.Index(q.early, id); i >= 0 {
			q.early = slices.Delete(q.early, i, i+1)
			signal(w.wake)
		}
	}
	return w
}

// Watch returns a watcher of channel, a key's own (Channel), subscribed in
// the background; it never blocks. Call Stop when done.
func (h *Hub) Watch(channel string) *Waiter { return h.Wait("", channel) }

// idleQueueLocked returns the queue of channel for a message, creating it
// idle, to be swept unless a waiter joins. h.mu is held.
func (h *Hub) idleQueueLocked(channel string) *queue {
	q := h.channels[channel]
	if q == nil {
		q = &queue{idleSince: h.clock.Now()}
		h.channels[channel] = q
		h.scheduleSweep() // as for every queue nobody waits in
	}
	return q
}

// Waiting returns how many calls of this process wait on a release channel
// (watchers are not counted).
func (h *Hub) Waiting(channel string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if q := h.channels[channel]; q != nil {
		return len(q.waiters) - q.watchers
	}
	return 0
}

func (h *Hub) leave(w *Waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, channel := range w.channels {
		q := h.channels[channel]
		q.waiters = slices.DeleteFunc(q.waiters, func(x *Waiter) bool { return x == w })
		if w.id == "" {
			if q.watchers--; q.watchers == 0 {
				h.broadcast(request{unsubscribe: channel})
			}
		}
		if len(q.waiters) == 0 {
			q.idleSince = h.clock.Now()
			h.scheduleSweep()
		}
	}
}

// scheduleSweep arranges for idle queues to be dropped. h.mu is held.
func (h *Hub) scheduleSweep() {
	if !h.sweeping {
		h.sweeping = true
		h.clock.AfterFunc(linger, func() { h.dropIdle(linger) })
	}
}

// CloseIdle drops every queue nobody waits in at once, and closes the pub/sub
// connections if none is left: for the node set's Close.
func (h *Hub) CloseIdle() { h.dropIdle(0) }

// dropIdle drops the queues idle for at least idle, and closes the
// connections when none is left.
func (h *Hub) dropIdle(idle time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweeping = false // a sweep scheduled is made again if one is still needed
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
	if len(h.channels) == 0 && h.sessions != nil {
		h.broadcast(request{close: true})
		h.sessions = nil // the next waiter opens new connections
		h.listening = 0
	}
}

// broadcast sends a request to every node's session. h.mu is held.
func (h *Hub) broadcast(r request) {
	for _, s := range h.sessions {
		if s != nil {
			s.send(r)
		}
	}
}

// message handles one message of a node on the hub's channel: a release's
// copy wakes the waiter the copies name once they make a majority, at the
// first while fewer than a majority listen, or lateCopies after the first; a
// turn wakes the one named at once.
func (h *Hub) message(payload string) {
	kind, rest, _ := strings.Cut(payload, " ")
	token := ""
	if kind == "r" {
		token, rest, _ = strings.Cut(rest, " ")
	}
	head, key, _ := strings.Cut(rest, " ")
	channel := Channel(key)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sessions == nil || kind != "r" && (kind != "t" || head == "") {
		return
	}
	q := h.idleQueueLocked(channel)
	if kind == "t" {
		q.wake(head)
		return
	}
	r := q.release(token)
	if r.copies < 0 {
		return
	}
	r.copies++
	r.heads = append(r.heads, head)
	need := quorum.Majority(len(h.nodes))
	switch {
	case r.copies == need || (r.copies == 1 && bits.OnesCount64(h.listening) < need):
		q.wake(Head(r.heads))
	case r.copies == 1:
		h.clock.AfterFunc(lateCopies, func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if q := h.channels[channel]; q != nil {
				for i := range q.recent {
					if r := &q.recent[i]; r.token == token && r.copies > 0 && r.copies < need {
						q.wake(Head(r.heads))
					}
				}
			}
		})
	}
}

// lateCopies is how long after a release's first copy the named waiter is
// woken without a majority of copies.
const lateCopies = 20 * time.Millisecond

// watched handles a message, or a subscription's confirmation, on a key's
// channel: it wakes the key's watchers.
func (h *Hub) watched(channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if q := h.channels[channel]; q != nil {
		for _, w := range q.waiters {
			if w.id == "" {
				signal(w.wake)
			}
		}
	}
}

// Released tells the hub that a holder in this process released the key of
// channel with token on a majority, naming head next: head is woken at once
// if it is one of this hub's, and the nodes' copies are ignored.
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

// Head returns the waiter most of heads name (the first on a tie), the next
// owner by the nodes that released; "" (an empty queue) outvotes no one.
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

// wake signals the waiter named id, or keeps it for a waiter about to join.
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
// since the connections opened, or one after a reconnection, rechecks all.
func (h *Hub) confirm(i int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	bit := uint64(1) << i
	first, again := h.listening == 0, h.listening&bit != 0
	if h.listening |= bit; !first && !again {
		return
	}
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
