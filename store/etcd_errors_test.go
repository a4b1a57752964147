package store

import (
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// The errors of etcd that say a read may succeed if run again make an Update's transaction run again,
// and the ones that say the cluster did not answer are ErrUnavailable (a 503, not an internal error): a
// leader changing while a member confirms its read index was answered "internal error" during an election
// (seen by TestClusterLinearizableAPI in cmd).
func TestEtcdErrorKinds(t *testing.T) {
	for _, c := range []struct {
		err                error
		retry, unavailable bool
	}{
		{rpctypes.ErrLeaderChanged, true, true},
		{rpctypes.ErrCompacted, true, false},
		{rpctypes.ErrNoLeader, false, true},
		{rpctypes.ErrTimeoutDueToLeaderFail, false, true},
		{errors.New("something else"), false, false},
	} {
		tx := &etcdTx{}
		tx.fail(fmt.Errorf("read the metadata store on etcd: %w", unavailable(c.err)))
		if got := errors.Is(tx.err, errRetry); got != c.retry {
			t.Errorf("%v: runs again %v, want %v", c.err, got, c.retry)
		}
		if got := errors.Is(tx.err, ErrUnavailable); got != c.unavailable {
			t.Errorf("%v: unavailable %v, want %v", c.err, got, c.unavailable)
		}
	}
}
