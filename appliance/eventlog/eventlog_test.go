package eventlog_test

import (
	"testing"

	"github.com/theappliance/appliance/appliance/appliancetest"
	"github.com/theappliance/appliance/appliance/eventlog"
)

const (
	eventBegin = "<!-- event-table:begin (generated from eventlog.Types: UPDATE_DOCS=1 go test ./appliance/eventlog -run TestEventTableDoc) -->\n"
	eventEnd   = "<!-- event-table:end -->"
)

// TestEventTableDoc keeps the event table of docs/api-decisions.md identical to eventlog.Types.
func TestEventTableDoc(t *testing.T) {
	appliancetest.DocSection(t, "../../docs/api-decisions.md", eventBegin, eventEnd, eventlog.Table(),
		"UPDATE_DOCS=1 go test ./appliance/eventlog -run TestEventTableDoc")
}
