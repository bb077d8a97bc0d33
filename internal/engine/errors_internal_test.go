package engine

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Observers count a command not sent to a stalled node as a timeout
// (redlock's failureType reads Timeout).
func TestStalledIsATimeout(t *testing.T) {
	var timeout interface{ Timeout() bool }
	assert.True(t, errors.As(fmt.Errorf("node: %w", &stalledError{}), &timeout) && timeout.Timeout())
}
