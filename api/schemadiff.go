package api

// SchemaDiff is what a preview's schema has that its project's has not, and the other way round
// (GET /v1/preview-databases/{previewID}/schema-diff): shown before a cutover is approved.
type SchemaDiff struct {
	PreviewDatabaseID string          `json:"preview_database_id"`
	ProjectID         string          `json:"project_id"`
	Database          string          `json:"database" doc:"the database compared on both sides (the project's, which the preview has too)"`
	Changes           []*SchemaChange `json:"changes" doc:"by kind (extension, table, column, constraint, index, view, function), then schema and name; at most 500"`
	Total             int             `json:"total" doc:"the changes found, Changes holds the first 500"`
	Truncated         bool            `json:"truncated"`
}

// SchemaChange is one object added in the preview, removed from it, or changed.
type SchemaChange struct {
	Kind   string `json:"kind" enum:"extension,type,sequence,table,column,constraint,index,trigger,policy,view,function,grant" doc:"grant: an object's privileges for one grantee (named \"on <kind> <schema>.<object> to <role>\"), its owner's left out"`
	Change string `json:"change" enum:"added,removed,changed" doc:"added: in the preview only; removed: in the project only; changed: in both, defined differently"`
	Schema string `json:"schema" doc:"empty for an extension"`
	Name   string `json:"name" doc:"the object's name: table.column and table.constraint for those; a function with its argument types"`
	Before string `json:"before" doc:"the project's definition (empty when added); long definitions are cut at 2000 characters"`
	After  string `json:"after" doc:"the preview's definition (empty when removed)"`
}

// The schema diff's bound.
const MaxSchemaChanges = 500
