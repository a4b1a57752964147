package studio

import (
	"github.com/theappliance/appliance/api"
	"github.com/theappliance/appliance/store"
)

// wireHistory shows the history's records as they are (api.SQLHistoryEntry is store.SQLHistoryEntry's
// twin: the root's TestWireTwins checks their fields and tags).
func wireHistory(hs []*store.SQLHistoryEntry) []*api.SQLHistoryEntry {
	if hs == nil {
		return nil
	}
	out := make([]*api.SQLHistoryEntry, len(hs))
	for i, h := range hs {
		out[i] = (*api.SQLHistoryEntry)(h)
	}
	return out
}

// wireColumns leaves out what the table editor keeps of a column for itself.
func wireColumns(cs []Column) []api.Column {
	if cs == nil {
		return nil
	}
	out := make([]api.Column, len(cs))
	for i, c := range cs {
		out[i] = api.Column{Name: c.Name, DataType: c.DataType, Default: c.Default, IsNullable: c.IsNullable,
			IsPrimaryKey: c.IsPrimaryKey, Position: c.Position, ForeignKey: c.ForeignKey}
	}
	return out
}
