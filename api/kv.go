package api

import "time"

// KVCredentials is how a client connects.
type KVCredentials struct {
	RedisHost     string  `json:"redis_host"`
	RedisPort     int     `json:"redis_port"`
	RedisURL      string  `json:"redis_url" schema:"format=uri,pattern=^rediss://,example=rediss://kv.example.com:6380" doc:"rediss://default:<token>@host:port where the token is shown (create and rotate-token), rediss://host:port elsewhere"`
	RESTURL       string  `json:"rest_url" schema:"format=uri,pattern=^https?://,example=https://kv.example.com:8443" doc:"the Upstash-compatible REST front"`
	RESTToken     *string `json:"rest_token" api:"nullable" doc:"the store's token; null except in the create and rotate-token responses (only its SHA-256 is kept)"`
	TokenRequired bool    `json:"token_required" doc:"always true: every connection and request presents the token"`
}

// KVStore is the API resource of a project's key-value store.
type KVStore struct {
	ID              string        `json:"id"`
	ProjectID       string        `json:"project_id"`
	OrganizationID  string        `json:"organization_id"`
	HostID          string        `json:"host_id"`
	State           string        `json:"state" enum:"KVState"`
	LastError       string        `json:"last_error"`
	MaxmemoryPolicy string        `json:"maxmemory_policy" enum:"KVEvictionPolicy"`
	MemMaxMB        int           `json:"mem_max_mb" doc:"the plan's key-value memory at creation"`
	MaxmemoryMB     int           `json:"maxmemory_mb" doc:"redis-server's maxmemory (equal to mem_max_mb)"`
	Persistence     string        `json:"persistence" enum:"rdb" doc:"periodic RDB snapshots; not backed up"`
	PublicHost      string        `json:"public_host"`
	Token           *string       `json:"token" api:"nullable" doc:"the plaintext token; null except in the create and rotate-token responses"`
	TokenPrefix     string        `json:"token_prefix" doc:"the token's first 11 characters, to tell tokens apart"`
	Credentials     KVCredentials `json:"credentials"`
	CreatedAt       time.Time     `json:"created_at"`
	UpdatedAt       time.Time     `json:"updated_at"`
}

// KVStoreList is the list response.
type KVStoreList struct {
	KVStores []*KVStore `json:"kv_stores"`
}

// KVCreateResponse is the create response: the job that starts the server, and the store with its token.
type KVCreateResponse struct {
	Job     *Job     `json:"job"`
	KVStore *KVStore `json:"kv_store"`
}

// KVStoreResult is the rotate-token response.
type KVStoreResult struct {
	KVStore *KVStore `json:"kv_store"`
}
