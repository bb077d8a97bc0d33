// Package node is the wire protocol to one Redis node, and what the client
// knows of that node's health: the Lua scripts that take, renew and release
// lock keys and write fencing numbers back, the checks on their replies,
// tokens, the sender that pipelines every command to a node in the order it
// was given (measuring the node's latency and stalls as it goes, and sending
// scripts again in full when the node lost its script cache), and the
// node's restarts and data losses, read from INFO, that the restart
// quarantine needs. It holds no lock state.
package node
