package cluster

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/theappliance/appliance/appliance/backup/metasnap"
)

// RecoveryKeyFile is where a node keeps the cluster's recovery key (mode 0600): the key the metadata
// snapshots in the bucket are sealed with (metasnap.SnapshotKey). Every node of a cluster has the same one:
// cluster init makes it when the appliance had none, and a join hands it to the new node, so that whichever
// node leads (and takes the snapshots) seals them with the key the operator holds.
const RecoveryKeyFile = "recovery.key"

// joinKeyInfo is the HKDF info of the key that seals the recovery key in a join's answer.
const joinKeyInfo = "appliance join: recovery key v1"

// ensureRecoveryKey makes the data directory's recovery key when it has none, and then shows it (once).
func ensureRecoveryKey(dataDir string, out io.Writer) error {
	path := filepath.Join(dataDir, RecoveryKeyFile)
	key, created, err := metasnap.LoadOrCreateRecoveryKey(path)
	if err != nil {
		return err
	}
	if created {
		fmt.Fprintf(out, `
Created the RECOVERY KEY of this cluster. It decrypts the snapshots of the cluster's metadata (the store,
the CA, the sealing key) kept in the backup store's bucket (up --backup-store s3://…), whichever node takes
them: every node that joins is handed it. Store it somewhere else than these machines, now (a password
manager). It is shown once; root can print it again with: appliance backup-store recovery-key
  recovery_key: %s
  (kept in %s, mode 0600)

`, hex.EncodeToString(key), path)
	}
	return nil
}

// joinSealKey is the key that seals the recovery key in the answer to the join of token id with secret: only
// the holder of the token's secret opens it (the TLS of the exchange aside, a copy of the answer — a log, a
// proxy's capture — does not give the key away).
func joinSealKey(tokenID, secret string) ([]byte, error) {
	return hkdf.Key(sha256.New, []byte(secret), []byte(tokenID), joinKeyInfo, 32)
}

// sealRecoveryKey seals key for the join of token id with secret, bound to the node id it is handed to:
// a random nonce, then AES-256-GCM.
func sealRecoveryKey(key []byte, tokenID, secret, nodeID string) ([]byte, error) {
	aead, err := joinAEAD(tokenID, secret)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return aead.Seal(nonce, nonce, key, []byte(nodeID)), nil
}

// openRecoveryKey opens what sealRecoveryKey sealed.
func openRecoveryKey(sealed []byte, tokenID, secret, nodeID string) ([]byte, error) {
	aead, err := joinAEAD(tokenID, secret)
	if err != nil {
		return nil, err
	}
	if len(sealed) < aead.NonceSize() {
		return nil, errors.New("the sealed recovery key is truncated")
	}
	key, err := aead.Open(nil, sealed[:aead.NonceSize()], sealed[aead.NonceSize():], []byte(nodeID))
	if err != nil {
		return nil, fmt.Errorf("open the recovery key: %w", err)
	}
	if len(key) != metasnap.RecoveryKeySize {
		return nil, fmt.Errorf("the recovery key handed is %d bytes, want %d", len(key), metasnap.RecoveryKeySize)
	}
	return key, nil
}

func joinAEAD(tokenID, secret string) (cipher.AEAD, error) {
	k, err := joinSealKey(tokenID, secret)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(k)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}
