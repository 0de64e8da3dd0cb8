// Package admin serves Switchyard's operator HTTP surface (SPEC §6): the
// /v1 JSON API over jobs, queues, routes and the DLQ (with the pauses of
// queues and routes), /metrics, /healthz, /readyz
// and a small dashboard at /.
//
// It owns routing, authentication, input validation and the JSON shapes of
// the API. It must never hold SQL (every query lives in internal/pgstore),
// never leak database errors or connection strings to a client (5xx
// answers are generic; the real error goes to the log), and never log or
// echo the admin token.
package admin
