package redlock

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/quorumlock/quorumlock/mutex"
)

// reply is a Redis error reply, as go-redis returns one.
type reply string

func (r reply) Error() string { return string(r) }
func (reply) RedisError()     {}

// Each NodeFailure.Type, from the errors the engine reports; the kinds the
// faults of observer_faults_test.go cannot show on a real server.
func TestFailureTypes(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{mutex.ErrNodeTimeout, "timeout"},
		{fmt.Errorf("%w: none for 1s; this command was not sent", mutex.ErrNodeTimeout), "timeout"},
		{reply("WRONGTYPE Operation against a key holding the wrong kind of value"), "WRONGTYPE"},
		{reply("READONLY You can't write against a read only replica."), "READONLY"},
		{reply("NOAUTH Authentication required."), "NOAUTH"},
		{errors.New("NOAUTH Authentication required."), "NOAUTH"},
		{reply("Busy script"), "other"},
		{reply("ABCDEFGHIJKLMNOPQ too long for a code"), "other"},
		{io.EOF, "connection"},
		{errors.New("node: unexpected reply to acquire: 7"), "reply"},
		{errors.New("something else"), "other"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, failureType(tt.err), "%v", tt.err)
	}
}
