package httpapi

// OpenAPI builds the OpenAPI 3.1 document from the route table and the Go types of its Ops.
// (Placeholder replaced by the generator.)
func OpenAPI(routes []Route, version string) map[string]any {
	return map[string]any{"openapi": "3.1.0", "info": map[string]any{"title": "appliance", "version": version}, "paths": map[string]any{}}
}
