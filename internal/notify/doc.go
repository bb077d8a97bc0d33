// Package notify wakes one node set's waiters in a process when the nodes
// name them next (a pub/sub connection per node while anyone waits, a queue
// of waiters per key); the nodes decide who gets a lock.
package notify
