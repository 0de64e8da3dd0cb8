package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/switchyard-dev/switchyard/dlq"
	"github.com/switchyard-dev/switchyard/internal/pgstore"
)

// DLQActions re-drives and discards entries (dlq.Service).
type DLQActions interface {
	Redrive(ctx context.Context, id int64) (int64, error)
	Discard(ctx context.Context, id int64) error
}

func (s *Server) jobCancel(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if err := s.store.JobCancel(r.Context(), id); err != nil {
		return actionError(err, "job", id)
	}
	job, err := s.store.JobGet(r.Context(), id)
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, job)
	return nil
}

func (s *Server) dlqRedrive(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if s.cfg.DLQ == nil {
		return notImplemented(w, r)
	}
	jobID, err := s.cfg.DLQ.Redrive(r.Context(), id)
	if err != nil {
		return actionError(err, "DLQ entry", id)
	}
	job, err := s.store.JobGet(r.Context(), jobID)
	if err != nil {
		return err
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"id": id, "job": job})
	return nil
}

func (s *Server) dlqDiscard(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	if s.cfg.DLQ == nil {
		return notImplemented(w, r)
	}
	if err := s.cfg.DLQ.Discard(r.Context(), id); err != nil {
		return actionError(err, "DLQ entry", id)
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"id": id, "discarded": true})
	return nil
}

// actionError maps the store's errors to statuses a client can act on.
func actionError(err error, what string, id int64) error {
	switch {
	case errors.Is(err, pgstore.ErrNotFound):
		return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("%s %d not found", what, id), field: "id"}
	case errors.Is(err, pgstore.ErrConflict):
		return &httpError{status: http.StatusConflict, msg: fmt.Sprintf("%s %d is not in a state that allows this", what, id)}
	case errors.Is(err, dlq.ErrStillPoison):
		return &httpError{status: http.StatusConflict, msg: err.Error()}
	}
	return err
}
