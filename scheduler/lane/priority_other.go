//go:build !linux

package lane

// lowerThreadPriority does nothing where a thread's priority cannot be set alone.
func lowerThreadPriority() {}
