package api

// Connections is the connections object.
type Connections struct {
	DirectURL string `json:"direct_url" schema:"format=uri,pattern=^postgres(ql)?://,example=postgresql://app:secret@db.example.com:5432/app?sslmode=verify-full" doc:"PostgreSQL's own port; sslmode=verify-full against the appliance CA"`
	PooledURL string `json:"pooled_url" schema:"format=uri,pattern=^postgres(ql)?://,example=postgresql://app:secret@db.example.com:6432/app?sslmode=verify-full" doc:"PgBouncer in transaction mode (no server-side prepared statements: use the simple protocol)"`
	Username  string `json:"username"`
}

// ConnectionsResponse wraps the connections object.
type ConnectionsResponse struct {
	Connections Connections `json:"connections"`
}

// RotateCredentialsRequest is the body of POST /v1/projects/{projectID}/credentials/rotate.
type RotateCredentialsRequest struct {
	OverlapSeconds *int64 `json:"overlap_seconds,omitempty" schema:"minimum=0,maximum=604800" doc:"how long the previous credential keeps working, 0 to 604800 seconds; default 3600"`
}
