package storageguard

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

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/appliance/observe"
	"github.com/theappliance/appliance/appliance/postgres"
	"github.com/theappliance/appliance/store"
)

// Storage limits are held between samples by the storage guard (docs/api-decisions.md "Storage limits
// held, ephemeral bounds, disk reserve"): every Interval it measures the files of every active database
// that has a storage limit, and puts one that went over under a lock.
const (
	// Interval is how often the guard runs; it measures only the databases due (those near their limits:
	// Rate). A client writing as fast as it can goes past the limit by at most what it writes in one
	// interval and the lock's reaction (its sessions ended): one INSERT writes up to about 200 MB/s on
	// these machines, so about 20 MB.
	Interval = 100 * time.Millisecond
	// LockGrowth is how much a read-only database may still grow (vacuum's map forks) before the guard
	// concludes that a client lifted the read-only default and ends its logins.
	LockGrowth = 2 << 20
	// Rate is the write rate the guard assumes when it spaces out the measures of a database far from its
	// limit: it measures again before one writing that fast could reach it (at most every guardIdle), so
	// that a pass stats the files of the few databases near their limits only.
	Rate      = 256 << 20 // bytes per second
	guardIdle = 5 * time.Second
	// dirTTL is how long the guard trusts the directory it found for a database (a cutover or a restore
	// may give the database another one).
	dirTTL = 30 * time.Second
)

// Storage locks of a database over its storage limit.
const (
	// ReadOnly: transactions are read-only by default (database and login roles), its sessions were
	// ended. A client may switch its own session back: growth past LockGrowth then makes it NoConnections.
	ReadOnly = "read_only"
	// NoConnections: its login roles are NOLOGIN (a role cannot give itself LOGIN back) and its sessions
	// were ended.
	NoConnections = "no_connections"
)

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

// Run runs the guard every interval until ctx ends. Its locks are applied in the background,
// so that a slow one does not delay the next measures; it returns once they ended.
func (g *Guard) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	defer g.wg.Wait()
	for {
		if n, err := g.enforce(ctx, false); err != nil && ctx.Err() == nil {
			g.log.Error("storage guard", "err", err)
		} else if n > 0 {
			g.log.Info("storage guard: locks changed", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Enforce measures every active database with a storage limit (projects, claimed or not, and
// previews) by the size of its files, and locks or unlocks it (verdict). It returns how many locks
// it changed, once they are applied.
func (g *Guard) Enforce(ctx context.Context) (int, error) {
	return g.enforce(ctx, true)
}

// enforce is one pass of the guard: it measures, and applies each lock that changes in a goroutine
// of its own (the database is not measured again until that ended). With wait it returns once they ended
// (counting those that succeeded, with their errors); otherwise at once, counting the locks it started.
func (g *Guard) enforce(ctx context.Context, wait bool) (int, error) {
	var mu sync.Mutex // guards n and errs, which the locks' goroutines add to when waited for
	var wg sync.WaitGroup
	n, errs := 0, []error(nil)
	n2, err := g.pass(ctx, func(prjID, instID, lock string, change bool) {
		g.wg.Add(1)
		wg.Add(1)
		go func() {
			defer g.wg.Done()
			defer wg.Done()
			err := g.lock(ctx, prjID, lock)
			g.mu.Lock()
			delete(g.locking, prjID)
			if err != nil {
				if g.retry == nil {
					g.retry = map[string]time.Time{}
				}
				g.retry[prjID] = time.Now().Add(guardIdle)
			} else {
				delete(g.retry, prjID)
				if g.applied == nil {
					g.applied = map[string]string{}
				}
				g.applied[prjID] = instID
			}
			g.mu.Unlock()
			if err != nil {
				err = fmt.Errorf("lock %q on project %s: %w", lock, prjID, err)
				if !wait {
					g.log.Error("storage guard", "err", err)
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

// pass measures and hands each lock to apply to lock (with whether it changes the record's); it
// returns how many changes it handed over.
func (g *Guard) pass(ctx context.Context, apply func(prjID, instID, lock string, change bool)) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	diskLow := g.CheckDisk().Low
	type target struct {
		prj  *store.Project
		inst *store.Instance
	}
	var targets []target
	if err := g.db.View(func(tx *store.Tx) error {
		prjs, err := store.Projects.All(tx, func(p *store.Project) bool {
			// A project suspended for idleness (scale to zero) does not grow, and a connection would wake it.
			return p.State == api.ProjectActive && p.PrimaryInstanceID != "" && p.StorageLimitBytes > 0 && p.DeletedAt == nil &&
				p.IdleSuspendedAt == nil
		})
		if err != nil {
			return err
		}
		for _, p := range prjs {
			// In a cluster, the projects this node hosts: another node's server is not this one's to measure
			// or lock (its database files are on that node; a loopback port of its record may even reach it
			// when the nodes share a machine, and its lock raced that node's own work on the server).
			if !store.Local(tx, p) {
				continue
			}
			if suspended, err := store.Suspended(tx, p.OrganizationID); err != nil {
				return err
			} else if suspended { // its server is stopped until the organization resumes: nothing grows
				continue
			}
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
		if g.locking[t.prj.ID] {
			continue // measured again once its lock is applied
		}
		if d, ok := g.due[t.prj.ID]; ok && now.Before(d.at) && d.limit <= t.prj.StorageLimitBytes && !diskLow && t.prj.StorageLock == "" {
			due[t.prj.ID] = d
			continue
		}
		size, err := g.databaseFilesSize(ctx, t.prj, t.inst)
		if err != nil {
			g.log.Debug("storage guard: measure", "project", t.prj.ID, "err", err)
			continue
		}
		// Far from its limit, a database is measured again just before a client writing at
		// Rate could reach it.
		wait := time.Duration(float64(t.prj.StorageLimitBytes-size) / Rate * float64(time.Second))
		due[t.prj.ID] = guardDue{at: now.Add(min(max(wait, 0), guardIdle)), limit: t.prj.StorageLimitBytes}
		lock := verdict(t.prj, size, diskLow)
		if lock == t.prj.StorageLock && g.applied[t.prj.ID] == t.inst.ID {
			continue
		}
		// A lock is applied again the first time this process sees the server: an appliance stopped in
		// the middle of lock may have left the server and the record disagreeing.
		if now.Before(g.retry[t.prj.ID]) {
			continue
		}
		if g.locking == nil {
			g.locking = map[string]bool{}
		}
		g.locking[t.prj.ID] = true
		apply(t.prj.ID, t.inst.ID, lock, lock != t.prj.StorageLock)
		if lock != t.prj.StorageLock {
			n++
		}
	}
	g.due = due
	return n, errors.Join(errs...)
}

// verdict is the lock a database of size bytes should be under: read-only over its limit or while
// the appliance's disk is under its reserve (diskLow); no logins when it grew by LockGrowth while
// read-only (a client lifted the default); none once it is back under nine tenths of its limit (data
// dropped, or a larger limit: a claim, a plan change) and the disk has room.
func verdict(prj *store.Project, size int64, diskLow bool) string {
	limit := prj.StorageLimitBytes
	switch {
	case prj.StorageLock != "" && size <= limit-limit/10 && !diskLow:
		return ""
	case prj.StorageLock == "" && (size > limit || diskLow):
		return ReadOnly
	case prj.StorageLock == ReadOnly && size > cmp.Or(prj.StorageLockedBytes, limit)+LockGrowth:
		return NoConnections
	}
	return prj.StorageLock
}

// databaseFilesSize is the size of the files of the project's database (what pg_database_size counts:
// the tenant cannot create tablespaces), read from the data directory without a session.
func (g *Guard) databaseFilesSize(ctx context.Context, prj *store.Project, inst *store.Instance) (int64, error) {
	g.dirsMu.Lock()
	d, ok := g.dirs[prj.ID]
	g.dirsMu.Unlock()
	if !ok || d.instanceID != inst.ID || d.database != prj.DatabaseName || time.Since(d.at) > dirTTL {
		var err error
		if d, err = g.findDatabaseDir(ctx, prj, inst); err != nil {
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
func (g *Guard) findDatabaseDir(ctx context.Context, prj *store.Project, inst *store.Instance) (databaseDir, error) {
	ctx, cancel := context.WithTimeout(ctx, observe.SampleTimeout)
	defer cancel()
	conn, err := g.host.QuietAdminConn(ctx, inst, "postgres")
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

// lock puts a project's database under lock ("" lifts every lock), ends its sessions when one is
// set, and records it. The read-only default is set on the database and on the login roles (the
// project's two, those made through the roles endpoint); the logins' NOLOGIN is what a tenant cannot undo
// (changing LOGIN needs CREATEROLE).
func (g *Guard) lock(ctx context.Context, projectID, lock string) error {
	prj, inst, err := g.host.LoadProject(projectID)
	if err != nil || inst == nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := g.host.AdminConn(ctx, inst, "postgres")
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// The project's two logins and the roles made through the roles endpoint.
	tenants, err := instances.TenantRoles(ctx, conn, prj)
	if err != nil {
		return err
	}
	names := append([]string{prj.RoleName, instances.AltRole(prj.RoleName)}, tenants...)
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
	case ReadOnly, NoConnections:
		stmts = append(stmts, "ALTER DATABASE "+db+" SET default_transaction_read_only = on")
		for _, r := range roles {
			stmts = append(stmts, "ALTER ROLE "+pgx.Identifier{r}.Sanitize()+" SET default_transaction_read_only = on")
			if lock == NoConnections {
				stmts = append(stmts, "ALTER ROLE "+pgx.Identifier{r}.Sanitize()+" NOLOGIN")
			}
		}
	default:
		return fmt.Errorf("unknown storage lock %q", lock)
	}
	for _, q := range stmts {
		if err := postgres.ExecCatalog(ctx, conn, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	var lockedAt int64
	if lock != "" {
		// The sessions open now would keep writing under the old default: end them, in any database, and
		// wait for them to be gone (up to 5 s each) so that the size measured next is the locked one.
		if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity
			WHERE backend_type = 'client backend' AND (datname = $1 OR usename = ANY($2)) AND usename IS DISTINCT FROM $3`,
			prj.DatabaseName, roles, postgres.AdminRole); err != nil {
			return fmt.Errorf("end the sessions of %s: %w", prj.DatabaseName, err)
		}
		if lockedAt, err = g.databaseFilesSize(ctx, prj, inst); err != nil {
			return fmt.Errorf("measure %s: %w", prj.DatabaseName, err)
		}
	}
	return g.db.Update(func(tx *store.Tx) error {
		cur, err := store.Projects.Get(tx, projectID)
		if err != nil {
			return err
		}
		if cur.StorageLock == lock { // applied again (Enforce): the record holds already
			return nil
		}
		cur.StorageLock, cur.StorageLockedBytes, cur.UpdatedAt = lock, lockedAt, g.now()
		if err := store.Projects.Put(tx, cur); err != nil {
			return err
		}
		action := "project.storage_lock"
		if lock == "" {
			action = "project.storage_unlock"
		}
		return g.host.Audit(tx, &authz.Principal{AuthSource: authz.ActorSystem}, action, cur.OrganizationID, cur.ID,
			map[string]any{"lock": lock, "storage_limit_bytes": cur.StorageLimitBytes, "storage_bytes": lockedAt})
	})
}
