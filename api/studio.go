package api

import "encoding/json"

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

// TableEntry is one entry of the table list.
type TableEntry struct {
	Schema string `json:"schema"`
	Table  string `json:"table"`
	Type   string `json:"type" doc:"table, view, materialized view, foreign table or partitioned table"`
}
