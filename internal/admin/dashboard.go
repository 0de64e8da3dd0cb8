package admin

import (
	_ "embed"
	"net/http"
)

//go:embed dashboard.html
var dashboardHTML []byte

// dashboardCSP allows only the page's own inline script and style and
// fetches to this origin; the script renders data with textContent, never
// as HTML, so queue names cannot inject markup.
const dashboardCSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// dashboard serves the page without authentication: it holds no data, and
// its script sends the token (if any) on its /v1 calls.
func (s *Server) dashboard(w http.ResponseWriter, _ *http.Request) error {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", dashboardCSP)
	_, _ = w.Write(dashboardHTML) // a failed write means the client left
	return nil
}
