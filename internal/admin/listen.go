package admin

import (
	"net/http"
	"time"
)

// NewHTTPServer returns an http.Server for h with every timeout set, so
// that slow or idle clients cannot hold connections open forever (the zero
// values mean "no limit"). WriteTimeout leaves room for a full page of
// DLQ entries with their payloads.
func NewHTTPServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    16 * maxHeaderBytes, // the guard answers past maxHeaderBytes
	}
}
