package httpapi

import (
	"io"
	"mime"
	"net/http"

	"github.com/theappliance/appliance/api"
)

func (s *Server) sqlHistory(r *Request) (*api.SQLHistoryList, error) {
	return s.svc.Studio().SQLHistory(r.Context(), r.Principal, r.PathValue("projectID"), r.Int("limit"))
}

// rowsQuery is the table editor's selection of a request.
func rowsQuery(r *Request) *api.RowsQuery {
	return &api.RowsQuery{Limit: r.Int("limit"), Offset: r.Int("offset"), Filter: r.Strs("filter"), Sort: r.Strs("sort")}
}

func (s *Server) readRows(r *Request) (*api.RowsReadResponse, error) {
	return s.svc.Studio().ReadRows(r.Context(), r.Principal, r.PathValue("projectID"), r.PathValue("schema"), r.PathValue("table"), rowsQuery(r))
}

// exportCSV streams the table's selected rows as a CSV download; an error once the download has started
// cuts it short (logged: the status is sent).
func (s *Server) exportCSV(r *Request) error {
	started := false
	err := s.svc.Studio().ExportCSV(r.Context(), r.Principal, r.PathValue("projectID"), r.PathValue("schema"), r.PathValue("table"), rowsQuery(r), func(name string) io.Writer {
		started = true
		h := r.W.Header()
		h.Set("Content-Type", "text/csv; charset=utf-8")
		h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
		h.Set("Cache-Control", "private, no-store")
		r.W.WriteHeader(http.StatusOK)
		return r.W
	})
	if err != nil && started {
		s.log.Warn("CSV export cut short", "project", r.PathValue("projectID"), "err", err)
		return nil
	}
	return err
}

func (s *Server) importCSV(r *Request) (*api.CSVImportResponse, error) {
	return s.svc.Studio().ImportCSV(r.Context(), r.Principal, r.PathValue("projectID"), r.PathValue("schema"), r.PathValue("table"), r.Body)
}

func (s *Server) createTable(r *Request, b *api.CreateTableRequest) (*api.DDLResponse, error) {
	return s.svc.Studio().CreateTable(r.Context(), r.Principal, r.PathValue("projectID"), r.Bool("dry_run"), b)
}

func (s *Server) addColumn(r *Request, b *api.ColumnDef) (*api.DDLResponse, error) {
	return s.svc.Studio().AddColumn(r.Context(), r.Principal, r.PathValue("projectID"), r.PathValue("schema"), r.PathValue("table"), r.Bool("dry_run"), b)
}

func (s *Server) alterColumn(r *Request, b *api.AlterColumnRequest) (*api.DDLResponse, error) {
	return s.svc.Studio().AlterColumn(r.Context(), r.Principal, r.PathValue("projectID"), r.PathValue("schema"), r.PathValue("table"), r.PathValue("column"), r.Bool("dry_run"), b)
}

func (s *Server) dropColumn(r *Request) (*api.DDLResponse, error) {
	return s.svc.Studio().DropColumn(r.Context(), r.Principal, r.PathValue("projectID"), r.PathValue("schema"), r.PathValue("table"), r.PathValue("column"), r.Bool("dry_run"))
}
