package notify

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// session is a node's pub/sub connection while anyone in the process waits
// or watches, shared by all of them, subscribed to the hub's channel and the
// channels watched. Its goroutine owns the go-redis PubSub: it sends
// SUBSCRIBE (which may block on a dial, so no caller ever waits for it),
// hands every message to the Hub, and closes the connection when asked.
type session struct {
	node    int // index in the set
	ps      *redis.PubSub
	pending []request     // guarded by the hub's mutex
	wakeup  chan struct{} // one slot: requests are pending
}

type request struct {
	subscribe   string // the channel to subscribe to, if not ""
	unsubscribe string // the channel to unsubscribe from, if not ""
	close       bool
}

// openSessionsLocked opens the pub/sub sessions, on the nodes whose client
// has pub/sub, if they are closed. h.mu is held.
func (h *Hub) openSessionsLocked() {
	if h.sessions != nil {
		return
	}
	h.sessions = make([]*session, len(h.nodes))
	for i, n := range h.nodes {
		if c, ok := n.Client().(interface {
			Subscribe(context.Context, ...string) *redis.PubSub
		}); ok {
			s := &session{node: i, ps: c.Subscribe(context.Background()), wakeup: make(chan struct{}, 1)}
			h.sessions[i] = s
			s.send(request{subscribe: h.channel})
			go h.run(s)
		}
	}
}

// send queues a request for the session's goroutine. h.mu is held.
func (s *session) send(r request) {
	s.pending = append(s.pending, r)
	signal(s.wakeup)
}

// run is the session's goroutine.
func (h *Hub) run(s *session) {
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
			if !ok {
				// The client was closed under us: close the PubSub too,
				// or its health-check goroutine outlives it.
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
					h.confirm(s.node)
				default:
					h.watched(m.Channel)
				}
			}
		}
	}
}
