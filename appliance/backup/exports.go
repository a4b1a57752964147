package backup

import (
	"context"
	"io"
)

// Exports (pg_dump -Fc files of the exports area) kept in a bucket backup store:
//
//	<project_id>/exports/<export_id>.dump
//
// one object each, put once the dump is complete (an object is visible only once its Put completed).

// ExportKey is the object of an export.
func ExportKey(projectID, exportID string) string {
	return projectID + "/exports/" + exportID + ".dump"
}

func checkExport(projectID, exportID string) error {
	if err := checkName("project id", projectID); err != nil {
		return err
	}
	return checkName("export id", exportID)
}

// PutExport stores what r yields as the export's object, replacing any, and returns its size; when it
// returns nil the object is complete.
func (s *Store) PutExport(ctx context.Context, projectID, exportID string, r io.Reader) (int64, error) {
	if err := checkExport(projectID, exportID); err != nil {
		return 0, err
	}
	return s.Objects.Put(ctx, ExportKey(projectID, exportID), r)
}

// GetExport opens an export's object; a missing one is ErrNotExist (wrapped).
func (s *Store) GetExport(ctx context.Context, projectID, exportID string) (io.ReadCloser, error) {
	if err := checkExport(projectID, exportID); err != nil {
		return nil, err
	}
	return s.Objects.Get(ctx, ExportKey(projectID, exportID))
}

// RemoveExport deletes an export's object; a missing one is not an error.
func (s *Store) RemoveExport(ctx context.Context, projectID, exportID string) error {
	if err := checkExport(projectID, exportID); err != nil {
		return err
	}
	return s.Objects.Delete(ctx, ExportKey(projectID, exportID))
}
