package apperr

import (
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Server classifies a failure talking to a project's server: the server going away (shutdown, restart,
// a lost connection: SQLSTATE classes 08 and 57) is Unavailable, anything else Internal.
func Server(err error, what string) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57")) ||
		pgconn.SafeToRetry(err) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return &Error{Kind: KindUnavailable, Msg: "the project's server does not answer", Cause: err}
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return &Error{Kind: KindUnavailable, Msg: "the project's server does not answer", Cause: err}
	}
	return Internal(err, "%s", what)
}
