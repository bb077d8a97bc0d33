package round

import (
	"golang.org/x/sync/errgroup"

	"github.com/quorumlock/quorumlock/quorum"
)

// Asked is a round whose voters are goroutines of the test.
type Asked[T any] struct {
	*Round[T]
	g errgroup.Group
}

// Ask starts ask(i) for every voter 0 <= i < n, each in its own goroutine,
// and returns at once; voters have no timeout of their own. An ask function
// must return in bounded time; it may keep running after the round is
// decided (Wait waits for it).
func Ask[T any](n int, ask func(node int) (quorum.Vote, T, error)) *Asked[T] {
	a := &Asked[T]{Round: New[T](n, nil, 0)}
	for i := range n {
		a.g.Go(func() error {
			v, val, err := ask(i)
			a.Answer(i, v, val, err)
			return nil
		})
	}
	return a
}

// Wait blocks until every ask function has returned.
func (a *Asked[T]) Wait() { _ = a.g.Wait() }
