package pgstat

import "github.com/theappliance/appliance/api"

// The reads' answers are the API's wire types (package api): the JSON the endpoints send.
type (
	Suggestion     = api.Suggestion
	Advice         = api.Advice
	UnusedIndex    = api.UnusedIndex
	RedundantIndex = api.RedundantIndex
	Hygiene        = api.Hygiene
	ActiveQuery    = api.ActiveQuery
	Statement      = api.Statement
)
