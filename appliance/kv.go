package appliance

import (
	"context"
	"errors"
)

// ErrInvalidKVToken is returned for a key-value token that belongs to no store.
var ErrInvalidKVToken = errors.New("invalid key-value token")

// ResolveToken maps a key-value store token to the unix socket of its redis-server. No key-value stores
// can be created yet (that capability is a later issue), so every token is refused.
func (s *Service) ResolveToken(ctx context.Context, token string) (string, error) {
	return "", ErrInvalidKVToken
}
