package node

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"
)

// explain names the likely cause of an error whose own text hides it: a
// Cluster's redirect or CROSSSLOT to a node given as one server is a
// configuration error.
// Redis refuses a long command from a connection that has not authenticated
// with a protocol error rather than NOAUTH, and then closes the connection:
// the commands behind it fail with EOF or a reset, which are explained by
// that refusal until the node next answers a command.
func (n *Node) explain(err error) error {
	switch {
	case unauthenticated(err):
		refusal := fmt.Errorf("NOAUTH Authentication required (the node refused the command of an unauthenticated connection: %w)", err)
		n.refusal.Store(&refusal)
		return refusal
	case err == nil || isReply(err):
		if n.refusal.Load() != nil {
			n.refusal.Store(nil)
		}
		if n.cluster == nil && clusterReply(err) {
			return fmt.Errorf("a Redis Cluster server given as one server (%w): a bad configuration; give the Cluster as a *redis.ClusterClient (a redis+cluster:// URL), or standalone servers", err)
		}
	default:
		if refused := n.refusal.Load(); refused != nil {
			return fmt.Errorf("%w (the node closed the connection after: %v)", err, *refused)
		}
	}
	return err
}

// clusterReply reports whether err is a reply only a Redis Cluster server
// gives: to a client that does not follow the Cluster, a configuration error.
func clusterReply(err error) bool {
	return err != nil && (redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK") || redis.HasErrorPrefix(err, "CROSSSLOT"))
}

func unauthenticated(err error) bool {
	return err != nil && strings.Contains(err.Error(), "unauthenticated")
}

func isNoScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }

// Undelivered reports whether err says that a command never reached the
// node: no connection to send it on could be made.
func Undelivered(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// isReply reports whether err is an error reply from the server (it ran the
// command and refused it), rather than a failure to reach it.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.ErrClosed)
}

// Refuses reports whether err is the node refusing this client as it is
// configured (authentication, ACL permissions), which waiting does not change.
func Refuses(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	for _, refusal := range [...]string{"NOAUTH ", "WRONGPASS ", "NOPERM ", "can't access at least one of the keys"} {
		if strings.Contains(msg, refusal) {
			return true
		}
	}
	return false
}
