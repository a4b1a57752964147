package api

import (
	"encoding/json"
	"time"
)

// SQLResult is what one statement returned: its columns, its rows (each an object keyed by column name; a
// name that repeats in one result is made unique as name_2, name_3, …), how many rows it produced or
// touched, and whether rows were left out by the caps.
type SQLResult struct {
	Columns     []string                     `json:"columns"`
	ColumnTypes []string                     `json:"column_types" doc:"the PostgreSQL type of each column (its name, or its OID for types this list does not name)"`
	Rows        []map[string]json.RawMessage `json:"rows"`
	RowCount    int64                        `json:"row_count" doc:"rows the statement returned (for statements without rows: rows it inserted, updated or deleted); more than len(rows) when truncated"`
	Command     string                       `json:"command" doc:"the statement's command tag, e.g. SELECT 3 or INSERT 0 1"`
	DurationMS  int64                        `json:"duration_ms"`
	Truncated   bool                         `json:"truncated"`
	Statements  int                          `json:"statements" doc:"statements the text held (all ran; the last one's result is this one)"`
}

// SQLStatementResult is one statement's result in SQLResultResponse.results: its rows within the answer's
// caps (shared by all the statements), its command tag and row count.
type SQLStatementResult struct {
	Columns     []string                     `json:"columns"`
	ColumnTypes []string                     `json:"column_types"`
	Rows        []map[string]json.RawMessage `json:"rows"`
	RowCount    int64                        `json:"row_count" doc:"rows the statement returned (for statements without rows: rows it inserted, updated or deleted); more than len(rows) when truncated"`
	Command     string                       `json:"command" doc:"the statement's command tag, e.g. SELECT 3 or INSERT 0 1"`
	Truncated   bool                         `json:"truncated" doc:"rows were left out by the answer's caps (shared by every statement of the text)"`
}

// TableEntry is one entry of the table list.
type TableEntry struct {
	Schema string `json:"schema"`
	Table  string `json:"table"`
	Type   string `json:"type" doc:"table, view, materialized view, foreign table or partitioned table"`
}

// SQLRequest is the body of POST /v1/projects/{projectID}/sql.
type SQLRequest struct {
	Query   string `json:"query" api:"required" doc:"one or more SQL statements (separated by semicolons; all run in one implicit transaction; every statement's result is returned); at most 256 KiB"`
	RunID   string `json:"run_id" schema:"minLength=1,maxLength=64,pattern=^[A-Za-z0-9_-]+$,example=run-1" doc:"an ID of the client's choosing (1 to 64 letters, digits, _ or -) naming the run while it runs, so POST .../sql/runs/{runID}/cancel can cancel it; unique among the project's running runs (409)"`
	MaxRows int    `json:"max_rows" schema:"minimum=0,maximum=100000" doc:"rows kept in the answer, over all statements (default and 0: 10,000; at most 100,000); the answer stays under about 8 MB whatever this says"`
}

// SQLResultResponse is the console's answer.
type SQLResultResponse struct {
	Result  *SQLResult            `json:"result" doc:"the last statement's result (as results' last entry; statements counts them all)"`
	Results []*SQLStatementResult `json:"results" doc:"every statement's result, in order"`
}

// SQLCancelResponse is POST .../sql/runs/{runID}/cancel.
type SQLCancelResponse struct {
	RunID     string `json:"run_id"`
	Cancelled bool   `json:"cancelled" doc:"true: the server was asked to cancel the running statement, or no run of that ID has been seen and one starting within 30 s ends at once without running its text (either way the run answers with a 400 whose sqlstate is 57014); false: the run's statements had already answered or it ended in the last minute (or 100 cancels of the project already wait for their runs)"`
}

// SavedQuery is a query saved in a project, shared with the organization's members who can see the project.
type SavedQuery struct {
	ID        string    `json:"id"`
	ProjectID string    `json:"project_id"`
	Name      string    `json:"name"`
	SQL       string    `json:"sql"`
	CreatedBy string    `json:"created_by" doc:"the user or API key that saved it first"`
	UpdatedBy string    `json:"updated_by"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// SavedQueryRequest is the body of POST .../saved-queries (both fields required) and PATCH .../saved-queries/{queryID} (either).
type SavedQueryRequest struct {
	Name *string `json:"name,omitempty" schema:"minLength=1,maxLength=100" doc:"1 to 100 characters, unique in the project"`
	SQL  *string `json:"sql,omitempty" schema:"minLength=1,maxLength=262144" doc:"the query's text, at most 256 KiB"`
}

// SavedQueryResponse is one saved query.
type SavedQueryResponse struct {
	SavedQuery *SavedQuery `json:"saved_query"`
}

// SavedQueryList is GET .../saved-queries (by name).
type SavedQueryList struct {
	SavedQueries []*SavedQuery `json:"saved_queries"`
}

// SQLHistoryList is GET .../sql/history.
type SQLHistoryList struct {
	History []*SQLHistoryEntry `json:"history"`
}

// TableList is GET .../tables.
type TableList struct {
	Tables []TableEntry `json:"tables"`
}

// ColumnList is GET .../tables/{schema}/{table}/columns.
type ColumnList struct {
	Columns []Column `json:"columns"`
}

// RowsRead is a table's rows.
type RowsRead struct {
	Columns     []string                     `json:"columns"`
	ColumnTypes []string                     `json:"column_types"`
	Rows        []map[string]json.RawMessage `json:"rows"`
	Truncated   bool                         `json:"truncated" doc:"rows were left out to keep the answer under the size cap"`
	Total       int64                        `json:"total" doc:"the rows the filter matches (the whole table without one): exact up to 100,000, else the planner's estimate (count_is_estimate)"`
	// CountIsEstimate: more than CountExactMax rows match, and total is the planner's estimate.
	CountIsEstimate bool `json:"count_is_estimate" doc:"true when more than 100,000 rows match and total is the planner's estimate (at least 100,001)"`
}

// RowsQuery is what GET .../rows and .../csv select: filters, sort, and (rows only) the page.
type RowsQuery struct {
	Limit, Offset int
	// Filter items are column:op:value (op one of RowFilterOps; is_null and not_null take no value, in takes
	// values separated by commas); the value is always bound as a parameter.
	Filter []string
	// Sort items are column (ascending) or -column (descending), in order of precedence.
	Sort []string
}

// RowFilterOps are the operators of a rows filter.
var RowFilterOps = []string{"eq", "neq", "lt", "lte", "gt", "gte", "like", "ilike", "is_null", "not_null", "in"}

// RowsReadResponse is GET .../rows.
type RowsReadResponse struct {
	Result RowsRead `json:"result"`
}

// RowsWritten is what a row write did.
type RowsWritten struct {
	RowsAffected int64                        `json:"rows_affected"`
	Rows         []map[string]json.RawMessage `json:"rows" doc:"the rows as written (RETURNING *)"`
	Truncated    bool                         `json:"truncated" doc:"rows_affected is more than the rows shown"`
}

// RowsWriteResponse is the answer of a row insert, update or delete.
type RowsWriteResponse struct {
	Result RowsWritten `json:"result"`
}

// InsertRowsRequest is the body of POST .../rows.
type InsertRowsRequest struct {
	Rows []map[string]json.RawMessage `json:"rows,omitempty" api:"required" doc:"the rows to insert (1 to 1000), each an object of column name to value; a column left out gets its default"`
}

// UpdateRowsRequest is the body of PATCH .../rows.
type UpdateRowsRequest struct {
	Match   map[string]json.RawMessage `json:"match,omitempty" doc:"the rows to change: every named column equal to its value (null: IS NULL)"`
	Set     map[string]json.RawMessage `json:"set,omitempty" api:"required" doc:"column name to new value (at least one)"`
	AllRows bool                       `json:"all_rows" doc:"true to allow an empty match, changing every row"`
}

// DeleteRowsRequest is the body of DELETE .../rows.
type DeleteRowsRequest struct {
	Match   map[string]json.RawMessage `json:"match,omitempty" doc:"the rows to delete: every named column equal to its value (null: IS NULL)"`
	AllRows bool                       `json:"all_rows" doc:"true to allow an empty match, deleting every row"`
}

// AIUsage is a project's AI assistant uses in the current calendar month (UTC).
type AIUsage struct {
	Used           int       `json:"used"`
	Limit          int       `json:"limit"`
	Remaining      int       `json:"remaining"`
	SoftCapReached bool      `json:"soft_cap_reached" doc:"used is at least 80% of limit"`
	PeriodStart    time.Time `json:"period_start"`
	PeriodEnd      time.Time `json:"period_end"`
}

// AIUsageResponse is GET and POST .../ai-usage.
type AIUsageResponse struct {
	Usage AIUsage `json:"usage"`
}

// SQLHistoryEntry is one console run as the history lists it: exactly the fields of the stored record.
type SQLHistoryEntry struct {
	ID             string    `json:"id"`
	OrganizationID string    `json:"organization_id"`
	ProjectID      string    `json:"project_id"`
	ActorID        string    `json:"actor_id"`
	ActorKind      string    `json:"actor_kind"`
	Query          string    `json:"query"`
	Error          string    `json:"error"`
	DurationMS     int64     `json:"duration_ms"`
	RowCount       int64     `json:"row_count"`
	Success        bool      `json:"success"`
	CreatedAt      time.Time `json:"created_at"`
}

// Column is one column of a table.
type Column struct {
	Name         string  `json:"name"`
	DataType     string  `json:"data_type"`
	Default      *string `json:"default" api:"nullable" doc:"the default expression; null when the column has none"`
	IsNullable   bool    `json:"is_nullable"`
	IsPrimaryKey bool    `json:"is_primary_key"`
	Position     int     `json:"position"`
	// ForeignKey is the column a one-column foreign key of this column references.
	ForeignKey *ColumnRef `json:"foreign_key" api:"nullable" doc:"the column a one-column foreign key on this column references; null when none"`
}

// ColumnRef names a column of a table.
type ColumnRef struct {
	Schema string `json:"schema" schema:"minLength=1,maxLength=63"`
	Table  string `json:"table" schema:"minLength=1,maxLength=63"`
	Column string `json:"column" schema:"minLength=1,maxLength=63"`
}

// ColumnDefault is a column's default: a literal value (typed by the column) or one of DefaultExpressions.
type ColumnDefault struct {
	Value      *string `json:"value,omitempty" doc:"a literal, written as a quoted string the column's type reads (e.g. 0, abc, 2024-01-01)"`
	Expression string  `json:"expression,omitempty" doc:"one of the allowed expressions instead of a value"`
}

// DefaultExpressions are the default expressions the table editor writes (anything else: SQL).
var DefaultExpressions = []string{"now()", "current_timestamp", "current_date", "localtimestamp", "gen_random_uuid()"}

// ColumnDef is a column of a new table, or one added to a table (POST .../columns).
type ColumnDef struct {
	Name       string         `json:"name" api:"required" schema:"minLength=1,maxLength=63"`
	Type       string         `json:"type" api:"required" schema:"minLength=1,maxLength=100" doc:"a type PostgreSQL knows (to_regtype), e.g. text, bigint, numeric(10,2), timestamp with time zone, text[]"`
	Nullable   *bool          `json:"nullable,omitempty" doc:"false adds NOT NULL (default true)"`
	Default    *ColumnDefault `json:"default,omitempty"`
	PrimaryKey bool           `json:"primary_key,omitempty" doc:"part of the table's primary key (create table only)"`
	Identity   bool           `json:"identity,omitempty" doc:"GENERATED BY DEFAULT AS IDENTITY (integer types)"`
	References *ColumnRef     `json:"references,omitempty" doc:"a foreign key to this column"`
}

// CreateTableRequest is the body of POST .../tables.
type CreateTableRequest struct {
	Schema  string      `json:"schema,omitempty" schema:"maxLength=63" doc:"default public"`
	Name    string      `json:"name" api:"required" schema:"minLength=1,maxLength=63"`
	Columns []ColumnDef `json:"columns,omitempty" api:"required" doc:"1 to 200 columns"`
}

// AlterColumnRequest is the body of PATCH .../columns/{column}: what to change (at least one).
type AlterColumnRequest struct {
	Name        *string        `json:"name,omitempty" doc:"rename the column"`
	Type        *string        `json:"type,omitempty" doc:"change the type (the values are cast: USING column::type)"`
	Nullable    *bool          `json:"nullable,omitempty" doc:"false: SET NOT NULL; true: DROP NOT NULL"`
	Default     *ColumnDefault `json:"default,omitempty" doc:"set the default"`
	DropDefault bool           `json:"drop_default,omitempty" doc:"drop the default"`
}

// DDLResponse is what a schema change generated, and whether it ran (not with dry_run).
type DDLResponse struct {
	DDL      string `json:"ddl" doc:"the statements, exactly as they run (in one transaction)"`
	Executed bool   `json:"executed" doc:"false for a dry run"`
}

// CSVImportResponse is POST .../csv.
type CSVImportResponse struct {
	RowsImported int64 `json:"rows_imported"`
}

// The studio's bounds the API states (docs/api-decisions.md "Studio").
const (
	// MaxQueryBytes bounds the console's text (413 above).
	MaxQueryBytes = 256 << 10
	// MaxSavedQueries per project, MaxSavedQueryName characters of a saved query's name.
	MaxSavedQueries   = 500
	MaxSavedQueryName = 100
	// RowsDefault and RowsMax bound the table browser's limit.
	RowsDefault = 100
	RowsMax     = 1000
	// CountExactMax rows are counted exactly; past it the total is the planner's estimate.
	CountExactMax = 100_000
	// MaxCSVImportBytes bounds an imported CSV file (413 above).
	MaxCSVImportBytes = 16 << 20
	// MaxRowFilters and MaxRowSorts bound a rows query.
	MaxRowFilters = 20
	MaxRowSorts   = 5
)
