package cmd

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

	"github.com/spf13/cobra"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/backup/s3store"
	"github.com/theappliance/appliance/appliance/backup/walsock"
)

// backupStoreKeyInfo is the HKDF info the backup store's data key is derived with from the appliance's
// secret key (when no --backup-store-key-file is given). Changing it loses every object in the bucket.
const backupStoreKeyInfo = "appliance backup store data key v1"

func init() {
	// PostgreSQL's archive_command and restore_command with a bucket as the backup store (walsock).
	root.AddCommand(&cobra.Command{
		Use:                "wal",
		Short:              "Carry a WAL file between PostgreSQL and the appliance (run by PostgreSQL)",
		Hidden:             true,
		DisableFlagParsing: true,
		Run: func(c *cobra.Command, args []string) {
			if code := walsock.Main(args, c.ErrOrStderr()); code != 0 {
				os.Exit(code)
			}
		},
	})
}

// parseBackupStore reads up's --backup-store* flags: nil for the local directory (no --backup-store),
// else the bucket's configuration, its DataKey from --backup-store-key-file or nil (derived from the
// secret key by the caller), and no Spool or Chown.
func parseBackupStore(cfg UpConfig) (*s3store.Config, error) {
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
// its stages under the data directory given to the instances' OS user (chown); nil for the local
// directory.
func openBackupStore(cfg UpConfig, dataDir string, box *appliance.SecretBox, chown func(string) error) (*s3store.Bucket, error) {
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
	b, err := s3store.New(*sc)
	if err != nil {
		return nil, fmt.Errorf("--backup-store: %w", err)
	}
	return b, nil
}

// backupStoreCheck: the bucket exists and the credentials may put, get and delete in it (with a probe
// object sealed under a throwaway key when the data key is derived: sealing is not what is checked).
func backupStoreCheck(ctx context.Context, cfg UpConfig, dataDir string) check {
	c := check{name: "backup store", level: levelOK}
	sc, err := parseBackupStore(cfg)
	if err != nil {
		c.level, c.detail, c.fix = levelFail, err.Error(), "see the README's table of up's flags"
		return c
	}
	if sc == nil {
		c.detail = "the local directory " + filepath.Join(dataDir, "backups")
		return c
	}
	if sc.DataKey == nil {
		sc.DataKey = make([]byte, 32)
		rand.Read(sc.DataKey)
	}
	b, err := s3store.New(*sc)
	if err == nil {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = b.Check(ctx)
		cancel()
		if err == nil {
			c.detail = b.String()
			return c
		}
	}
	c.level, c.detail = levelFail, err.Error()
	switch {
	case errors.Is(err, s3store.ErrNoSuchBucket):
		c.fix = "create the bucket, or correct --backup-store"
	case errors.Is(err, s3store.ErrAccessDenied):
		c.fix = "check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or --backup-store-credentials-file, and the bucket's policy"
	case errors.Is(err, s3store.ErrUnreachable):
		c.fix = "check --backup-store-endpoint (http:// for a plain-HTTP server) and the network"
	default:
		c.fix = "check the --backup-store flags"
	}
	return c
}
