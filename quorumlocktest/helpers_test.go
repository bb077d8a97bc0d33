package quorumlocktest_test

import (
	"errors"
	"fmt"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// scope stands for the *testing.T of a test where none exists (Examples,
// one iteration of a benchmark): it runs its cleanups when the scope ends and
// turns Fatal into an error returned by inTest. Calling a testing.TB method
// it does not define panics.
type scope struct {
	testing.TB
	cleanups []func()
	failure  error
}

func (s *scope) Helper()                   {}
func (s *scope) Cleanup(f func())          { s.cleanups = append(s.cleanups, f) }
func (s *scope) Fatal(args ...any)         { s.fail(fmt.Sprint(args...)) }
func (s *scope) Fatalf(f string, a ...any) { s.fail(fmt.Sprintf(f, a...)) }
func (s *scope) Skip(args ...any)          { s.fail("skipped: " + fmt.Sprint(args...)) }
func (s *scope) Logf(string, ...any)       {}

type stopScope struct{}

func (s *scope) fail(msg string) {
	s.failure = errors.New(msg)
	panic(stopScope{})
}

// inTest runs fn as the body of a test, then its cleanups, last first, and
// returns what made it fail, if anything. An Example whose body fails
// prints less than its Output.
func inTest(fn func(t testing.TB)) (err error) {
	s := &scope{}
	defer func() {
		if r := recover(); r != nil {
			if _, stop := r.(stopScope); !stop {
				panic(r)
			}
		}
		for i := len(s.cleanups) - 1; i >= 0; i-- {
			s.cleanups[i]()
		}
		err = s.failure
	}()
	fn(s)
	return nil
}
