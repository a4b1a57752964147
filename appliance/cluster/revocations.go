package cluster

import (
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/theappliance/appliance/appliance/certs"
	"github.com/theappliance/appliance/store"
)

// A removed node's certificate is refused by etcd's own listeners too (its client and peer ports), not
// only by the nodes' forwarding channel: every member reads its CRLFile, a revocation list signed by the
// cluster's CA of the serials in the store's meta (store.MetaRevokedPeerCerts, written by remove-node),
// at each new connection. A member starts with the list it last wrote (an empty one the first time: the
// store is on the cluster, so it cannot be read before the member runs), and each node rewrites it within
// revocationSync of a change.

// revocationSync is how often a node compares its revocation list with the store's.
const revocationSync = time.Second

func crlFile(dataDir string) string { return filepath.Join(dataDir, "etcd", "revoked.crl") }

// ensureCRL writes an empty revocation list when the data directory has none yet (etcd refuses every
// connection while its CRLFile cannot be read).
func ensureCRL(dataDir string) error {
	if _, err := os.Stat(crlFile(dataDir)); err == nil || !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return writeCRL(dataDir, nil)
}

// writeCRL writes the revocation list of these serials (hex), signed by the data directory's CA.
func writeCRL(dataDir string, serials []string) error {
	if _, err := os.Stat(filepath.Join(dataDir, "ca", "ca.key")); err != nil {
		return fmt.Errorf("the cluster's CA key, to sign its revocation list: %w", err)
	}
	ca, err := certs.LoadOrCreateCA(filepath.Join(dataDir, "ca"))
	if err != nil {
		return err
	}
	var nums []*big.Int
	for _, s := range serials {
		n, ok := new(big.Int).SetString(s, 16)
		if !ok {
			return fmt.Errorf("a revoked certificate's serial %q is not hexadecimal", s)
		}
		nums = append(nums, n)
	}
	der, err := ca.RevocationList(nums)
	if err != nil {
		return err
	}
	return writeFileAtomic(crlFile(dataDir), der, 0o600)
}

// syncRevocations keeps the member's revocation list the store's until stop is closed.
func (m *Member) syncRevocations(stop <-chan struct{}) {
	var last []string
	t := time.NewTicker(revocationSync)
	defer t.Stop()
	for {
		var serials []string
		if err := m.db.View(func(tx *store.Tx) error {
			serials = strings.Fields(tx.Meta(store.MetaRevokedPeerCerts))
			return nil
		}); err == nil {
			slices.Sort(serials)
			if !slices.Equal(serials, last) {
				if err := writeCRL(m.dataDir, serials); err == nil {
					last = serials
				}
			}
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}
