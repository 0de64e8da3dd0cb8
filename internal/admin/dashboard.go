package admin

import (
	"embed"
	"fmt"
	"io/fs"
	"net/http"
	"path"
)

// ui is the operator console: one page and its script and style, embedded
// so that the binary serves it offline (no CDN, no web fonts).
//
//go:embed ui
var ui embed.FS

// uiTypes are the content types of the console's files, by extension.
var uiTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
}

// dashboardCSP allows scripts, styles and images from this server only
// (the files under /ui/, never inline code) and fetches to this origin.
// The script renders data with textContent and DOM calls, never as HTML,
// so that a queue name or a payload cannot inject markup; and a page that
// did inject some could run none of it.
const dashboardCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// dashboard serves the page without authentication: it holds no data, and
// its script sends the token (if any) on its /v1 calls.
func (s *Server) dashboard(w http.ResponseWriter, _ *http.Request) error {
	return serveUI(w, "index.html")
}

// uiFile serves GET /ui/{file}: the console's script and style.
func (s *Server) uiFile(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("file")
	if _, ok := uiTypes[path.Ext(name)]; !ok || name == "index.html" {
		return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("no such file: /ui/%s", name)}
	}
	return serveUI(w, name)
}

func serveUI(w http.ResponseWriter, name string) error {
	data, err := fs.ReadFile(ui, "ui/"+name)
	if err != nil {
		return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("no such file: /ui/%s", name)}
	}
	h := w.Header()
	h.Set("Content-Type", uiTypes[path.Ext(name)])
	h.Set("Content-Security-Policy", dashboardCSP)
	// The files change with the binary: a browser asks again on each load
	// (they are small) rather than run an old script against a new API.
	h.Set("Cache-Control", "no-cache")
	_, _ = w.Write(data) // a failed write means the client left
	return nil
}
