package migrate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

// importRestoreJob restores the upload's dump over the project's database (restoreDump: any error
// pg_restore reports fails the job, and then nothing changed), read from the cache or the bucket when the
// dump is an object of it (localDump); on success the upload is consumed, its file and object deleted.
func (s *Service) importRestoreJob(ctx context.Context, run *scheduler.Run) (any, error) {
	var in ImportPayload
	prj, inst, err := s.host.ActiveTarget(run, &in)
	if err != nil {
		return nil, err
	}
	var u *store.Upload
	if err := s.db.View(func(tx *store.Tx) (err error) { u, err = store.Uploads.Get(tx, in.UploadID); return err }); err != nil {
		return nil, fmt.Errorf("upload %s: %w", in.UploadID, err)
	}
	if u.State == UploadConsumed {
		return map[string]any{"skipped": "upload is consumed"}, nil
	}
	if u.State != UploadUploaded {
		return nil, fmt.Errorf("upload %s is %s, not uploaded", u.ID, u.State)
	}
	dump, done, err := s.localDump(ctx, u)
	if err != nil {
		return nil, err
	}
	err = s.restoreDump(ctx, run, prj, inst, prj.DatabaseName, dump, nil)
	done()
	if err != nil {
		return nil, err
	}
	now := s.now()
	if err := s.db.Update(func(tx *store.Tx) error {
		cur, err := store.Uploads.Get(tx, u.ID)
		if err != nil {
			return err
		}
		cur.State, cur.ConsumedAt = UploadConsumed, &now
		return store.Uploads.Put(tx, cur)
	}); err != nil {
		return nil, err
	}
	// The dump has served its purpose (the record keeps its size). A file or an object left by a failure
	// here or a crash before is deleted by the sweep, which deletes those of consumed uploads.
	if err := os.Remove(u.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("delete consumed upload", "upload", u.ID, "err", err)
	}
	if u.InBucket && s.bucket != nil {
		if err := s.bucket.RemoveUpload(ctx, u.ProjectID, u.ID); err != nil {
			s.log.Warn("delete a consumed upload's object from the backup store", "upload", u.ID, "err", err)
		} else if err := s.forgetObject(u.ID); err != nil {
			s.log.Warn("mark a consumed upload's object deleted", "upload", u.ID, "err", err)
		}
	}
	return map[string]any{"upload_id": u.ID, "size_bytes": u.SizeBytes}, nil
}

// filterRestoreList drops from a pg_restore --list file the entries a project's role may not or need not
// restore: extensions (the platform manages them), event triggers (they need a superuser) and the public
// schema itself (every database has it; --clean would try to drop it), with their comments, and the
// schemas named in skip (themselves, not what they hold).
func filterRestoreList(path string, skip []string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var keep []string
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, ";") && (skippedRestoreEntry.MatchString(line) || slices.ContainsFunc(skip, func(name string) bool {
			return schemaEntry.MatchString(line) && strings.HasPrefix(schemaEntry.FindStringSubmatch(line)[1], name+" ")
		})) {
			continue
		}
		keep = append(keep, line)
	}
	return os.WriteFile(path, []byte(strings.Join(keep, "\n")), 0o600)
}

// skippedRestoreEntry matches the list entries filterRestoreList drops ("<id>; <oid> <oid> TYPE schema name owner").
var skippedRestoreEntry = regexp.MustCompile(`^\d+; \d+ \d+ (.* )?(EXTENSION|EVENT TRIGGER|SCHEMA (- )?public) `)

// schemaEntry matches a schema's own entry; its group is "name owner".
var schemaEntry = regexp.MustCompile(`^\d+; \d+ \d+ SCHEMA - (.*)$`)

// restoreDump runs pg_restore --clean --if-exists --no-owner --no-tablespaces --role=<project role>
// --single-transaction of a custom-format dump into database (the project's, or a cutover's staging one),
// without the dump's extensions and event triggers (the platform manages extensions; event triggers need a
// superuser) nor the schemas named in skipSchemas (made beforehand, holding extensions). It connects as the
// project's current login over TLS, never as the admin: code the dump makes the server run (a CHECK
// constraint's function, an index expression) could RESET ROLE to whoever connected. Any error fails it,
// and then nothing changed.
func (s *Service) restoreDump(ctx context.Context, run *scheduler.Run, prj *store.Project, inst *store.Instance, database, dump string, skipSchemas []string) error {
	pw, err := s.box.Open(prj.Credential.Password)
	if err != nil {
		return fmt.Errorf("open the project's credential: %w", err)
	}
	pgrestore, err := s.eng.Instance(inst).Bin.Path("pg_restore")
	if err != nil {
		return err
	}
	list := dump + ".list"
	defer os.Remove(list)
	if err := run.Exec(ctx, s.plane.User.Command(pgrestore, "--list", "-f", list, dump)); err != nil {
		return err
	}
	if err := filterRestoreList(list, skipSchemas); err != nil {
		return err
	}
	if err := s.plane.User.Chown(list); err != nil {
		return err
	}
	cmd := s.plane.User.Command(pgrestore, "--clean", "--if-exists", "--no-owner", "--no-tablespaces", "--role="+prj.RoleName,
		"--single-transaction", "--use-list="+list, "--no-password", "-h", "127.0.0.1", "-p", strconv.Itoa(inst.Port),
		"-U", prj.Credential.Username, "-d", database, dump)
	cmd.Env = append(cmd.Env, "PGPASSWORD="+string(pw), "PGSSLMODE=require", "PGCONNECT_TIMEOUT=10", "PGPASSFILE=/dev/null")
	return run.Exec(ctx, cmd)
}
