package main

import (
	"errors"
	"fmt"
	"sync"
)

// ErrStaleToken is returned by Store.Write for a write whose fencing token is
// older than one the store has already accepted.
var ErrStaleToken = errors.New("store: stale fencing token")

// Store is a resource protected by the lock: a single value that the lock's
// holders overwrite. It does not trust the lock alone. It remembers the
// largest fencing token it has accepted and refuses writes that carry a
// smaller one, so a holder that was paused past its lock's validity, and
// resumes believing it still holds the lock, cannot overwrite the work of the
// holder that came after it.
//
// In a real system this check lives in the resource itself (a conditional
// UPDATE ... WHERE fence < $token, a compare-and-set, an object store's
// precondition), atomically with the write. The zero Store is empty and ready
// to use; it is safe for concurrent use.
type Store struct {
	mu    sync.Mutex
	value string
	token uint64 // the largest token accepted
}

// Write sets the value if token is at least the largest token accepted so
// far (a holder may write several times under one token). Otherwise it
// changes nothing and returns an error matching ErrStaleToken.
func (s *Store) Write(token uint64, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.token {
		return fmt.Errorf("%w: write %q carries token %d, but token %d was already accepted", ErrStaleToken, value, token, s.token)
	}
	s.token, s.value = token, value
	return nil
}

// Value returns the value and the token of the write that set it.
func (s *Store) Value() (string, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.value, s.token
}
