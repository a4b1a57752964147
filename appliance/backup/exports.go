package backup

import (
	"context"
	"io"
)

// Dumps (pg_dump -Fc files) kept one object each in a bucket backup store, by kind:
//
//	<project_id>/exports/<export_id>.dump     the exports area's exports
//	<project_id>/imports/<upload_id>.dump     the dumps uploaded for an import (uploads.go)
//
// put once the dump is complete (an object is visible only once its Put completed).
type dumpKind struct {
	dir  string // exports, imports
	noun string // in errors: "export id", "upload id"
}

var (
	exportDumps = dumpKind{dir: "exports", noun: "export id"}
	uploadDumps = dumpKind{dir: "imports", noun: "upload id"}
)

func (k dumpKind) key(projectID, id string) string {
	return projectID + "/" + k.dir + "/" + id + ".dump"
}

func (k dumpKind) check(projectID, id string) error {
	if err := checkName("project id", projectID); err != nil {
		return err
	}
	return checkName(k.noun, id)
}

func (s *Store) putDump(ctx context.Context, k dumpKind, projectID, id string, r io.Reader) (int64, error) {
	if err := k.check(projectID, id); err != nil {
		return 0, err
	}
	return s.Objects.Put(ctx, k.key(projectID, id), r)
}

func (s *Store) getDump(ctx context.Context, k dumpKind, projectID, id string) (io.ReadCloser, error) {
	if err := k.check(projectID, id); err != nil {
		return nil, err
	}
	return s.Objects.Get(ctx, k.key(projectID, id))
}

func (s *Store) removeDump(ctx context.Context, k dumpKind, projectID, id string) error {
	if err := k.check(projectID, id); err != nil {
		return err
	}
	return s.Objects.Delete(ctx, k.key(projectID, id))
}

// ExportKey is the object of an export.
func ExportKey(projectID, exportID string) string { return exportDumps.key(projectID, exportID) }

// PutExport stores what r yields as the export's object, replacing any, and returns its size; when it
// returns nil the object is complete.
func (s *Store) PutExport(ctx context.Context, projectID, exportID string, r io.Reader) (int64, error) {
	return s.putDump(ctx, exportDumps, projectID, exportID, r)
}

// GetExport opens an export's object; a missing one is ErrNotExist (wrapped).
func (s *Store) GetExport(ctx context.Context, projectID, exportID string) (io.ReadCloser, error) {
	return s.getDump(ctx, exportDumps, projectID, exportID)
}

// RemoveExport deletes an export's object; a missing one is not an error.
func (s *Store) RemoveExport(ctx context.Context, projectID, exportID string) error {
	return s.removeDump(ctx, exportDumps, projectID, exportID)
}
