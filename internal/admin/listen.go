package admin

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
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
		MaxHeaderBytes:    64 << 10,
	}
}

// CheckListen refuses to serve the admin API without a token on an address
// other machines can reach: the API shows payloads and will change state.
// Loopback is 127.0.0.0/8, ::1 and "localhost"; an empty host (":8080")
// binds every interface and so is not loopback. Other host names are
// refused too, since what they resolve to can change.
func CheckListen(addr, token string) error {
	if token != "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("http.listen: %q is not host:port: %w", addr, err)
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Unmap().IsLoopback() {
		return nil
	}
	return fmt.Errorf("http.listen: %s is not a loopback address; set SWITCHYARD_ADMIN_TOKEN to listen on it", addr)
}
