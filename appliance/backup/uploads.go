package backup

import (
	"context"
	"io"
)

// Uploaded dumps (the pg_dump -Fc files a client PUTs through a signed URL, for an import) kept in a
// bucket backup store:
//
//	<project_id>/imports/<upload_id>.dump
//
// one object each, put once the upload's body is complete and within its limit (an object is visible only
// once its Put completed); deleted once imported or expired.

// UploadKey is the object of an uploaded dump.
func UploadKey(projectID, uploadID string) string {
	return projectID + "/imports/" + uploadID + ".dump"
}

func checkUpload(projectID, uploadID string) error {
	if err := checkName("project id", projectID); err != nil {
		return err
	}
	return checkName("upload id", uploadID)
}

// PutUpload stores what r yields as the uploaded dump's object, replacing any, and returns its size; when
// it returns nil the object is complete.
func (s *Store) PutUpload(ctx context.Context, projectID, uploadID string, r io.Reader) (int64, error) {
	if err := checkUpload(projectID, uploadID); err != nil {
		return 0, err
	}
	return s.Objects.Put(ctx, UploadKey(projectID, uploadID), r)
}

// GetUpload opens an uploaded dump's object; a missing one is ErrNotExist (wrapped).
func (s *Store) GetUpload(ctx context.Context, projectID, uploadID string) (io.ReadCloser, error) {
	if err := checkUpload(projectID, uploadID); err != nil {
		return nil, err
	}
	return s.Objects.Get(ctx, UploadKey(projectID, uploadID))
}

// RemoveUpload deletes an uploaded dump's object; a missing one is not an error.
func (s *Store) RemoveUpload(ctx context.Context, projectID, uploadID string) error {
	if err := checkUpload(projectID, uploadID); err != nil {
		return err
	}
	return s.Objects.Delete(ctx, UploadKey(projectID, uploadID))
}
