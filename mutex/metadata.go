package mutex

import (
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/quorumlock/quorumlock/internal/engine"
)

// setMetadata replaces the metadata of the lock m holds (WithMetadata) on
// every node where its key still holds m's token, keeping the key's TTL,
// and tells the key's observers; a majority must confirm. Errors: ErrNotHeld
// when m holds nothing or fewer than a majority still hold its token;
// ErrNodesUnavailable or ctx's error when too few answered (some nodes may
// then have the new metadata); ErrInvalid, with nothing sent, for metadata
// WithMetadata would refuse or a Mutex without WithMetadata.
func (m *Mutex) setMetadata(ctx context.Context, metadata string) error {
	if err := m.usable(ctx); err != nil {
		return err
	}
	if m.cfg.metadata == nil {
		return invalid("mutex: %q: set metadata of a Mutex made without WithMetadata", m.name)
	}
	if err := checkMetadata(m.name, metadata); err != nil {
		return err
	}
	if err := m.l.Set().ErrIfClosed("mutex: set metadata of %q: the node set was closed; nothing sent", m.name); err != nil {
		return err
	}
	if err := take(ctx, m.op); err != nil {
		return fmt.Errorf("mutex: set metadata of %q: another call on this Mutex is in progress: %w", m.name, err)
	}
	defer m.end()
	h := m.l.Current()
	if h == nil {
		return engine.NewError(fmt.Sprintf("mutex: set metadata of %q: this Mutex does not hold the lock", m.name), ErrNotHeld)
	}
	return m.l.SetMetadata(ctx, h, metadata)
}

// checkMetadata returns what WithMetadata refuses in metadata, as an error
// matching ErrInvalid, or nil.
func checkMetadata(name, metadata string) error {
	switch {
	case len(metadata) > MaxMetadataLen:
		return invalid("mutex: %q: metadata of %d bytes is longer than %d (MaxMetadataLen)", name, len(metadata), MaxMetadataLen)
	case !utf8.ValidString(metadata):
		return invalid("mutex: %q: metadata is not valid UTF-8", name)
	}
	return nil
}
