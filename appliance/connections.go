package appliance

import (
	"context"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/theappliance/appliance/store"
)

// connectionURL builds a libpq URL that verifies the server against the appliance CA.
func (s *Service) connectionURL(host string, port int, db, user, password string) string {
	q := url.Values{}
	q.Set("sslmode", "verify-full")
	if s.cfg.CACertPath != "" {
		q.Set("sslrootcert", s.cfg.CACertPath)
	}
	u := url.URL{Scheme: "postgresql", User: url.UserPassword(user, password),
		Host: net.JoinHostPort(host, strconv.Itoa(port)), Path: "/" + db, RawQuery: q.Encode()}
	return u.String()
}

// ProjectConnections returns the URLs with the current credential.
func (s *Service) ProjectConnections(ctx context.Context, p *Principal, projectID string) (*ConnectionsResponse, error) {
	var out *ConnectionsResponse
	err := s.db.View(func(tx *store.Tx) error {
		prj, err := s.visibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		if prj.State != ProjectActive {
			return Conflict("project %s is %s: connections exist once it is active", prj.ID, prj.State)
		}
		c, err := s.connectionsOf(prj)
		if err == nil {
			out = &ConnectionsResponse{Connections: *c}
		}
		return err
	})
	return out, err
}

// connectionsOf is a project's URLs with its current credential.
func (s *Service) connectionsOf(prj *store.Project) (*Connections, error) {
	pw, err := s.box.Open(prj.Credential.Password)
	if err != nil {
		return nil, Internal(err, "open project credential")
	}
	c := prj.Credential.Username
	return &Connections{Username: c,
		DirectURL: s.connectionURL(prj.PublicHost, prj.DirectPort, prj.DatabaseName, c, string(pw)),
		PooledURL: s.connectionURL(prj.PublicHost, prj.PooledPort, prj.DatabaseName, c, string(pw))}, nil
}

// DefaultCredentialOverlap is the overlap of a rotation when the request names none.
const DefaultCredentialOverlap = time.Hour

// RotateCredentials enqueues project.rotate_credentials.
func (s *Service) RotateCredentials(ctx context.Context, p *Principal, projectID string, req *RotateCredentialsRequest) (*JobResponse, error) {
	overlap := int64(DefaultCredentialOverlap / time.Second)
	if req.OverlapSeconds != nil {
		overlap = *req.OverlapSeconds
	}
	if overlap < 0 || overlap > 7*86400 {
		return nil, Invalid("overlap_seconds must be between 0 and 604800")
	}
	var job *store.Job
	err := s.db.Update(func(tx *store.Tx) error {
		prj, err := s.visibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		if prj.State != ProjectActive {
			return Conflict("project %s is %s: credentials can be rotated once it is active", prj.ID, prj.State)
		}
		j, err := s.enqueue(tx, prj, JobProjectRotate, prj.ID, rotatePayload{OverlapSeconds: overlap})
		if err != nil {
			return err
		}
		if err := s.audit(tx, p, "project.credentials.rotate", prj.OrganizationID, prj.ID, map[string]any{"job_id": j.ID, "overlap_seconds": overlap}); err != nil {
			return Internal(err, "audit")
		}
		job = j
		return nil
	})
	return s.answerJob(job, err)
}

type rotatePayload struct {
	OverlapSeconds int64 `json:"overlap_seconds"`
}
