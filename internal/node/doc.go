// Package node is the wire protocol to one Redis node: the Lua scripts that
// take, renew and release lock keys, the checks on their replies, tokens, and
// the sender that pipelines every command to a node in the order it was
// given, measuring the node's latency as it goes. It holds no lock state.
package node
