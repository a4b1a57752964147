package appliance

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/theappliance/appliance/appliance/observe"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/store"
)

// Storage limits are held between samples by the storage guard (docs/api-decisions.md "Storage limits
// held, ephemeral bounds, disk reserve"): every StorageGuardInterval it measures the files of every active
// database that has a storage limit, and puts one that went over under a lock.
const (
	// StorageGuardInterval is how often the guard runs; it measures only the databases due (those near
	// their limits: StorageGuardRate). A client writing as fast as it can goes past the limit by at most
	// what it writes in one interval and the lock's reaction (its sessions ended): one INSERT writes up to
	// about 200 MB/s on these machines, so about 20 MB.
	StorageGuardInterval = 100 * time.Millisecond
	// StorageLockGrowth is how much a read-only database may still grow (vacuum's map forks) before the
	// guard concludes that a client lifted the read-only default and ends its logins.
	StorageLockGrowth = 2 << 20
	// StorageGuardRate is the write rate the guard assumes when it spaces out the measures of a database
	// far from its limit: it measures again before one writing that fast could reach it (at most every
	// storageGuardIdle), so that a pass stats the files of the few databases near their limits only.
	StorageGuardRate = 256 << 20 // bytes per second
	storageGuardIdle = 5 * time.Second
	// storageDirTTL is how long the guard trusts the directory it found for a database (a cutover or a
	// restore may give the database another one).
	storageDirTTL = 30 * time.Second
)

// Storage locks of a database over its storage limit.
const (
	// StorageReadOnly: transactions are read-only by default (database and login roles), its sessions
	// were ended. A client may switch its own session back: growth past StorageLockGrowth then makes it
	// StorageNoConnections.
	StorageReadOnly = "read_only"
	// StorageNoConnections: its login roles are NOLOGIN (a role cannot give itself LOGIN back) and its
	// sessions were ended.
	StorageNoConnections = "no_connections"
)

// storageGuard is the guard's state: one pass at a time, and where each database's files are.
type storageGuard struct {
	mu sync.Mutex
	// dirsMu guards dirs alone: a lock being applied (storageLock) measures too, outside mu.
	dirsMu sync.Mutex
	dirs   map[string]databaseDir // project ID → its database's directory
	// applied names, by project ID, the instance whose lock this process has applied (or confirmed).
	applied map[string]string
	// due is when a database is measured next (storageGuardRate); retry when a lock that failed is tried
	// again (not every pass: each failure is logged).
	due   map[string]guardDue
	retry map[string]time.Time
	// locking names the projects whose lock is being applied: one database's lock (ending its sessions can
	// take seconds) never holds up the measures of the others; wg waits for them.
	locking map[string]bool
	wg      sync.WaitGroup
}

// guardDue is when a database is measured next, and the limit that time was reckoned from: a lower limit
// since (a plan change) makes it due at once.
type guardDue struct {
	at    time.Time
	limit int64
}

type databaseDir struct {
	instanceID, database, path string
	at                         time.Time
}

// RunStorageGuard runs the guard every interval until ctx ends. Its locks are applied in the background,
// so that a slow one does not delay the next measures; it returns once they ended.
func (s *Service) RunStorageGuard(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	defer s.guard.wg.Wait()
	for {
		if n, err := s.enforceStorage(ctx, false); err != nil && ctx.Err() == nil {
			s.log.Error("storage guard", "err", err)
		} else if n > 0 {
			s.log.Info("storage guard: locks changed", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// EnforceStorage measures every active database with a storage limit (projects, claimed or not, and
// previews) by the size of its files, and locks or unlocks it (storageVerdict). It returns how many locks
// it changed, once they are applied.
func (s *Service) EnforceStorage(ctx context.Context) (int, error) {
	return s.enforceStorage(ctx, true)
}

// enforceStorage is one pass of the guard: it measures, and applies each lock that changes in a goroutine
// of its own (the database is not measured again until that ended). With wait it returns once they ended
// (counting those that succeeded, with their errors); otherwise at once, counting the locks it started.
func (s *Service) enforceStorage(ctx context.Context, wait bool) (int, error) {
	var mu sync.Mutex // guards n and errs, which the locks' goroutines add to when waited for
	var wg sync.WaitGroup
	n, errs := 0, []error(nil)
	n2, err := s.storagePass(ctx, func(prjID, instID, lock string, change bool) {
		s.guard.wg.Add(1)
		wg.Add(1)
		go func() {
			defer s.guard.wg.Done()
			defer wg.Done()
			err := s.storageLock(ctx, prjID, lock)
			s.guard.mu.Lock()
			delete(s.guard.locking, prjID)
			if err != nil {
				if s.guard.retry == nil {
					s.guard.retry = map[string]time.Time{}
				}
				s.guard.retry[prjID] = time.Now().Add(storageGuardIdle)
			} else {
				delete(s.guard.retry, prjID)
				if s.guard.applied == nil {
					s.guard.applied = map[string]string{}
				}
				s.guard.applied[prjID] = instID
			}
			s.guard.mu.Unlock()
			if err != nil {
				err = fmt.Errorf("lock %q on project %s: %w", lock, prjID, err)
				if !wait {
					s.log.Error("storage guard", "err", err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else if change && wait {
				n++
			}
		}()
	})
	if !wait {
		return n2, err
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	return n, errors.Join(append(errs, err)...)
}

// storagePass measures and hands each lock to apply to lock (with whether it changes the record's); it
// returns how many changes it handed over.
func (s *Service) storagePass(ctx context.Context, apply func(prjID, instID, lock string, change bool)) (int, error) {
	s.guard.mu.Lock()
	defer s.guard.mu.Unlock()
	diskLow := s.CheckDisk().Low
	type target struct {
		prj  *store.Project
		inst *store.Instance
	}
	var targets []target
	if err := s.db.View(func(tx *store.Tx) error {
		prjs, err := store.Projects.All(tx, func(p *store.Project) bool {
			return p.State == ProjectActive && p.PrimaryInstanceID != "" && p.StorageLimitBytes > 0 && p.DeletedAt == nil
		})
		if err != nil {
			return err
		}
		for _, p := range prjs {
			if inst, err := store.Instances.Get(tx, p.PrimaryInstanceID); err == nil {
				targets = append(targets, target{p, inst})
			}
		}
		return nil
	}); err != nil {
		return 0, fmt.Errorf("read projects: %w", err)
	}
	n := 0
	var errs []error
	now := time.Now()
	due := make(map[string]guardDue, len(targets)) // projects no longer measured are dropped
	for _, t := range targets {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		if s.guard.locking[t.prj.ID] {
			continue // measured again once its lock is applied
		}
		if d, ok := s.guard.due[t.prj.ID]; ok && now.Before(d.at) && d.limit <= t.prj.StorageLimitBytes && !diskLow && t.prj.StorageLock == "" {
			due[t.prj.ID] = d
			continue
		}
		size, err := s.databaseFilesSize(ctx, t.prj, t.inst)
		if err != nil {
			s.log.Debug("storage guard: measure", "project", t.prj.ID, "err", err)
			continue
		}
		// Far from its limit, a database is measured again just before a client writing at
		// StorageGuardRate could reach it.
		wait := time.Duration(float64(t.prj.StorageLimitBytes-size) / StorageGuardRate * float64(time.Second))
		due[t.prj.ID] = guardDue{at: now.Add(min(max(wait, 0), storageGuardIdle)), limit: t.prj.StorageLimitBytes}
		lock := storageVerdict(t.prj, size, diskLow)
		if lock == t.prj.StorageLock && s.guard.applied[t.prj.ID] == t.inst.ID {
			continue
		}
		// A lock is applied again the first time this process sees the server: an appliance stopped in
		// the middle of storageLock may have left the server and the record disagreeing.
		if now.Before(s.guard.retry[t.prj.ID]) {
			continue
		}
		if s.guard.locking == nil {
			s.guard.locking = map[string]bool{}
		}
		s.guard.locking[t.prj.ID] = true
		apply(t.prj.ID, t.inst.ID, lock, lock != t.prj.StorageLock)
		if lock != t.prj.StorageLock {
			n++
		}
	}
	s.guard.due = due
	return n, errors.Join(errs...)
}

// storageVerdict is the lock a database of size bytes should be under: read-only over its limit or while
// the appliance's disk is under its reserve (diskLow); no logins when it grew by StorageLockGrowth while
// read-only (a client lifted the default); none once it is back under nine tenths of its limit (data
// dropped, or a larger limit: a claim, a plan change) and the disk has room.
func storageVerdict(prj *store.Project, size int64, diskLow bool) string {
	limit := prj.StorageLimitBytes
	switch {
	case prj.StorageLock != "" && size <= limit-limit/10 && !diskLow:
		return ""
	case prj.StorageLock == "" && (size > limit || diskLow):
		return StorageReadOnly
	case prj.StorageLock == StorageReadOnly && size > cmp.Or(prj.StorageLockedBytes, limit)+StorageLockGrowth:
		return StorageNoConnections
	}
	return prj.StorageLock
}

// databaseFilesSize is the size of the files of the project's database (what pg_database_size counts:
// the tenant cannot create tablespaces), read from the data directory without a session.
func (s *Service) databaseFilesSize(ctx context.Context, prj *store.Project, inst *store.Instance) (int64, error) {
	g := &s.guard
	g.dirsMu.Lock()
	d, ok := g.dirs[prj.ID]
	g.dirsMu.Unlock()
	if !ok || d.instanceID != inst.ID || d.database != prj.DatabaseName || time.Since(d.at) > storageDirTTL {
		var err error
		if d, err = s.findDatabaseDir(ctx, prj, inst); err != nil {
			return 0, err
		}
		g.dirsMu.Lock()
		if g.dirs == nil {
			g.dirs = map[string]databaseDir{}
		}
		g.dirs[prj.ID] = d
		g.dirsMu.Unlock()
	}
	size, err := dirSize(d.path)
	if errors.Is(err, fs.ErrNotExist) {
		g.dirsMu.Lock()
		delete(g.dirs, prj.ID) // found again next time
		g.dirsMu.Unlock()
	}
	return size, err
}

// findDatabaseDir asks the server for the database's OID: its files are in base/<oid>.
func (s *Service) findDatabaseDir(ctx context.Context, prj *store.Project, inst *store.Instance) (databaseDir, error) {
	ctx, cancel := context.WithTimeout(ctx, observe.SampleTimeout)
	defer cancel()
	conn, err := s.quietAdminConn(ctx, inst, "postgres")
	if err != nil {
		return databaseDir{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var oid uint32
	if err := conn.QueryRow(ctx, "SELECT oid FROM pg_database WHERE datname = $1", prj.DatabaseName).Scan(&oid); err != nil {
		return databaseDir{}, fmt.Errorf("find database %s: %w", prj.DatabaseName, err)
	}
	path := filepath.Join((&postgres.Instance{Dir: inst.Dir}).DataDir(), "base", strconv.FormatUint(uint64(oid), 10))
	return databaseDir{instanceID: inst.ID, database: prj.DatabaseName, path: path, at: time.Now()}, nil
}

// dirSize sums the sizes of the files directly in dir (a database directory has no subdirectories).
func dirSize(dir string) (int64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			continue // removed since the listing (a dropped table)
		}
		if fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n, nil
}

// storageLock puts a project's database under lock ("" lifts every lock), ends its sessions when one is
// set, and records it. The read-only default is set on the database and on both login roles; the
// logins' NOLOGIN is what a tenant cannot undo (changing LOGIN needs CREATEROLE).
func (s *Service) storageLock(ctx context.Context, projectID, lock string) error {
	prj, inst, err := s.loadProject(projectID)
	if err != nil || inst == nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := s.adminConn(ctx, inst, "postgres")
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	names := []string{prj.RoleName, altRole(prj.RoleName)}
	rows, err := conn.Query(ctx, "SELECT rolname FROM pg_roles WHERE rolname = ANY($1)", names)
	if err != nil {
		return fmt.Errorf("read roles: %w", err)
	}
	roles, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("read roles: %w", err)
	}
	db := pgx.Identifier{prj.DatabaseName}.Sanitize()
	var stmts []string
	switch lock {
	case "":
		stmts = append(stmts, "ALTER DATABASE "+db+" RESET default_transaction_read_only", "ALTER DATABASE "+db+" CONNECTION LIMIT -1")
		for _, r := range roles {
			stmts = append(stmts, "ALTER ROLE "+pgx.Identifier{r}.Sanitize()+" RESET default_transaction_read_only",
				"ALTER ROLE "+pgx.Identifier{r}.Sanitize()+" LOGIN")
		}
	case StorageReadOnly, StorageNoConnections:
		stmts = append(stmts, "ALTER DATABASE "+db+" SET default_transaction_read_only = on")
		for _, r := range roles {
			stmts = append(stmts, "ALTER ROLE "+pgx.Identifier{r}.Sanitize()+" SET default_transaction_read_only = on")
			if lock == StorageNoConnections {
				stmts = append(stmts, "ALTER ROLE "+pgx.Identifier{r}.Sanitize()+" NOLOGIN")
			}
		}
	default:
		return fmt.Errorf("unknown storage lock %q", lock)
	}
	for _, q := range stmts {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	var lockedAt int64
	if lock != "" {
		// The sessions open now would keep writing under the old default: end them, in any database, and
		// wait for them to be gone (up to 5 s each) so that the size measured next is the locked one.
		if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity
			WHERE backend_type = 'client backend' AND (datname = $1 OR usename = ANY($2)) AND usename IS DISTINCT FROM $3`,
			prj.DatabaseName, roles, adminUser); err != nil {
			return fmt.Errorf("end the sessions of %s: %w", prj.DatabaseName, err)
		}
		if lockedAt, err = s.databaseFilesSize(ctx, prj, inst); err != nil {
			return fmt.Errorf("measure %s: %w", prj.DatabaseName, err)
		}
	}
	return s.db.Update(func(tx *store.Tx) error {
		cur, err := store.Projects.Get(tx, projectID)
		if err != nil {
			return err
		}
		if cur.StorageLock == lock { // applied again (EnforceStorage): the record holds already
			return nil
		}
		cur.StorageLock, cur.StorageLockedBytes, cur.UpdatedAt = lock, lockedAt, s.now()
		if err := store.Projects.Put(tx, cur); err != nil {
			return err
		}
		action := "project.storage_lock"
		if lock == "" {
			action = "project.storage_unlock"
		}
		return s.audit(tx, &Principal{AuthSource: ActorSystem}, action, cur.OrganizationID, cur.ID,
			map[string]any{"lock": lock, "storage_limit_bytes": cur.StorageLimitBytes, "storage_bytes": lockedAt})
	})
}
