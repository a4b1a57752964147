package backup

import (
	"context"
	"io"
)

// Uploaded dumps (the pg_dump -Fc files a client PUTs through a signed URL, for an import) are objects
// <project_id>/imports/<upload_id>.dump (exports.go), put once the upload's body is complete and within
// its limit, deleted once imported or expired.

// UploadKey is the object of an uploaded dump.
func UploadKey(projectID, uploadID string) string { return uploadDumps.key(projectID, uploadID) }

// PutUpload stores what r yields as the uploaded dump's object, replacing any, and returns its size; when
// it returns nil the object is complete.
func (s *Store) PutUpload(ctx context.Context, projectID, uploadID string, r io.Reader) (int64, error) {
	return s.putDump(ctx, uploadDumps, projectID, uploadID, r)
}

// GetUpload opens an uploaded dump's object; a missing one is ErrNotExist (wrapped).
func (s *Store) GetUpload(ctx context.Context, projectID, uploadID string) (io.ReadCloser, error) {
	return s.getDump(ctx, uploadDumps, projectID, uploadID)
}

// RemoveUpload deletes an uploaded dump's object; a missing one is not an error.
func (s *Store) RemoveUpload(ctx context.Context, projectID, uploadID string) error {
	return s.removeDump(ctx, uploadDumps, projectID, uploadID)
}
