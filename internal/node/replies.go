package node

import (
	"fmt"
	"time"
)

// Grant is what the acquire script found on a node.
type Grant struct {
	Acquired bool // the key now holds the token
	// HolderTTL is, when not acquired, the holder's remaining TTL (-1ms:
	// none), or Behind when the key is free but another waiter is ahead.
	HolderTTL time.Duration
	Waiting   int    // waiters queued on the key after the call
	Marker    string // the node's marker after the call; "" when not asked
	// Fence is the fencing counter after its increment when the key was
	// taken and a number was asked for; 0 when the node has no counter; -1
	// otherwise.
	Fence int64
	// Counter is the fencing counter after the call when a number was asked
	// for, whether or not the key was taken; 0 if missing.
	Counter int64
	// MarkerAge is how long ago the node's marker was made, on the node's
	// clock; -1ms when no marker was asked for or the marker does not say.
	MarkerAge time.Duration
	// Conflict is, from permitacquire.lua, the limit the node holds for the
	// semaphore when it differs from the caller's (nothing taken); else "".
	Conflict string
}

// Behind is the HolderTTL of a node that refused a free key to a caller
// because other waiters are ahead of it.
const Behind = -3 * time.Millisecond

// ParseGrant reads the acquire script's reply. proposed is the marker the
// call proposed (created when the node has none), or "" when it asked for
// none; when it asked, the reply's marker must be non-empty.
func ParseGrant(v any, proposed string) (Grant, error) {
	r, ok := v.([]any)
	if !ok || len(r) < 7 || len(r) > 8 {
		return Grant{}, unexpected("acquire", v)
	}
	var conflict string
	if len(r) == 8 {
		if conflict, ok = r[7].(string); !ok || conflict == "" || r[0] != int64(0) {
			return Grant{}, unexpected("acquire", v)
		}
	}
	acquired, ok1 := r[0].(int64)
	pttl, ok2 := r[1].(int64)
	waiting, ok3 := r[2].(int64)
	marker, ok4 := r[3].(string)
	fence, ok5 := r[4].(int64)
	counter, ok6 := r[5].(int64)
	age, ok7 := r[6].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || !ok7 || (acquired != 0 && acquired != 1) ||
		waiting < 0 || fence < -1 || counter < 0 || age < -1 || (proposed != "" && marker == "") {
		return Grant{}, unexpected("acquire", v)
	}
	return Grant{
		Acquired:  acquired == 1,
		HolderTTL: time.Duration(pttl) * time.Millisecond,
		Waiting:   int(waiting),
		Marker:    marker,
		Fence:     fence,
		Counter:   counter,
		MarkerAge: time.Duration(age) * time.Millisecond,
		Conflict:  conflict,
	}, nil
}

// Release is what the release script found.
type Release int8

const (
	Taken    Release = -1 // the key holds another token; it was left alone
	Missing  Release = 0  // the key did not exist, and no tombstone of ours
	Released Release = 1  // the key held the token and was deleted
	// Tombstone: the key did not exist, and a tombstone shows that a
	// release with this token deleted it.
	Tombstone Release = 2
	// TakenSince: the key holds another token, and a tombstone shows that
	// a release with this token deleted it before the other owner came.
	TakenSince Release = 3
)

// ParseRelease reads the release script's reply: what it found, and the
// waiter now first in the key's queue ("" if none).
func ParseRelease(v any) (Release, string, error) {
	r, ok := v.([]any)
	if !ok || len(r) != 2 {
		return 0, "", unexpected("release", v)
	}
	status, ok1 := r[0].(int64)
	head, ok2 := r[1].(string)
	if !ok1 || !ok2 || status < -1 || status > 3 {
		return 0, "", unexpected("release", v)
	}
	return Release(status), head, nil
}

// Renewal is what the renew script did to one key.
type Renewal int8

const (
	OtherHolder Renewal = -1 // another token holds the key
	Gone        Renewal = 0  // the key is missing and was not restored
	Extended    Renewal = 1  // the key held the token; its TTL was reset
	Restored    Renewal = 2  // the key was missing; the token was put back
)

// ParseRenew reads the renew script's reply for n keys. A key of the wrong
// type is reported as an error at its index in errs (nil if none).
func ParseRenew(v any, n int) ([]Renewal, []error, error) {
	r, ok := v.([]any)
	if !ok || len(r) != n {
		return nil, nil, unexpected("renew", v)
	}
	out := make([]Renewal, n)
	var errs []error
	for i, x := range r {
		code, ok := x.(int64)
		switch {
		case !ok || code < -2 || code > 2:
			return nil, nil, unexpected("renew", v)
		case code == -2:
			if errs == nil {
				errs = make([]error, n)
			}
			errs[i] = fmt.Errorf("node: WRONGTYPE: the lock key holds a value of another type")
		default:
			out[i] = Renewal(code)
		}
	}
	return out, errs, nil
}

// ParseFlag reads a reply that must be the integer 0 or 1. Anything else
// (nil, a string, another number) is an error, never a vote.
func ParseFlag(script string, v any) (bool, error) {
	switch v {
	case int64(1):
		return true, nil
	case int64(0):
		return false, nil
	}
	return false, unexpected(script, v)
}

func unexpected(script string, v any) error {
	return fmt.Errorf("node: unexpected reply to the %s script: %T %#v", script, v, v)
}
