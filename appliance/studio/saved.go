package studio

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/store"
)

// Saved queries are a project's, shared with whoever may see the project (VisibleProject: the
// organization's members, and keys of the project or the organization); writing one needs projects:write
// (the route table). A name is unique in its project; the limits are api.MaxSavedQueryName characters,
// api.MaxQueryBytes of text and api.MaxSavedQueries per project. Neither check walks the project's saved
// queries: the name is one key of a unique index, the count one value of a counted one.

// ListSavedQueries lists the project's saved queries by name.
func (s *Service) ListSavedQueries(ctx context.Context, p *authz.Principal, projectID string) (*api.SavedQueryList, error) {
	out := &api.SavedQueryList{SavedQueries: []*api.SavedQuery{}}
	err := s.db.View(func(tx *store.Tx) error {
		prj, err := s.host.VisibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		qs, err := store.SavedQueries.Lookup(tx, store.SavedQueriesByProject, prj.ID, store.Query{})
		if err != nil {
			return err
		}
		sort.Slice(qs, func(i, j int) bool { return strings.ToLower(qs[i].Name) < strings.ToLower(qs[j].Name) })
		for _, q := range qs {
			out.SavedQueries = append(out.SavedQueries, wireSaved(q))
		}
		return nil
	})
	return out, err
}

// GetSavedQuery is one of the project's saved queries.
func (s *Service) GetSavedQuery(ctx context.Context, p *authz.Principal, projectID, queryID string) (*api.SavedQueryResponse, error) {
	var out *api.SavedQueryResponse
	err := s.db.View(func(tx *store.Tx) error {
		q, err := s.savedQuery(tx, p, projectID, queryID)
		if err == nil {
			out = &api.SavedQueryResponse{SavedQuery: wireSaved(q)}
		}
		return err
	})
	return out, err
}

// CreateSavedQuery saves a query in the project.
func (s *Service) CreateSavedQuery(ctx context.Context, p *authz.Principal, projectID string, req *api.SavedQueryRequest) (*api.SavedQueryResponse, error) {
	if req.Name == nil || req.SQL == nil {
		return nil, apperr.Invalid("name and sql are required")
	}
	name, err := checkSaved(req)
	if err != nil {
		return nil, err
	}
	var out *api.SavedQueryResponse
	err = s.db.Update(func(tx *store.Tx) error {
		prj, err := s.host.VisibleProject(tx, p, projectID)
		if err != nil {
			return err
		}
		n, err := store.SavedQueries.Count(tx, store.SavedQueriesByProject, prj.ID)
		if err != nil {
			return err
		}
		if n >= api.MaxSavedQueries {
			return apperr.Conflict("the project has %d saved queries, the most it may keep: delete one first", n)
		}
		if err := nameTaken(tx, prj.ID, name, ""); err != nil {
			return err
		}
		_, actor := p.Actor()
		now := s.now()
		q := &store.SavedQuery{ID: ids.New("sq"), OrganizationID: prj.OrganizationID, ProjectID: prj.ID, Name: name, SQL: *req.SQL,
			CreatedBy: actor, UpdatedBy: actor, CreatedAt: now, UpdatedAt: now}
		if err := store.SavedQueries.Insert(tx, q); err != nil {
			return err
		}
		out = &api.SavedQueryResponse{SavedQuery: wireSaved(q)}
		return s.host.Audit(tx, p, "project.saved_query.create", prj.OrganizationID, prj.ID, map[string]any{"saved_query_id": q.ID, "name": q.Name})
	})
	return out, err
}

// UpdateSavedQuery renames a saved query or changes its text.
func (s *Service) UpdateSavedQuery(ctx context.Context, p *authz.Principal, projectID, queryID string, req *api.SavedQueryRequest) (*api.SavedQueryResponse, error) {
	if req.Name == nil && req.SQL == nil {
		return nil, apperr.Invalid("give name or sql (or both)")
	}
	name, err := checkSaved(req)
	if err != nil {
		return nil, err
	}
	var out *api.SavedQueryResponse
	err = s.db.Update(func(tx *store.Tx) error {
		q, err := s.savedQuery(tx, p, projectID, queryID)
		if err != nil {
			return err
		}
		if req.Name != nil {
			// Its own name again, or in other case (a client sending the whole query back): no check, which
			// on etcd would take the name as free at first and find it was not at the commit.
			if store.SavedQueryName(q.ProjectID, name) != store.SavedQueryName(q.ProjectID, q.Name) {
				if err := nameTaken(tx, q.ProjectID, name, q.ID); err != nil {
					return err
				}
			}
			q.Name = name
		}
		if req.SQL != nil {
			q.SQL = *req.SQL
		}
		_, q.UpdatedBy = p.Actor()
		q.UpdatedAt = s.now()
		if err := store.SavedQueries.Put(tx, q); err != nil {
			return err
		}
		out = &api.SavedQueryResponse{SavedQuery: wireSaved(q)}
		return s.host.Audit(tx, p, "project.saved_query.update", q.OrganizationID, q.ProjectID, map[string]any{"saved_query_id": q.ID, "name": q.Name})
	})
	return out, err
}

// DeleteSavedQuery deletes a saved query and returns it.
func (s *Service) DeleteSavedQuery(ctx context.Context, p *authz.Principal, projectID, queryID string) (*api.SavedQueryResponse, error) {
	var out *api.SavedQueryResponse
	err := s.db.Update(func(tx *store.Tx) error {
		q, err := s.savedQuery(tx, p, projectID, queryID)
		if err != nil {
			return err
		}
		if err := store.SavedQueries.Delete(tx, q.ID); err != nil {
			return err
		}
		out = &api.SavedQueryResponse{SavedQuery: wireSaved(q)}
		return s.host.Audit(tx, p, "project.saved_query.delete", q.OrganizationID, q.ProjectID, map[string]any{"saved_query_id": q.ID, "name": q.Name})
	})
	return out, err
}

// savedQuery is the project's saved query queryID (404 when the project has none of that ID).
func (s *Service) savedQuery(tx *store.Tx, p *authz.Principal, projectID, queryID string) (*store.SavedQuery, error) {
	prj, err := s.host.VisibleProject(tx, p, projectID)
	if err != nil {
		return nil, err
	}
	q, err := store.SavedQueries.Get(tx, queryID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	if q == nil || q.ProjectID != prj.ID {
		return nil, apperr.NotFound("saved query %s not found in project %s", queryID, prj.ID)
	}
	return q, nil
}

// checkSaved checks a saved query's fields (those given) and returns its name trimmed.
func checkSaved(req *api.SavedQueryRequest) (string, error) {
	var name string
	if req.Name != nil {
		name = strings.TrimSpace(*req.Name)
		if name == "" || utf8.RuneCountInString(name) > api.MaxSavedQueryName || strings.ContainsAny(name, "\x00\r\n") {
			return "", apperr.Invalid("name must be 1 to %d characters on one line", api.MaxSavedQueryName)
		}
	}
	if req.SQL != nil {
		if strings.TrimSpace(*req.SQL) == "" {
			return "", apperr.Invalid("sql is empty")
		}
		if len(*req.SQL) > api.MaxQueryBytes {
			return "", &apperr.Error{Kind: apperr.KindTooLarge, Msg: fmt.Sprintf("sql is %d bytes; a saved query holds at most %d", len(*req.SQL), api.MaxQueryBytes)}
		}
	}
	return name, nil
}

// nameTaken refuses a name another of the project's saved queries (not except) has, case-insensitively:
// one read of the names' unique index (store.SavedQueriesByName), which on etcd a first attempt takes as
// free, its commit proving it.
func nameTaken(tx *store.Tx, projectID, name, except string) error {
	id, err := store.SavedQueries.Holder(tx, store.SavedQueriesByName, store.SavedQueryName(projectID, name))
	if err != nil || id == "" || id == except {
		return err
	}
	q, err := store.SavedQueries.Get(tx, id)
	if err != nil {
		return fmt.Errorf("the saved query named %q: %w", name, err)
	}
	return apperr.Conflict("the project already has a saved query named %q", q.Name)
}

func wireSaved(q *store.SavedQuery) *api.SavedQuery {
	return &api.SavedQuery{ID: q.ID, ProjectID: q.ProjectID, Name: q.Name, SQL: q.SQL, CreatedBy: q.CreatedBy, UpdatedBy: q.UpdatedBy,
		CreatedAt: q.CreatedAt, UpdatedAt: q.UpdatedAt}
}
