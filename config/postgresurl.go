package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
)

// reScheme is a URL scheme (RFC 3986, and a JDBC URL's jdbc:postgresql),
// which a key=value setting's key, never holding ':' or '/', cannot be
// mistaken for.
var reScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.:-]*$`)

// sslModes are libpq's sslmode values, which pgx accepts.
var sslModes = []string{"disable", "allow", "prefer", "require", "verify-ca", "verify-full"}

// CheckPostgresURL says what is wrong with a connection string, as a
// *FieldError on postgres.url, or returns nil. It checks the shape and
// the TLS settings: pgx's own error for a bad sslmode or a missing
// certificate file names neither, and cannot be shown as it is because it
// quotes the connection string. Only a setting's name and value, or a
// file's path, are shown: never the rest of the string, which may hold
// the password.
func CheckPostgresURL(conn string) error {
	bad := func(format string, args ...any) error {
		return &FieldError{Field: "postgres.url", Msg: fmt.Sprintf(format, args...)}
	}
	// Any other scheme (postgress://, jdbc:postgresql://) has an "=" in
	// its query, so pgx would read it as key=value settings, find none it
	// knows, and connect to the default socket instead: its error would
	// name that socket, not this string.
	if scheme, _, ok := strings.Cut(conn, "://"); ok && reScheme.MatchString(scheme) &&
		scheme != "postgres" && scheme != "postgresql" {
		return bad("scheme %q: want postgres:// or postgresql://", scheme)
	}
	if !validPostgresURL(conn) {
		return bad("invalid URL: want postgres://user@host:port/db or key=value settings")
	}
	settings := connSettings(conn)
	if mode, ok := settings["sslmode"]; ok && !slices.Contains(sslModes, mode) {
		return bad("sslmode %q is not one of %s", mode, strings.Join(sslModes, ", "))
	}
	for _, name := range []string{"sslrootcert", "sslcert", "sslkey"} {
		path, ok := settings[name]
		if !ok || path == "" || (name == "sslrootcert" && path == "system") {
			continue
		}
		if _, err := os.Stat(path); err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return bad("%s %s: %v", name, path, err)
		}
	}
	return nil
}

// validPostgresURL splits the two forms as pgx does. It is a shape check
// only: pgx's own parser also reads password and certificate files, which
// validation must not.
func validPostgresURL(s string) bool {
	if strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") {
		_, err := url.Parse(s)
		return err == nil
	}
	return strings.Contains(s, "=")
}

// connSettings reads the key=value settings of a postgres:// URL's query
// or of a keyword/value string, as far as CheckPostgresURL needs them. A
// string it cannot read yields none: pgx then says it is invalid.
func connSettings(conn string) map[string]string {
	out := map[string]string{}
	if strings.HasPrefix(conn, "postgres://") || strings.HasPrefix(conn, "postgresql://") {
		u, err := url.Parse(conn)
		if err != nil {
			return out
		}
		for k, v := range u.Query() {
			out[k] = v[len(v)-1]
		}
		return out
	}
	// Keyword/value: quoted values are rare for these settings; a value
	// this does not read right is left to pgx.
	for _, field := range strings.Fields(conn) {
		if k, v, ok := strings.Cut(field, "="); ok {
			out[k] = strings.Trim(v, "'")
		}
	}
	return out
}
