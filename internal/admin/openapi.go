package admin

import (
	_ "embed"
	"net/http"
)

// openAPI describes this API; cmd/switchyard's TestAdminAPIMatchesItsOpenAPI
// fuzzes a real process against it with schemathesis.
//
//go:embed openapi.json
var openAPI []byte

func (s *Server) openapi(w http.ResponseWriter, _ *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	_, err := w.Write(openAPI)
	return err
}
