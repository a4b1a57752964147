package studio

import "github.com/theappliance/appliance/api"

// The statements' answers are the API's wire types (package api): the JSON the endpoints send.
type (
	SQLResult  = api.SQLResult
	TableEntry = api.TableEntry
)
