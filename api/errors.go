package api

// ErrorBody is every error answer: a 4xx or 5xx status with a message safe to show (an internal cause is
// logged, never sent). A SQL error from the studio adds what PostgreSQL said of it; a row over the studio's
// cap, the cap.
type ErrorBody struct {
	Error       string `json:"error"`
	SQLState    string `json:"sqlstate,omitempty"`
	Position    int    `json:"position,omitempty"`
	Detail      string `json:"detail,omitempty"`
	Hint        string `json:"hint,omitempty"`
	MaxRowBytes int64  `json:"max_row_bytes,omitempty"`
	Row         int    `json:"row,omitempty"` // a CSV import's bad value: its row (1: the first after the header)
}
