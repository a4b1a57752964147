package appliance

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/theappliance/appliance/appliance/kv"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/store"
)

// Reconcile compares the metadata with what the data directory holds and describes every mismatch: an
// instance or key-value store the metadata has running whose directory is gone (its project was deleted
// after this metadata was written), a directory under instances/ or kv/ the metadata does not know (a
// resource created after it), backups of a project it does not know. Doctor reads it; up reports it at
// start (/status, the log, an alert on each project concerned).
func Reconcile(db *store.DB, dataDir string) ([]string, error) {
	ms, err := reconcile(db, dataDir)
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.text
	}
	return out, err
}

type mismatch struct {
	text      string
	projectID string // the project it concerns ("" for none the metadata knows)
}

func reconcile(db *store.DB, dataDir string) ([]mismatch, error) {
	var out []mismatch
	revoked, err := readRevocations(dataDir)
	if err != nil {
		return nil, fmt.Errorf("read the revocation record: %w", err)
	}
	err = db.View(func(tx *store.Tx) error {
		keys, err := store.APIKeys.All(tx, func(k *store.APIKey) bool { return k.RevokedAt == nil && revoked[revokedAPIKey][k.KeyHash] })
		if err != nil {
			return err
		}
		for _, k := range keys {
			out = append(out, mismatch{text: fmt.Sprintf("API key %s is live in the metadata but revoked in the revocation record (up revokes it again)", k.ID)})
		}
		sessions, err := store.Sessions.All(tx, func(x *store.Session) bool { return x.RevokedAt == nil && revoked[revokedSession][x.TokenHash] })
		if err != nil {
			return err
		}
		for _, x := range sessions {
			out = append(out, mismatch{text: fmt.Sprintf("session %s is live in the metadata but revoked in the revocation record (up revokes it again)", x.ID)})
		}
		kvs, err := store.KVStores.All(tx, func(r *store.KVStore) bool { return r.TokenHash != "" && revoked[revokedKVToken][r.TokenHash] })
		if err != nil {
			return err
		}
		for _, r := range kvs {
			out = append(out, mismatch{projectID: r.ProjectID, text: fmt.Sprintf("key-value store %s has a token the revocation record lists as rotated away (up revokes it)", r.ID)})
		}

		insts, err := store.Instances.All(tx, nil)
		if err != nil {
			return err
		}
		known := map[string]bool{}
		for _, in := range insts {
			if in.State == InstanceRemoved {
				continue
			}
			known[in.ID] = true
			if !store.LocalInstance(tx, in) {
				continue // another cluster node's: its files are there
			}
			if in.State == InstanceCreating || in.State == InstanceSparePreparing || in.Dir == "" {
				continue // its directory may not exist yet
			}
			if !(&postgres.Instance{Dir: in.Dir}).Initialized() {
				out = append(out, mismatch{projectID: in.ProjectID,
					text: fmt.Sprintf("instance %s (project %s, %s) has no data: %s holds no cluster", in.ID, orNone(in.ProjectID), in.State, in.Dir)})
			} else if owner := instanceOwner(in.Dir); owner != "" && owner != in.ProjectID {
				out = append(out, mismatch{projectID: in.ProjectID,
					text: fmt.Sprintf("instance %s is %s of project %s in the metadata, but its directory belongs to project %s (%s)",
						in.ID, in.State, orNone(in.ProjectID), owner, filepath.Join(in.Dir, instanceOwnerFile))})
			}
		}
		for _, name := range dirNames(filepath.Join(dataDir, "instances")) {
			if id, _, _ := strings.Cut(name, "."); !known[id] {
				out = append(out, mismatch{text: fmt.Sprintf("instances/%s is not an instance the metadata knows", name)})
			}
		}
		kvs, err = store.KVStores.All(tx, nil)
		if err != nil {
			return err
		}
		known = map[string]bool{}
		for _, st := range kvs {
			known[st.ID] = true
			if st.State != kv.StateRunning || st.Dir == "" {
				continue
			}
			if _, err := os.Stat(st.Dir); os.IsNotExist(err) {
				out = append(out, mismatch{projectID: st.ProjectID,
					text: fmt.Sprintf("key-value store %s (project %s) has no directory %s", st.ID, st.ProjectID, st.Dir)})
			}
		}
		for _, name := range dirNames(filepath.Join(dataDir, "kv")) {
			if !known[name] {
				out = append(out, mismatch{text: fmt.Sprintf("kv/%s is not a key-value store the metadata knows", name)})
			}
		}
		for _, name := range dirNames(filepath.Join(dataDir, "backups")) {
			if _, err := store.Projects.Get(tx, name); err != nil {
				out = append(out, mismatch{text: fmt.Sprintf("backups/%s holds backups of a project the metadata does not know", name)})
			}
		}
		return nil
	})
	return out, err
}

// dirNames are the names in dir (none when it does not exist), leaving out hidden ones (work in progress).
func dirNames(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// instanceOwnerFile, in an instance's directory, names the project that claimed it as a spare.
const instanceOwnerFile = "project"

// markInstanceOwner records in dir which project claimed it.
func markInstanceOwner(dir, projectID string) error {
	if err := os.WriteFile(filepath.Join(dir, instanceOwnerFile), []byte(projectID+"\n"), 0o600); err != nil {
		return fmt.Errorf("mark instance %s as project %s's: %w", dir, projectID, err)
	}
	return nil
}

// instanceOwner is the project that claimed the instance in dir ("" for none, or no mark).
func instanceOwner(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, instanceOwnerFile))
	return strings.TrimSpace(string(b))
}

// ReportMismatches reconciles the metadata with the data directory at start: it revokes again the
// credentials the revocation record lists (ApplyRevocations), logs each mismatch, raises a data_missing
// alert on each project concerned, and registers the "metadata" component of /status (degraded while
// there are mismatches, naming them).
func (s *Service) ReportMismatches(ctx context.Context) error {
	texts, err := s.ApplyRevocations()
	if err != nil {
		return err
	}
	ms, err := reconcile(s.db, s.cfg.DataDir)
	if err != nil {
		return fmt.Errorf("reconcile the metadata with the data directory: %w", err)
	}
	for _, m := range ms {
		texts = append(texts, m.text)
	}
	for _, t := range texts {
		s.log.Warn("the metadata does not match the data directory", "mismatch", t)
	}
	err = s.db.Update(func(tx *store.Tx) error {
		byProject := map[string][]string{}
		for _, m := range ms {
			if m.projectID != "" {
				byProject[m.projectID] = append(byProject[m.projectID], m.text)
			}
		}
		return s.observe.DataMissing(tx, byProject)
	})
	if err != nil {
		return fmt.Errorf("raise data_missing alerts: %w", err)
	}
	s.Probe.Register("metadata", func(context.Context) (string, string) {
		if len(texts) == 0 {
			return StatusOperational, "the metadata matches the data directory"
		}
		return StatusDegraded, fmt.Sprintf("%d mismatches between the metadata and the data directory (found at start): %s",
			len(texts), strings.Join(texts, "; "))
	})
	return nil
}
