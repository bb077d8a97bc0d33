// Package notify is the coordination of one node set's waiters inside a
// process: the pub/sub connection each node keeps while anyone waits, the
// queue of waiters per lock key, and the wake-ups that release messages
// trigger. It decides who in this process looks at a lock next; the nodes
// decide who gets it.
package notify
