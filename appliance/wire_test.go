package appliance

import (
	"reflect"
	"testing"

	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/appliance/studio"
	"github.com/theappliance/appliance/store"
)

// TestWireTwins checks that the wire types the API shows records and domain values through have the
// exported fields of their originals, with the same JSON tags: the conversions in wire.go check the fields'
// names and types of the records but not their tags, and the copies of Principal and Column check nothing.
func TestWireTwins(t *testing.T) {
	for _, pair := range [][2]reflect.Type{
		{reflect.TypeFor[store.Organization](), reflect.TypeFor[api.Organization]()},
		{reflect.TypeFor[store.AuditEvent](), reflect.TypeFor[api.AuditEvent]()},
		{reflect.TypeFor[store.SQLHistoryEntry](), reflect.TypeFor[api.SQLHistoryEntry]()},
		{reflect.TypeFor[Principal](), reflect.TypeFor[api.Principal]()},
		{reflect.TypeFor[studio.Column](), reflect.TypeFor[api.Column]()},
	} {
		from, to := pair[0], pair[1]
		var fields []reflect.StructField
		for i := range from.NumField() {
			if f := from.Field(i); f.IsExported() {
				fields = append(fields, f)
			}
		}
		if len(fields) != to.NumField() {
			t.Errorf("%s has %d exported fields, %s %d", from, len(fields), to, to.NumField())
			continue
		}
		for i, f := range fields {
			w := to.Field(i)
			if f.Name != w.Name || f.Type != w.Type || f.Tag != w.Tag {
				t.Errorf("%s.%s %s `%s` is %s.%s %s `%s`", from, f.Name, f.Type, f.Tag, to, w.Name, w.Type, w.Tag)
			}
		}
	}
}
