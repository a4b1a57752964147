package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/cluster"
	"github.com/theappliance/appliance/store"
)

// MetaFile is the metadata store of a data directory.
func MetaFile(dataDir string) string { return filepath.Join(dataDir, "meta.db") }

// priorRun lists what in a data directory shows an appliance ran on it before: instances, key-value
// stores, backups, the credentials of its first start and, with markers, the CA and the store's recorded
// generation (which a first start that failed before its bootstrap also leaves). Without its metadata,
// none of it may be taken for a first start.
func priorRun(dataDir string, markers bool) []string {
	var found []string
	for _, d := range []struct{ dir, what string }{
		{"instances", "instance directories"}, {"kv", "key-value store directories"}, {"backups", "projects' backups"},
	} {
		entries, _ := os.ReadDir(filepath.Join(dataDir, d.dir))
		if len(entries) > 0 {
			names := []string{}
			for i, e := range entries {
				if i == 3 {
					names = append(names, "…")
					break
				}
				names = append(names, e.Name())
			}
			found = append(found, fmt.Sprintf("%d %s in %s/ (%s)", len(entries), d.what, d.dir, strings.Join(names, ", ")))
		}
	}
	for _, f := range []struct {
		path, what string
		marker     bool
	}{
		{"bootstrap.json", "the first start's credentials (bootstrap.json)", false},
		{"ca/ca.crt", "a certificate authority (ca/)", true},
		{"meta.db.generation", "the metadata store's recorded generation (meta.db.generation)", true},
		{"revoked", "the record of revoked credentials (revoked)", true},
	} {
		if f.marker && !markers {
			continue
		}
		if _, err := os.Stat(filepath.Join(dataDir, f.path)); err == nil {
			found = append(found, f.what)
		}
	}
	return found
}

// errNoMetadata is up's refusal to take a data directory that ran before for a first start.
func errNoMetadata(dataDir, state string, found []string) error {
	return fmt.Errorf("refusing to start: %s %s, but the data directory holds %s: starting would make a new organization and admin key "+
		"and hide every project. Restore meta.db from a copy of it (stop the appliance, put the copy at %s, start again); "+
		"to start afresh instead, move the data directory away (mv %s %s.old)",
		MetaFile(dataDir), state, strings.Join(found, "; "), MetaFile(dataDir), dataDir, dataDir)
}

// metadataCheck is the data directory's metadata as doctor and up see it before anything starts: a missing
// or empty meta.db beside what an earlier run left fails. Doctor also opens the store to read —
// its header, pages, records' checksums, generation — and compares it with the data directory (a
// mismatch is a warning); up does the same as it opens the store.
func metadataCheck(r *checkRun, c *Check) {
	dataDir := r.dataDir
	if cluster.IsNode(dataDir) {
		c.Detail = "a cluster node: the metadata is in the cluster's etcd (" + cluster.File(dataDir) + ")"
		return
	}
	path := MetaFile(dataDir)
	st, err := os.Stat(path)
	if err != nil || st.Size() == 0 {
		state := "is missing"
		if err == nil {
			state = "is empty"
		}
		if found := priorRun(dataDir, true); len(found) > 0 {
			c.Level, c.Detail = LevelFail, errNoMetadata(dataDir, state, found).Error()
			c.Fix = fmt.Sprintf("restore meta.db from a copy into %s, or move %s away to start afresh", dataDir, dataDir)
			return
		}
		c.Detail = path + " is created at first start"
		return
	}
	if r.running {
		c.Detail = path + " is in use by the running appliance"
		return
	}
	if r.Install { // up checks the store itself as it opens it
		c.Detail = path
		return
	}
	db, err := store.OpenWith(path, store.Options{ReadOnly: true, AcceptOlderMetadata: r.cfg.AcceptOlderMetadata})
	if err != nil {
		c.Level, c.Detail = LevelFail, err.Error()
		switch {
		case errors.Is(err, store.ErrOlderMetadata):
			c.Fix = "put the newest meta.db back, or start with --accept-older-metadata (revoked credentials stay revoked; doctor then lists what differs from the disk)"
		case errors.Is(err, store.ErrDamaged):
			c.Fix = "stop, restore meta.db from a copy of it, and start again"
		default:
			c.Fix = "check the file's owner and mode"
		}
		return
	}
	defer db.Close()
	mismatches, err := appliance.Reconcile(db, dataDir)
	switch {
	case err != nil:
		c.Level, c.Detail, c.Fix = LevelFail, fmt.Sprintf("%s: %v", path, err), "stop, restore meta.db from a copy of it, and start again"
	case len(mismatches) > 0:
		c.Level, c.Detail = LevelWarn, fmt.Sprintf("%s does not match the data directory: %s", path, strings.Join(mismatches, "; "))
		c.Fix = "an older meta.db was put back, or files were moved: restore the newest meta.db, or remove what is no longer wanted"
	default:
		c.Detail = path + " is sound and matches the data directory"
	}
}

// openStore opens the data directory's metadata store for up. A store never bootstrapped beside what an
// earlier run left (instances, key-value stores, backups, bootstrap.json) is refused as a missing one is:
// the bootstrap runs before anything else writes there.
func openStore(cfg Config, dataDir string) (*store.DB, error) {
	db, err := store.OpenWith(MetaFile(dataDir), store.Options{AcceptOlderMetadata: cfg.AcceptOlderMetadata})
	if err != nil {
		return nil, err
	}
	var bootstrapped bool
	db.View(func(tx *store.Tx) error { bootstrapped = appliance.Bootstrapped(tx); return nil })
	if !bootstrapped {
		if found := priorRun(dataDir, false); len(found) > 0 {
			db.Close()
			return nil, errNoMetadata(dataDir, "holds no organization (it was never bootstrapped)", found)
		}
	}
	return db, nil
}
