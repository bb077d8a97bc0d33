package slot

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The slots CLUSTER KEYSLOT gives (Redis Cluster specification examples).
func TestOf(t *testing.T) {
	assert.Equal(t, 12182, Of("foo"))
	assert.Equal(t, 5061, Of("bar"))
	assert.Equal(t, Of("user1000"), Of("{user1000}.following"))
	assert.Equal(t, Of("{user1000}.following"), Of("{user1000}.followers"))
	assert.Equal(t, Of("foo{}{bar}"), Of("foo{}{bar}"))
	assert.NotEqual(t, Of("bar"), Of("foo{}{bar}"), "an empty tag hashes the whole key")
	assert.Equal(t, Of("{bar"), Of("{bar"))
	assert.Equal(t, Of("zap"), Of("foo{zap}{bar}"))
}

func TestTag(t *testing.T) {
	for key, tag := range map[string]string{"a": "", "{a}b": "a", "x{a}{b}": "a", "{}a": "", "{a": "", "a}{b}": "b"} {
		assert.Equal(t, tag, Tag(key), key)
	}
}

func TestNamedCoversEverySlot(t *testing.T) {
	for s := range Count {
		n := Named(s)
		if !assert.Equal(t, s, Of(n), "Named(%d) = %q", s, n) || !assert.Equal(t, s, Of("{"+n+"}x")) {
			return
		}
	}
}
