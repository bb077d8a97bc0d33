package notify

import (
	"context"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/node"
	"github.com/quorumlock/quorumlock/quorum"
)

// channelPrefix starts the pub/sub channels of release notifications: a
// hub's own, channelPrefix + "@" + its id, and each key's, Channel(key).
const channelPrefix = "quorumlock:released:"

// Channel returns key's own channel, which also names its waiters in a hub.
func Channel(key string) string { return channelPrefix + key }

// Hub wakes the waiters of this process that a node set's nodes name on the
// hub's channel, in a release or a turn (docs/design.md, "Who is woken").
// A Hub is safe for concurrent use.
type Hub struct {
	mu        sync.Mutex
	prefix    string // starts the ids of this hub's waiters
	channel   string // where the nodes tell this hub's waiters
	nodes     []*node.Node
	clock     clock.Clock
	sessions  []*session           // one per node while anyone waits; nil for a node without pub/sub
	listening uint64               // bit i: node i confirmed the subscription (a set has at most 64 nodes)
	waiters   map[string]*Waiter   // by id
	watchers  map[string][]*Waiter // by channel
	idleSince time.Time            // when the last waiter left
	sweeping  bool                 // a check for idle connections is scheduled
	recent    [16]release          // the latest releases, to count their copies
	next      int                  // the slot of recent the next release takes
	early     []string             // waiters woken before they joined (newest last)
}

// linger is how long the connections stay open after the last waiter left.
const linger = time.Second

type release struct {
	token  string
	copies int      // negative: released by this process, copies are ignored
	heads  []string // the head each copy named
}

// NewHub returns the hub of the node set made of nodes, its timers on c.
func NewHub(nodes []*node.Node, c clock.Clock) *Hub {
	id := node.NewToken()
	return &Hub{prefix: id + ".", channel: channelPrefix + "@" + id, nodes: nodes, clock: c, waiters: map[string]*Waiter{}, watchers: map[string][]*Waiter{}}
}

// NewID returns a new waiter id.
func (h *Hub) NewID() string { return h.prefix + node.NewToken() }

// Waiter is one waiting call's place in the hub, or a watcher of a key's
// channel (Watch). Its methods are safe for concurrent use.
type Waiter struct {
	h        *Hub
	channels []string
	id       string        // "" for a watcher
	wake     chan struct{} // one slot
	recheck  chan struct{} // one slot
	once     sync.Once
}

// Wake is signalled when the nodes name the waiter as the next owner; a
// watcher's, on every message or subscription confirmation of the key's channel.
func (w *Waiter) Wake() <-chan struct{} { return w.wake }

// Recheck is signalled, for a waiter, when a node first confirms the hub's
// subscription and after a reconnection: a release published before was not heard.
func (w *Waiter) Recheck() <-chan struct{} { return w.recheck }

// Stop leaves the queue; calling it again does nothing.
func (w *Waiter) Stop() { w.once.Do(func() { w.h.leave(w) }) }

// Wait queues a waiter, known to the nodes as id, for the releases on
// channels, subscribing in the background: it never blocks. A wake-up sent
// to id shortly before is signalled at once.
func (h *Hub) Wait(id string, channels ...string) *Waiter {
	w := &Waiter{h: h, channels: channels, id: id, wake: make(chan struct{}, 1), recheck: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sessions == nil { // the first waiter opens a connection per node whose client has pub/sub
		h.sessions = make([]*session, len(h.nodes))
		for i, n := range h.nodes {
			if c, ok := n.Client().(interface {
				Subscribe(context.Context, ...string) *redis.PubSub
			}); ok {
				h.sessions[i] = &session{ps: c.Subscribe(context.Background()), wakeup: make(chan struct{}, 1)}
				go h.run(i, h.sessions[i])
			}
		}
		h.broadcast(request{subscribe: h.channel})
	}
	if id == "" { // Watch's one channel
		c := channels[0]
		if h.watchers[c] = append(h.watchers[c], w); len(h.watchers[c]) == 1 {
			h.broadcast(request{subscribe: c})
		}
		return w
	}
	h.waiters[id] = w
	if i := slices.Index(h.early, id); i >= 0 {
		h.early = slices.Delete(h.early, i, i+1)
		signal(w.wake)
	}
	return w
}

// Watch returns a watcher of a key's own channel; it never blocks. Call Stop when done.
func (h *Hub) Watch(channel string) *Waiter { return h.Wait("", channel) }

// Waiting returns how many calls of this process (not watchers) wait on channel.
func (h *Hub) Waiting(channel string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, w := range h.waiters {
		if slices.Contains(w.channels, channel) {
			n++
		}
	}
	return n
}

func (h *Hub) leave(w *Waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.id != "" {
		delete(h.waiters, w.id)
	} else if c := w.channels[0]; len(h.watchers[c]) > 1 {
		h.watchers[c] = slices.DeleteFunc(h.watchers[c], func(x *Waiter) bool { return x == w })
	} else {
		delete(h.watchers, c)
		h.broadcast(request{unsubscribe: c})
	}
	if len(h.waiters)+len(h.watchers) == 0 {
		h.idleSince = h.clock.Now()
		h.scheduleSweep()
	}
}

// scheduleSweep arranges for idle connections to be closed. h.mu is held.
func (h *Hub) scheduleSweep() {
	if !h.sweeping {
		h.sweeping = true
		h.clock.AfterFunc(linger, func() { h.closeIdle(linger) })
	}
}

// CloseIdle closes the pub/sub connections at once if nobody waits (Close);
// closeIdle, if nobody has waited for idle.
func (h *Hub) CloseIdle() { h.closeIdle(0) }

func (h *Hub) closeIdle(idle time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweeping = false // scheduled again if still needed
	switch {
	case len(h.waiters)+len(h.watchers) > 0 || h.sessions == nil:
	case h.clock.Now().Sub(h.idleSince) < idle:
		h.scheduleSweep()
	default:
		h.broadcast(request{close: true})
		h.sessions, h.listening, h.early = nil, 0, nil // the next waiter opens new connections
	}
}

// broadcast sends a request to every node's session. h.mu is held.
func (h *Hub) broadcast(r request) {
	for _, s := range h.sessions {
		if s != nil {
			s.pending = append(s.pending, r)
			signal(s.wakeup)
		}
	}
}

// message handles a node's message on the hub's channel ("Who is woken").
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
	if kind == "t" && h.sessions != nil {
		h.wake(channel, head) // an empty queue (head "") names nobody
	}
	if kind != "r" || h.sessions == nil {
		return
	}
	r := h.release(token)
	if r.copies < 0 {
		return
	}
	r.copies++
	r.heads = append(r.heads, head)
	need := quorum.Majority(len(h.nodes))
	switch {
	case r.copies == need || (r.copies == 1 && bits.OnesCount64(h.listening) < need):
		h.wake(channel, Head(r.heads))
	case r.copies == 1:
		h.clock.AfterFunc(lateCopies, func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if r.token == token && r.copies > 0 && r.copies < need { // r's slot was not reused
				h.wake(channel, Head(r.heads))
			}
		})
	}
}

// lateCopies is when, after a release's first copy, its waiter is woken anyway.
const lateCopies = 20 * time.Millisecond

// watched wakes the watchers of channel.
func (h *Hub) watched(channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range h.watchers[channel] {
		signal(w.wake)
	}
}

// Released tells the hub that a holder in this process released channel's
// key with token on a majority, naming head next: head, if this hub's, is
// woken at once and the nodes' copies are ignored.
func (h *Hub) Released(channel, token, head string) {
	if !strings.HasPrefix(head, h.prefix) {
		return // the copies go to head's process
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.release(token).copies = -1
	h.wake(channel, head)
}

// release returns the record of token's release, in the oldest's slot if new.
func (h *Hub) release(token string) *release {
	for i := range h.recent {
		if h.recent[i].token == token {
			return &h.recent[i]
		}
	}
	r := &h.recent[h.next]
	h.next = (h.next + 1) % len(h.recent)
	*r = release{token: token, heads: r.heads[:0]}
	return r
}

// Head returns the waiter most of heads name (the first on a tie); "" counts for no one.
func Head(heads []string) string {
	best, bestN := "", 0
	for _, h := range heads {
		n := 0
		for _, x := range heads {
			if x == h && h != "" {
				n++
			}
		}
		if n > bestN {
			best, bestN = h, n
		}
	}
	return best
}

// wake signals the waiter named id if it waits on channel, or keeps the
// wake-up for a waiter about to join. h.mu is held.
func (h *Hub) wake(channel, id string) {
	switch w := h.waiters[id]; {
	case w != nil && slices.Contains(w.channels, channel):
		signal(w.wake)
	case w == nil && id != "":
		if len(h.early) == 16 {
			h.early = h.early[1:]
		}
		h.early = append(h.early, id)
	}
}

// confirm handles node i's confirmation of the hub's subscription on from:
// the first since the connections opened, or one after a reconnection,
// rechecks all.
func (h *Hub) confirm(i int, from *session) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sessions == nil || h.sessions[i] != from {
		return
	}
	bit := uint64(1) << i
	first, again := h.listening == 0, h.listening&bit != 0
	if h.listening |= bit; !first && !again {
		return
	}
	for _, w := range h.waiters {
		signal(w.recheck)
	}
}

// signal sends on a channel with a buffer of one, without blocking.
func signal(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// session is a node's pub/sub connection while anyone waits or watches; its
// goroutine owns the PubSub (SUBSCRIBE may block on a dial: no caller waits).
type session struct {
	ps      *redis.PubSub
	pending []request     // guarded by the hub's mutex
	wakeup  chan struct{} // one slot: requests are pending
}

type request struct {
	subscribe, unsubscribe string // a channel, or ""
	close                  bool
}

// run is the goroutine of node i's session.
func (h *Hub) run(i int, s *session) {
	ctx := context.Background()
	messages := s.ps.ChannelWithSubscriptions(redis.WithChannelSize(1024))
	for {
		select {
		case <-s.wakeup:
			h.mu.Lock()
			todo := s.pending
			s.pending = nil
			h.mu.Unlock()
			for _, r := range todo {
				switch {
				case r.close:
					_ = s.ps.Close()
					for range messages { // the go-redis reader ends once closed
					}
					return
				case r.unsubscribe != "":
					_ = s.ps.Unsubscribe(ctx, r.unsubscribe)
				default:
					_ = s.ps.Subscribe(ctx, r.subscribe)
				}
			}
		case m, ok := <-messages:
			if !ok { // the client was closed under us: close the PubSub too (its health check)
				_ = s.ps.Close()
				return
			}
			switch m := m.(type) {
			case *redis.Message:
				if m.Channel == h.channel {
					h.message(m.Payload)
				} else {
					h.watched(m.Channel)
				}
			case *redis.Subscription:
				switch {
				case m.Kind != "subscribe":
				case m.Channel == h.channel:
					h.confirm(i, s)
				default:
					h.watched(m.Channel)
				}
			}
		}
	}
}
