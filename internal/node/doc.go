// Package node talks to one Redis node on behalf of the lock: the Lua scripts
// that acquire, extend and release a key under a token, the checks on their
// replies, and token generation. It holds no lock state; package mutex does.
package node
