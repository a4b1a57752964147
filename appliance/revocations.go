package appliance

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/theappliance/appliance/appliance/kv"
	"github.com/theappliance/appliance/store"
)

// The revocation record: every credential the appliance revokes (an API key, a session, a key-value
// store's token replaced by a rotation) has its SHA-256 appended to <data-dir>/revoked, and the file synced,
// inside the transaction that revokes it. The file lives outside the metadata store and only grows, so an
// older meta.db put back (up --accept-older-metadata) cannot bring a revoked credential back: at start
// every credential of the metadata that the record lists is revoked again (ApplyRevocations).
const (
	revokedAPIKey  = "api_key"
	revokedSession = "session"
	revokedKVToken = "kv_token"
)

// RevocationFile is the revocation record of a data directory.
func RevocationFile(dataDir string) string { return filepath.Join(dataDir, "revoked") }

var revocationMu sync.Mutex // appends to the record, one at a time

// recordRevocation appends a revoked credential's hash to the record and syncs it. A service with no data
// directory (a test of the domain alone) keeps no record.
func (s *Service) recordRevocation(kind, hash string) error {
	if s.cfg.DataDir == "" || hash == "" {
		return nil
	}
	revocationMu.Lock()
	defer revocationMu.Unlock()
	f, err := os.OpenFile(RevocationFile(s.cfg.DataDir), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return Internal(err, "record the revocation")
	}
	_, werr := fmt.Fprintf(f, "%s %s\n", kind, hash)
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		return Internal(err, "record the revocation")
	}
	return nil
}

// readRevocations reads the record: the revoked hashes by kind (empty when there is none).
func readRevocations(dataDir string) (map[string]map[string]bool, error) {
	out := map[string]map[string]bool{revokedAPIKey: {}, revokedSession: {}, revokedKVToken: {}}
	f, err := os.Open(RevocationFile(dataDir))
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		kind, hash, ok := strings.Cut(sc.Text(), " ")
		if !ok || out[kind] == nil {
			continue // a line cut short by a crash while appending
		}
		out[kind][hash] = true
	}
	return out, sc.Err()
}

// ApplyRevocations revokes again every credential of the metadata that the revocation record lists (an
// older meta.db put back) and describes each one it revoked.
func (s *Service) ApplyRevocations() ([]string, error) {
	if s.cfg.DataDir == "" {
		return nil, nil
	}
	revoked, err := readRevocations(s.cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("read the revocation record: %w", err)
	}
	var out []string
	err = s.db.Update(func(tx *store.Tx) error {
		out = nil
		now := s.now()
		sys := &Principal{AuthSource: ActorSystem}
		keys, err := store.APIKeys.All(tx, func(k *store.APIKey) bool { return k.RevokedAt == nil && revoked[revokedAPIKey][k.KeyHash] })
		if err != nil {
			return err
		}
		for _, k := range keys {
			k.RevokedAt = &now
			if err := store.APIKeys.Put(tx, k); err != nil {
				return err
			}
			if err := s.audit(tx, sys, "api_key.revoke", k.OrganizationID, k.ProjectID,
				map[string]any{"api_key_id": k.ID, "reason": "revoked before; the metadata put back did not know"}); err != nil {
				return err
			}
			out = append(out, fmt.Sprintf("API key %s was live in the metadata but revoked before (revocation record): revoked again", k.ID))
		}
		sessions, err := store.Sessions.All(tx, func(x *store.Session) bool { return x.RevokedAt == nil && revoked[revokedSession][x.TokenHash] })
		if err != nil {
			return err
		}
		for _, x := range sessions {
			x.RevokedAt = &now
			if err := store.Sessions.Put(tx, x); err != nil {
				return err
			}
			out = append(out, fmt.Sprintf("session %s was live in the metadata but revoked before (revocation record): revoked again", x.ID))
		}
		kvs, err := store.KVStores.All(tx, func(r *store.KVStore) bool { return r.TokenHash != "" && revoked[revokedKVToken][r.TokenHash] })
		if err != nil {
			return err
		}
		for _, r := range kvs {
			// A token nobody was given (it is dropped here): none opens the store until its owner rotates
			// one, and its server still starts with a tenant password.
			_, hash, prefix := kv.NewToken()
			r.TokenHash, r.TokenPrefix, r.UpdatedAt = hash, prefix, now
			r.LastError = "its token was replaced after this metadata was written (an older meta.db was put back): rotate the token"
			if err := store.KVStores.Put(tx, r); err != nil {
				return err
			}
			if err := s.audit(tx, sys, "kv.revoke_token", r.OrganizationID, r.ProjectID,
				map[string]any{"kv_store_id": r.ID, "reason": "rotated before; the metadata put back did not know"}); err != nil {
				return err
			}
			out = append(out, fmt.Sprintf("key-value store %s (project %s) had a token rotated before (revocation record): no token opens it until rotated", r.ID, r.ProjectID))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("apply the revocation record: %w", err)
	}
	return out, nil
}
