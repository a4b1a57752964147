package node

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/backup/s3store"
)

// backupStoreKeyInfo is the HKDF info the backup store's data key is derived with from the appliance's
// secret key (when no --backup-store-key-file is given). Changing it loses every object in the bucket.
const backupStoreKeyInfo = "appliance backup store data key v1"

// parseBackupStore reads up's --backup-store* flags: nil for the local directory (no --backup-store),
// else the bucket's configuration, its DataKey from --backup-store-key-file or nil (derived from the
// secret key by the caller), and no Spool or Chown.
func parseBackupStore(cfg Config) (*s3store.Config, error) {
	if cfg.BackupStore == "" {
		return nil, nil
	}
	u, err := url.Parse(cfg.BackupStore)
	if err != nil || u.Scheme != "s3" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("--backup-store %q: want s3://BUCKET or s3://BUCKET/PREFIX", cfg.BackupStore)
	}
	sc := &s3store.Config{Bucket: u.Host, Prefix: strings.Trim(u.Path, "/"), Region: cfg.BackupStoreRegion, PathStyle: cfg.BackupStorePathStyle}
	if ep := cfg.BackupStoreEndpoint; strings.Contains(ep, "://") {
		e, err := url.Parse(ep)
		if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" || strings.Trim(e.Path, "/") != "" || e.RawQuery != "" {
			return nil, fmt.Errorf("--backup-store-endpoint %q: want host[:port], https://host[:port] or http://host[:port]", ep)
		}
		sc.Endpoint, sc.PlainHTTP = e.Host, e.Scheme == "http"
	} else {
		sc.Endpoint = ep
	}
	if f := cfg.BackupStoreCredentialsFile; f != "" {
		if sc.AccessKey, sc.SecretKey, err = readCredentialsFile(f); err != nil {
			return nil, fmt.Errorf("--backup-store-credentials-file: %w", err)
		}
	}
	if f := cfg.BackupStoreKeyFile; f != "" {
		if sc.DataKey, err = readKeyFile(f); err != nil {
			return nil, fmt.Errorf("--backup-store-key-file: %w", err)
		}
	}
	return sc, nil
}

// readCredentialsFile reads AWS_ACCESS_KEY_ID=... and AWS_SECRET_ACCESS_KEY=... lines (an environment
// file, as systemd's EnvironmentFile= reads; blank lines and lines starting with # are skipped).
func readCredentialsFile(path string) (access, secret string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", "", err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		switch k = strings.TrimSpace(k); {
		case !ok:
			return "", "", fmt.Errorf("%s:%d: not NAME=VALUE", path, n)
		case k == "AWS_ACCESS_KEY_ID":
			access = strings.TrimSpace(v)
		case k == "AWS_SECRET_ACCESS_KEY":
			secret = strings.TrimSpace(v)
		default:
			return "", "", fmt.Errorf("%s:%d: %s is not AWS_ACCESS_KEY_ID or AWS_SECRET_ACCESS_KEY", path, n, k)
		}
	}
	if access == "" || secret == "" {
		return "", "", fmt.Errorf("%s: want both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", path)
	}
	return access, secret, nil
}

// readKeyFile reads a data key: 32 bytes, or 64 hexadecimal digits (surrounding white space ignored).
func readKeyFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(data) == 32 {
		return data, nil
	}
	if t := strings.TrimSpace(string(data)); len(t) == 64 {
		if key, err := hex.DecodeString(t); err == nil {
			return key, nil
		}
	}
	return nil, fmt.Errorf("%s: want 32 bytes or 64 hexadecimal digits (head -c 32 /dev/urandom > FILE)", path)
}

// openBackupStore is the bucket of up's flags for the service, its data key given or derived from box,
// its stages under the data directory given to the instances' OS user (chown) and its uploads'
// state beside them; nil for the local directory.
func openBackupStore(cfg Config, dataDir string, box *appliance.SecretBox, chown func(string) error) (*s3store.Bucket, error) {
	sc, err := parseBackupStore(cfg)
	if sc == nil || err != nil {
		return nil, err
	}
	if sc.DataKey == nil {
		if sc.DataKey, err = box.DeriveKey(backupStoreKeyInfo); err != nil {
			return nil, err
		}
	}
	sc.Spool, sc.Chown = filepath.Join(dataDir, "spool"), chown
	// The state of unfinished multipart uploads, for a later Put of the same key (a segment archive_command
	// retries, a backup's Commit) to resume them. Only this store's: the metadata snapshots' store (another
	// data key, keys never put again) has none, so its failed uploads are aborted.
	sc.UploadState = filepath.Join(dataDir, "spool", "uploads")
	b, err := s3store.New(*sc)
	if err != nil {
		return nil, fmt.Errorf("--backup-store: %w", err)
	}
	return b, nil
}

// backupStoreCheck: the bucket exists and the credentials may put, get and delete in it (with a probe
// object sealed under a throwaway key when the data key is derived: sealing is not what is checked); and,
// while an appliance runs on the data directory (and up is not the one checking), what it says of its
// store (withRunningStore).
func backupStoreCheck(r *checkRun, c *Check) {
	if storeReachable(r, c); c.Level != LevelFail {
		withRunningStore(r, c)
	}
}

// withRunningStore adds to the backup store line the running appliance's /status backup-store component
// (the last upload, the WAL lag in bytes and seconds, the projects whose archiving fails): a warning when
// it is not operational. Without a running appliance there is no lag to read, and the line says so.
func withRunningStore(r *checkRun, c *Check) {
	if !r.running || r.Install || r.Status == nil {
		c.Detail += "; the WAL lag is shown while the appliance runs"
		return
	}
	comp, err := r.Status(r.ctx, r.cfg, r.dataDir, "backup-store")
	if err != nil {
		c.Detail += "; the running appliance's view of it could not be read: " + err.Error()
		return
	}
	c.Detail += "; the running appliance: " + comp.Message
	if public := (&api.Status{Components: []api.Component{*comp}}).Public().Components[0]; public == *comp {
		// /status answered without its details: they are an operator's (up's metrics token or listener)
		c.Detail += " (the last upload and the WAL lag need up's --metrics-token or --metrics-listen, given to doctor too)"
	}
	if comp.Status != api.StatusOperational {
		c.Level = LevelWarn
		c.Fix = "WAL waits on the local disk until the store takes it: each failing project has a backup_store_unreachable alert (its Monitoring tab; GET /v1/projects/{id}/alerts) saying why: fix the store's reachability or space"
	}
}

// storeReachable: the bucket exists and the credentials work (the local directory needs no check).
func storeReachable(r *checkRun, c *Check) {
	sc, err := parseBackupStore(r.cfg)
	if err != nil {
		c.Level, c.Detail, c.Fix = LevelFail, err.Error(), "see the README's table of up's flags"
		return
	}
	if sc == nil {
		c.Detail = "the local directory " + filepath.Join(r.dataDir, "backups")
		return
	}
	if sc.DataKey == nil {
		sc.DataKey = make([]byte, 32)
		rand.Read(sc.DataKey)
	}
	b, err := s3store.New(*sc)
	if err == nil {
		ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
		err = b.Check(ctx)
		cancel()
		if err == nil {
			c.Detail = b.String()
			return
		}
	}
	c.Level, c.Detail = LevelFail, err.Error()
	switch {
	case errors.Is(err, s3store.ErrNoSuchBucket):
		c.Fix = "create the bucket, or correct --backup-store"
	case errors.Is(err, s3store.ErrAccessDenied):
		c.Fix = "check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or --backup-store-credentials-file, and the bucket's policy"
	case errors.Is(err, s3store.ErrUnreachable):
		c.Fix = "check --backup-store-endpoint (http:// for a plain-HTTP server) and the network"
	default:
		c.Fix = "check the --backup-store flags"
	}
}
