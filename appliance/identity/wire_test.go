package identity

import (
	"reflect"
	"testing"

	"github.com/theappliance/appliance/appliance/authz"
)

// TestWirePrincipalCopiesEveryField fills every exported field of a Principal and checks the wire copy.
func TestWirePrincipalCopiesEveryField(t *testing.T) {
	p := authz.NewSession("f", "j", true)
	p.AuthSource, p.IDPOrganizationID, p.IDPOrganizationRole, p.IDPOrganizationSlug = "a", "b", "c", "d"
	p.OrganizationID, p.Scopes, p.ProjectID, p.APIKeyID = "e", []string{"g"}, "h", "i"
	w := reflect.ValueOf(*wirePrincipal(p))
	for i := range w.NumField() {
		if w.Field(i).IsZero() {
			t.Errorf("wirePrincipal leaves %s out", w.Type().Field(i).Name)
		}
	}
}
