package appliance

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/store"
)

// Bootstrap is what the first start hands to its operator, printed once and kept in bootstrap.json.
type Bootstrap struct {
	APIURL         string `json:"api_url"`
	APIKey         string `json:"api_key"`
	OrganizationID string `json:"organization_id"`
	Email          string `json:"email"`
	Password       string `json:"password"`
	CACert         string `json:"ca_cert"`
}

const metaBootstrapped = "bootstrapped_organization"

// BootstrapOwnerEmail is the email of the owner user created on first start.
const BootstrapOwnerEmail = "owner@appliance.local"

// Bootstrapped reports whether the store's first start (EnsureBootstrap) is done.
func Bootstrapped(tx *store.Tx) bool { return tx.Meta(metaBootstrapped) != "" }

// EnsureBootstrap creates, on the first start only, an organization, its owner user and an admin API key,
// and writes them to path (mode 0600), which must not exist: an existing bootstrap.json belongs to an earlier
// first start and is never overwritten. It returns nil when the store was bootstrapped before.
func (s *Service) EnsureBootstrap(ctx context.Context, path, caCert string) (*Bootstrap, error) {
	var out *Bootstrap
	wrote := false
	err := s.db.Update(func(tx *store.Tx) error {
		// Run again (on etcd, after a conflict): the file an earlier attempt wrote holds credentials that
		// were not committed.
		if wrote {
			if err := os.Remove(path); err != nil {
				return err
			}
			out, wrote = nil, false
		}
		if Bootstrapped(tx) {
			return nil
		}
		if _, err := os.Lstat(path); err == nil {
			return fmt.Errorf("%s exists, but the metadata store was never bootstrapped: it holds the credentials of an earlier first start "+
				"whose metadata is gone (restore meta.db from a copy); it is not overwritten", path)
		}
		now := s.now()
		org := &store.Organization{ID: ids.New("org"), Name: "Default organization", Slug: "default",
			BillingPlan: "none", CreatedAt: now, UpdatedAt: now}
		if err := store.Organizations.Put(tx, org); err != nil {
			return err
		}
		if err := s.tenancy.SeedPlans(tx); err != nil { // the operators' plans and quotas, from the built-in ones
			return err
		}
		u, password, plain, err := s.identity.BootstrapOwner(tx, org.ID, BootstrapOwnerEmail)
		if err != nil {
			return err
		}
		sys := &Principal{AuthSource: ActorSystem}
		if err := s.audit(tx, sys, "organization.bootstrap", org.ID, "", map[string]any{"user_id": u.ID}); err != nil {
			return err
		}
		if err := tx.SetMeta(metaBootstrapped, org.ID); err != nil {
			return err
		}
		out = &Bootstrap{APIURL: s.cfg.APIURL, APIKey: plain, OrganizationID: org.ID, Email: u.Email,
			Password: password, CACert: caCert}
		// Written inside the transaction: if the file cannot be written nothing is committed and the next
		// start bootstraps again (an attempt run again removes it first, above).
		if err := writeNewFile0600(path, out); err != nil {
			return err
		}
		wrote = true
		return nil
	})
	if err != nil && wrote { // the commit failed: the next start bootstraps again
		os.Remove(path)
	}
	if err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	return out, nil
}

// writeNewFile0600 writes v as JSON to path, which must not exist (the file appears whole or not at all).
func writeNewFile0600(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".bootstrap-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Link(tmp.Name(), path) // never replaces an existing file
}
