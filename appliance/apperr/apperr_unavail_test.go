package apperr

import (
	"fmt"
	"testing"

	"github.com/theappliance/appliance/store"
)

// TestKindOfUnavailableStore: a store error of a cluster without quorum, or of a store a later version
// upgraded, is KindUnavailable (503), even wrapped in an internal error of the domain's.
func TestKindOfUnavailableStore(t *testing.T) {
	for _, cause := range []error{store.ErrUnavailable, store.ErrNewerLayout} {
		err := fmt.Errorf("read: %w", cause)
		for _, e := range []error{err, Internal(err, "create the key")} {
			if k := KindOf(e); k != KindUnavailable {
				t.Errorf("KindOf(%v) = %v, want KindUnavailable", e, k)
			}
		}
	}
	if k := KindOf(Internal(fmt.Errorf("disk"), "x")); k != KindInternal {
		t.Errorf("an internal error: %v", k)
	}
}
