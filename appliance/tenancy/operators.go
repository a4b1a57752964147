package tenancy

import (
	"context"
	"errors"
	"strings"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/apperr"
	"github.com/theappliance/appliance/appliance/authz"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/store"
)

// AddOperator makes the user of email a platform operator (is_admin), creating the user, with a generated
// password returned once, when there is none. It is no API route: root on the machine runs it (`appliance
// operators add`, through up's local admin socket or on the store directly, and `up --operator-email`).
// An operator needs no organization: they sign in to none and name one where an endpoint takes it.
func (s *Service) AddOperator(ctx context.Context, req *api.AddOperatorRequest) (*api.AddedOperator, error) {
	email := strings.ToLower(strings.TrimSpace(req.Email))
	if email == "" {
		return nil, apperr.Invalid("an operator's email is required")
	}
	sys := &authz.Principal{AuthSource: authz.ActorSystem}
	var out *api.AddedOperator
	err := s.db.Update(func(tx *store.Tx) error {
		u, err := store.Users.First(tx, store.UsersByEmail, email)
		switch {
		case errors.Is(err, store.ErrNotFound):
			password := ids.Secret(15)
			if u, err = s.host.CreateUser(tx, email, strings.TrimSpace(req.Name), password, true); err != nil {
				return err
			}
			out = &api.AddedOperator{UserID: u.ID, Email: u.Email, Created: true, Password: password, CreatedAt: u.CreatedAt}
		case err != nil:
			return apperr.Internal(err, "read user")
		case u.IsAdmin:
			out = &api.AddedOperator{UserID: u.ID, Email: u.Email, CreatedAt: u.CreatedAt}
			return nil // an operator already: nothing changes
		default:
			u.IsAdmin, u.UpdatedAt = true, s.now()
			if err := store.Users.Put(tx, u); err != nil {
				return apperr.Internal(err, "store user")
			}
			out = &api.AddedOperator{UserID: u.ID, Email: u.Email, CreatedAt: u.CreatedAt}
		}
		if err := s.host.Audit(tx, sys, "operator.add", "", "", map[string]any{"user_id": u.ID, "email": u.Email, "created": out.Created}); err != nil {
			return apperr.Internal(err, "audit")
		}
		return nil
	})
	return out, err
}
