package postgres

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// fencedHBA is pg_hba.conf while an instance is fenced: the admin over loopback only (replication
// included); every other login is refused.
var fencedHBA = hbaFile[:strings.Index(hbaFile, "hostssl")] +
	"host    all          all              0.0.0.0/0      reject\nhost    all          all              ::/0           reject\n"

// Fence writes the pg_hba.conf that refuses every login but the admin's (fenced) or the usual one, for the
// next (re)load: an instance a major upgrade moves away from, or keeps for a rollback, takes no client
// writes. Callers reload with ReloadConf.
func (i *Instance) Fence(fenced bool) error {
	if err := i.check(); err != nil {
		return err
	}
	hba := hbaFile
	if fenced {
		hba = fencedHBA
	}
	return i.User.WriteFile(filepath.Join(i.DataDir(), "pg_hba.conf"), []byte(hba), 0o600)
}

// HBA is the pg_hba.conf of an instance fenced or not (a copy of a fenced server's data given the usual
// one: backups.onlineBackup).
func HBA(fenced bool) []byte {
	if fenced {
		return []byte(fencedHBA)
	}
	return []byte(hbaFile)
}

// Fenced reports whether the instance's pg_hba.conf is the fenced one.
func (i *Instance) Fenced() bool {
	b, err := os.ReadFile(filepath.Join(i.DataDir(), "pg_hba.conf"))
	return err == nil && string(b) == fencedHBA
}

// ReloadConf makes the server on conn reload its files and returns once it has (the postmaster reloads
// before it signals the backends, so a backend that reloaded means pg_hba.conf is in force for new logins).
func ReloadConf(ctx context.Context, conn *pgx.Conn) error {
	var before time.Time
	if err := conn.QueryRow(ctx, "SELECT pg_conf_load_time()").Scan(&before); err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	for {
		var now time.Time
		if err := conn.QueryRow(ctx, "SELECT pg_conf_load_time()").Scan(&now); err != nil {
			return fmt.Errorf("reload: %w", err)
		}
		if now.After(before) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// ApplyFence puts the pg_hba.conf Fence wrote in force on the server conn is an admin session of: the
// server reloads it, and when fenced every client session (not the admin's) is ended, so no client writes
// from the moment it returns.
func ApplyFence(ctx context.Context, conn *pgx.Conn, fenced bool) error {
	if err := ReloadConf(ctx, conn); err != nil {
		return err
	}
	if !fenced {
		return nil
	}
	_, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE backend_type = 'client backend' AND usename IS DISTINCT FROM $1 AND pid <> pg_backend_pid()`, AdminRole)
	return err
}

// FenceForPgUpgrade writes the fenced pg_hba.conf with one more line first: the admin's logins on Unix
// sockets, by password. pg_upgrade starts the old and the new cluster on sockets of its own (the instances
// listen on TCP only, so the line admits nothing outside pg_upgrade's runs).
func (i *Instance) FenceForPgUpgrade() error {
	if err := i.check(); err != nil {
		return err
	}
	return i.User.WriteFile(filepath.Join(i.DataDir(), "pg_hba.conf"), []byte(pgUpgradeHBA), 0o600)
}

// pgUpgradeHBA is pg_hba.conf while pg_upgrade works on the instance (FenceForPgUpgrade).
var pgUpgradeHBA = "local   all          " + AdminRole + "  scram-sha-256\n" + fencedHBA

// FencedForPgUpgrade reports whether the instance's pg_hba.conf is FenceForPgUpgrade's: pg_upgrade was to
// run on it, and nothing has opened it since.
func (i *Instance) FencedForPgUpgrade() bool {
	b, err := os.ReadFile(filepath.Join(i.DataDir(), "pg_hba.conf"))
	return err == nil && string(b) == pgUpgradeHBA
}
