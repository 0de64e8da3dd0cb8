// Package config reads Switchyard's YAML file and environment into typed,
// validated settings. The YAML shape is the contract of SPEC §3: unknown
// keys are errors, zero values mean "use the default", and every problem is
// reported with the field it is about (routes[2].queue) and, for YAML
// problems, the line.
//
// It owns parsing and checking only. It must never open a connection, read
// anything but the one file and the environment it is handed, or put a
// secret (the Postgres URL, the admin token) into an error message.
package config
