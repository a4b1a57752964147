package studio

import (
	"reflect"
	"testing"

	"github.com/theappliance/appliance/api"
)

// TestWireColumnsCopiesEveryField fills every exported field of a column and checks the wire copy.
func TestWireColumnsCopiesEveryField(t *testing.T) {
	def := "0"
	w := reflect.ValueOf(wireColumns([]Column{{Name: "a", DataType: "int", Default: &def, IsNullable: true, IsPrimaryKey: true, Position: 1,
		ForeignKey: &api.ColumnRef{Schema: "s", Table: "t", Column: "c"}}})[0])
	for i := range w.NumField() {
		if w.Field(i).IsZero() {
			t.Errorf("wireColumns leaves %s out", w.Type().Field(i).Name)
		}
	}
	if wireColumns(nil) != nil {
		t.Error("wireColumns(nil) is not nil")
	}
}
