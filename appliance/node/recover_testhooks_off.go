//go:build !testhooks

package node

import "context"

// Without the testhooks build tag recover has no pause (recover_testhooks_on.go).
func recoverTestHook() func(ctx context.Context, projectID, step string) { return nil }
